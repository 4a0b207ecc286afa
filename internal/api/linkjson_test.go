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
	{Status: 400, Error: &ResultError{Message: "file: damaged wav file: no data chunk", Type: "invalid_request_error", Code: "unreadable_audio", Param: "file"}},
	{Status: 200, AudioFormat: "flac", AudioSeconds: ptr(2.5)},
	{Status: 200, Usage: &Usage{PromptTokens: 4, CompletionTokens: 8, TotalTokens: 12, ReasoningTokens: ptr(3), Estimated: true}, FinishReason: "length"},
	{Status: 400, Error: &ResultError{Message: "the encrypted request is invalid", Type: "invalid_request_error"},
		Sealed: json.RawMessage(`{"svc_e2e":1,"response_nonce":"bm9uY2U=","chunks":["c2VhbGVk"]}`)},
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
		{RequestID: "a", Kind: KindChat, Model: "m", Stream: true, AnswerMaxTokens: 64},
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
		`{"status":400,"sealed":{"svc_e2e":1,"chunks":["x"]}}`, `{"sealed":null}`, `{"sealed": [1, 2] ,"sealed":"s"}`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range boundedResults {
		f.Add([]byte(s.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got Result
		wantErr := json.Unmarshal(b, &want)
		want.bound()
		gotErr := DecodeResult(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: encoding/json says %v, DecodeResult %v", b, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
		if err := checkBounded(&got); err != "" {
			t.Fatalf("%q: %s: %+v", b, err, got)
		}
	})
}

// boundedResults are what a broken or hostile worker may send, and what
// the gateway takes of it.
var boundedResults = []struct {
	name, in string
	want     Result
}{
	{"counts at the bounds are believed",
		`{"status":200,"usage":{"prompt_tokens":4294967296,"completion_tokens":0,"total_tokens":4294967296,"reasoning_tokens":0,"cached_tokens":4294967296}}`,
		Result{Status: 200, Usage: &Usage{PromptTokens: MaxTokens, TotalTokens: MaxTokens, ReasoningTokens: ptr(0), CachedTokens: ptr(MaxTokens)}}},
	{"a count past belief is no usage",
		`{"status":200,"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807,"total_tokens":9223372036854775807}}`,
		Result{Status: 200}},
	{"one count just past it too",
		`{"status":200,"usage":{"prompt_tokens":1,"completion_tokens":4294967297,"total_tokens":4294967298}}`,
		Result{Status: 200}},
	{"a negative count is no usage",
		`{"status":200,"usage":{"prompt_tokens":-5,"completion_tokens":3,"total_tokens":-2}}`,
		Result{Status: 200}},
	{"so is a negative reasoning count",
		`{"status":200,"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"reasoning_tokens":-7}}`,
		Result{Status: 200}},
	{"or cached count",
		`{"status":200,"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"cached_tokens":-3}}`,
		Result{Status: 200}},
	{"a total short of its parts is their sum",
		`{"status":200,"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":1}}`,
		Result{Status: 200, Usage: &Usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 8}}},
	{"a missing total too",
		`{"status":200,"usage":{"prompt_tokens":4294967296,"completion_tokens":4294967296}}`,
		Result{Status: 200, Usage: &Usage{PromptTokens: MaxTokens, CompletionTokens: MaxTokens, TotalTokens: 2 * MaxTokens}}},
	{"a total past its parts is kept",
		`{"status":200,"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":9}}`,
		Result{Status: 200, Usage: &Usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 9}}},
	{"timings out of range are not measured",
		`{"status":200,"timing":{"ttft_ms":-50,"tokens_per_second":-3,"draft_acceptance_rate":7.5,"queue_wait_ms":-0.5,"worker_queue_wait_ms":604800001,"model_load_ms":1e300,"cold_start":true}}`,
		Result{Status: 200, Timing: Timing{ColdStart: ptr(true)}}},
	{"timings in range are kept",
		`{"status":200,"timing":{"ttft_ms":0,"tokens_per_second":1e9,"draft_acceptance_rate":1,"queue_wait_ms":604800000,"worker_queue_wait_ms":0.25,"model_load_ms":8000}}`,
		Result{Status: 200, Timing: Timing{TTFTMs: ptr(0.0), TokensPerSecond: ptr(1e9), DraftAcceptanceRate: ptr(1.0),
			QueueWaitMs: ptr(604800000.0), WorkerQueueWaitMs: ptr(0.25), ModelLoadMs: ptr(8000.0)}}},
	{"an acceptance rate below 0",
		`{"status":200,"timing":{"draft_acceptance_rate":-0.1}}`, Result{Status: 200}},
	{"negative energy and audio",
		`{"status":200,"energy_wh":-5,"audio_seconds":-1,"audio_format":"wav"}`, Result{Status: 200, AudioFormat: "wav"}},
	{"energy and audio past belief",
		`{"status":200,"energy_wh":1e300,"audio_seconds":1e300}`, Result{Status: 200}},
	{"energy and audio in range",
		`{"status":200,"energy_wh":0.5,"audio_seconds":3600}`, Result{Status: 200, EnergyWh: ptr(0.5), AudioSeconds: ptr(3600.0)}},
	{"a failure's usage is bounded as well",
		`{"status":503,"error":{"message":"x"},"usage":{"prompt_tokens":9223372036854775807}}`,
		Result{Status: 503, Error: &ResultError{Message: "x"}}},
}

// What a worker reports reaches the client's usage, the usage rows and
// the totals kept for good only within its bounds.
func TestDecodeResultBounds(t *testing.T) {
	for _, tt := range boundedResults {
		t.Run(tt.name, func(t *testing.T) {
			var got Result
			if err := DecodeResult([]byte(tt.in), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// checkBounded says what of r is out of bounds; "" when nothing.
func checkBounded(r *Result) string {
	if u := r.Usage; u != nil {
		for _, n := range []*int{&u.PromptTokens, &u.CompletionTokens, &u.TotalTokens, u.ReasoningTokens, u.CachedTokens} {
			if n != nil && (*n < 0 || *n > 2*MaxTokens) {
				return "a count out of range"
			}
		}
		if u.TotalTokens < u.PromptTokens+u.CompletionTokens {
			return "a total short of its parts"
		}
	}
	in := func(p *float64, hi float64) bool { return p == nil || *p >= 0 && *p <= hi }
	t := &r.Timing
	if !in(t.TTFTMs, MaxMs) || !in(t.QueueWaitMs, MaxMs) || !in(t.WorkerQueueWaitMs, MaxMs) || !in(t.ModelLoadMs, MaxMs) ||
		!in(t.TokensPerSecond, math.MaxFloat64) || !in(t.DraftAcceptanceRate, 1) {
		return "a timing out of range"
	}
	if !in(r.EnergyWh, maxEnergyWh) || !in(r.AudioSeconds, maxAudioSeconds) {
		return "a measurement out of range"
	}
	return ""
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
	// As DecodeResult bounds it: a total at least its parts.
	r.Usage.TotalTokens = r.Usage.PromptTokens + r.Usage.CompletionTokens
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
		v.SetFloat(0.5) // within every bound, an acceptance rate's too
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
