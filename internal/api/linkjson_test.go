package api

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

var linkResults = []Result{
	{Status: 200},
	{Status: 200, Usage: &Usage{PromptTokens: 12, CompletionTokens: 16, TotalTokens: 28}, FinishReason: "stop",
		Timing: Timing{TTFTMs: ptr(0.52), TokensPerSecond: ptr(1234.5), ColdStart: ptr(false)}},
	{Status: 200, Usage: &Usage{PromptTokens: 1, ReasoningTokens: ptr(7), CachedTokens: ptr(0)}, EnergyWh: ptr(1.5e-7),
		Timing: Timing{DraftAcceptanceRate: ptr(0.25), QueueWaitMs: ptr(3e21), WorkerQueueWaitMs: ptr(-1.0), ModelLoadMs: ptr(0.0)},
		Notice: &Notice{Code: "trimmed", Message: "<b>&\"quoted\"\u2028</b>"}},
	{Status: 503, Retryable: true, Error: &ResultError{Message: "engine \xff unreachable\n", Type: "upstream_error", Code: "x"}},
	{Status: 422, Final: true, Error: &ResultError{Message: ""}},
	{Status: 429, Error: &ResultError{Message: "busy", RetryAfter: 7}},
	{Status: 200, AudioFormat: "flac", AudioSeconds: ptr(2.5)},
}

// The bytes are encoding/json's, so a gateway of an older release reads
// them as it always did.
func TestResultAppendJSON(t *testing.T) {
	for i, r := range linkResults {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("result %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// A measurement json.Marshal cannot write is left out rather than the
// whole result lost.
func TestResultAppendJSONNotFinite(t *testing.T) {
	r := Result{Status: 200, EnergyWh: ptr(math.NaN()), AudioSeconds: ptr(math.Inf(-1)), Timing: Timing{TokensPerSecond: ptr(math.Inf(1)), TTFTMs: ptr(2.0)}}
	var back Result
	if err := DecodeResult(r.AppendJSON(nil), &back); err != nil {
		t.Fatal(err)
	}
	want := Result{Status: 200, Timing: Timing{TTFTMs: ptr(2.0)}}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("got %+v, want %+v", back, want)
	}
}

func TestLinkRequestAppendJSON(t *testing.T) {
	for i, r := range []LinkRequest{
		{RequestID: "0b6f7c9e", Kind: KindChat, Model: "m"},
		{RequestID: "r", Kind: "transcription", Model: "whisper<1>", Stream: true, Params: json.RawMessage(`{ "language" : "en&" }`),
			ContentFilter: "guard", E2E: true},
		{RequestID: "t", Kind: KindChat, Model: "m", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			Tracestate: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
	} {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("request %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// The decoders agree with encoding/json on every input: the same inputs
// refused, the same values read from the rest.
func FuzzDecodeResult(f *testing.F) {
	for _, r := range linkResults {
		f.Add(r.AppendJSON(nil))
	}
	for _, s := range []string{
		`null`, `{}`, `[]`, `"x"`, `{"status":200} x`, `{"STATUS":201,"Usage":{"Prompt_Tokens":3}}`,
		`{"status":1.0}`, `{"status":1e2}`, `{"status":99999999999999999999}`, `{"status":"200"}`,
		`{"error":null,"usage":null,"notice":null,"timing":null,"energy_wh":null}`,
		`{"error":{"message":"a"},"error":{"type":"b"}}`, `{"timing":{"ttft_ms":null,"cold_start":null}}`,
		`{"timing":{"cold_start":"yes"}}`, `{"retryable":1}`, `{"usage":{"cached_tokens":null}}`,
		`{"finish_reason":"\u00e9\ud800"}`, `{"unknown":[1,{"a":[]}],"status":5}`, `{"energy_wh":1e400}`,
		`{"s\u0074atus":7}`, `{"status":200,}`, ` {"status" : 200 } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got Result
		wantErr := json.Unmarshal(b, &want)
		gotErr := DecodeResult(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: encoding/json says %v, DecodeResult %v", b, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

func FuzzDecodeLinkRequest(f *testing.F) {
	for _, s := range []string{
		`{"request_id":"r","kind":"chat","model":"m","stream":false}`,
		`{"request_id":"r","kind":"transcription","model":"m","stream":true,"params":{"language":"en"},"content_filter":"g","e2e":true}`,
		`{"params":null}`, `{"params": [1, 2] }`, `{"Stream":true,"MODEL":"x"}`, `{"stream":null,"e2e":"1"}`,
		`{"model":"a\nb"}`, `{"model":1}`, `[]`, `{"params":}`,
		`{"request_id":"r","kind":"chat","model":"m","stream":false,"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"congo=t61rcWkgMzE"}`,
		`{"traceparent":null,"tracestate":1}`, `{"TraceParent":"x","traceparent":"y"}`, `{"tracestate":"a=\u0062"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got LinkRequest
		wantErr := json.Unmarshal(b, &want)
		gotErr := DecodeLinkRequest(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: encoding/json says %v, DecodeLinkRequest %v", b, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

func BenchmarkDecodeResult(b *testing.B) {
	msg := linkResults[1].AppendJSON(nil)
	b.ReportAllocs()
	for b.Loop() {
		var r Result
		if err := DecodeResult(msg, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResultEncodingJSON(b *testing.B) {
	msg := linkResults[1].AppendJSON(nil)
	b.ReportAllocs()
	for b.Loop() {
		var r Result
		if err := json.Unmarshal(msg, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// A field added to Result or LinkRequest must be added to their writers
// and readers too: with every field set, the bytes and the values read
// back are encoding/json's.
func TestLinkJSONCoversEveryField(t *testing.T) {
	var r Result
	fill(reflect.ValueOf(&r).Elem())
	var h LinkRequest
	fill(reflect.ValueOf(&h).Elem())
	for _, c := range []struct {
		v      any
		append func() []byte
		decode func([]byte) (any, error)
	}{
		{&r, func() []byte { return r.AppendJSON(nil) }, func(b []byte) (any, error) {
			var back Result
			return &back, DecodeResult(b, &back)
		}},
		{&h, func() []byte { return h.AppendJSON(nil) }, func(b []byte) (any, error) {
			var back LinkRequest
			return &back, DecodeLinkRequest(b, &back)
		}},
	} {
		want, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		got := c.append()
		if string(got) != string(want) {
			t.Errorf("%T:\n got %s\nwant %s", c.v, got, want)
		}
		back, err := c.decode(want)
		if err != nil || !reflect.DeepEqual(back, c.v) {
			t.Errorf("%T: read back %+v (%v), want %+v", c.v, back, err, c.v)
		}
	}
}

// fill sets every field of v to something not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(3)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"a":1}`))
		}
	}
}

// A row no worker took has null worker fields (rule 1), and reads back as
// "" as encoding/json leaves a string at null.
func TestUsageRowWorkerNullWhenNone(t *testing.T) {
	b, err := json.Marshal(UsageRow{StatusCode: 422})
	if err != nil || !strings.Contains(string(b), `"worker_id":null,"worker_name":null`) {
		t.Fatalf("%s %v", b, err)
	}
	b, _ = json.Marshal(UsageRow{WorkerID: "wk_1", WorkerName: "gpu <1>"})
	var back UsageRow
	if err := json.Unmarshal(b, &back); err != nil || back.WorkerID != "wk_1" || back.WorkerName != "gpu <1>" ||
		!strings.Contains(string(b), `"worker_id":"wk_1","worker_name":"gpu \u003c1\u003e"`) {
		t.Fatalf("%s %+v %v", b, back, err)
	}
}
