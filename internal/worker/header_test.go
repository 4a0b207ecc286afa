package worker

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// headerCases are headers as the gateway writes them and odd ones it does
// not; fast says whether the one-pass reader takes them itself.
var headerCases = []struct {
	name string
	in   string
	fast bool
}{
	{"chat", `{"request_id":"r-1","kind":"chat","model":"qwen3:8b","stream":true}`, true},
	{"everything plain", `{"request_id":"r-2","kind":"chat","model":"m","stream":false,"content_filter":"guard","e2e":true}`, true},
	{"spaces", " {\n\t\"kind\" : \"embeddings\" ,\r\n \"model\":\"bge\" } ", true},
	{"empty object", `{}`, true},
	{"non-ASCII model", `{"model":"modèle-日本"}`, true},
	{"duplicate member, the last wins", `{"model":"a","model":"b"}`, true},
	{"params", `{"kind":"transcription","model":"whisper","params":{"bytes":4,"format":"wav"}}`, false},
	{"escape", `{"model":"a\u003cb\"c"}`, false},
	{"null", `{"model":null,"stream":true}`, false},
	{"unknown member", `{"model":"m","priority":3}`, false},
	{"member in another case", `{"Model":"m"}`, false},
	{"invalid UTF-8", "{\"model\":\"\xff\"}", false},
	{"wrong type", `{"stream":"yes"}`, false},
	{"trailing comma", `{"model":"m",}`, false},
	{"trailing bytes", `{"model":"m"} x`, false},
	{"literal run on", `{"stream":truex}`, false},
	{"not an object", `["model"]`, false},
	{"cut short", `{"model":"m"`, false},
	{"empty", ``, false},
}

func TestDecodeHeader(t *testing.T) {
	for _, tt := range headerCases {
		t.Run(tt.name, func(t *testing.T) {
			var fast api.LinkRequest
			if got := readHeader([]byte(tt.in), &fast); got != tt.fast {
				t.Errorf("one pass = %v, want %v", got, tt.fast)
			}
			var want api.LinkRequest
			got, err := decodeHeader([]byte(tt.in))
			wantErr := json.Unmarshal([]byte(tt.in), &want)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, %v\nwant %+v, %v", got, err, want, wantErr)
			}
		})
	}
}

func TestDecodeHeaderAsMarshalled(t *testing.T) {
	// What the gateway marshals is read in one pass.
	for _, h := range []api.LinkRequest{
		{RequestID: "01J9ZQ", Kind: api.KindChat, Model: "Qwen/Qwen3-8B", Stream: true},
		{RequestID: "01J9ZR", Kind: api.KindEmbeddings, Model: "BAAI/bge-m3", ContentFilter: "llama-guard", E2E: true},
	} {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var got api.LinkRequest
		if !readHeader(b, &got) || !reflect.DeepEqual(got, h) {
			t.Fatalf("%s read as %+v", b, got)
		}
	}
}

func FuzzDecodeHeader(f *testing.F) {
	for _, tt := range headerCases {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want api.LinkRequest
		got, err := decodeHeader(b)
		wantErr := json.Unmarshal(b, &want)
		if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %+v, %v; want %+v, %v", b, got, err, want, wantErr)
		}
	})
}

func BenchmarkDecodeHeader(b *testing.B) {
	h := []byte(`{"request_id":"01J9ZQ3V7K2M","kind":"chat","model":"Qwen/Qwen3-8B","stream":true}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeHeader(h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeHeaderJSON(b *testing.B) {
	h := []byte(`{"request_id":"01J9ZQ3V7K2M","kind":"chat","model":"Qwen/Qwen3-8B","stream":true}`)
	b.ReportAllocs()
	for b.Loop() {
		var req api.LinkRequest
		if err := json.Unmarshal(h, &req); err != nil {
			b.Fatal(err)
		}
	}
}
