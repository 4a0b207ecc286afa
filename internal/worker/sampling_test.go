package worker

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestWithSampling(t *testing.T) {
	rec := map[string]float64{"temperature": 0.6, "top_p": 0.8, "top_k": 20}
	for _, tc := range []struct {
		name     string
		body     string
		defaults map[string]float64
		want     map[string]any // the sampling fields of the result
	}{
		{"no defaults: temperature 1", `{"model":"m","messages":[]}`, nil, map[string]any{"temperature": 1.0}},
		{"recommended values", `{"model":"m","messages":[]}`, rec, map[string]any{"temperature": 0.6, "top_p": 0.8, "top_k": 20.0}},
		{"the request's own kept", `{"temperature":0,"top_k":5,"model":"m"}`, rec, map[string]any{"temperature": 0.0, "top_p": 0.8, "top_k": 5.0}},
		{"null filled in place", `{"temperature": null ,"model":"m","top_p":null}`, rec, map[string]any{"temperature": 0.6, "top_p": 0.8, "top_k": 20.0}},
		{"empty object", `{}`, nil, map[string]any{"temperature": 1.0}},
		{"all given", `{"temperature":1.5,"top_p":1,"top_k":0}`, rec, map[string]any{"temperature": 1.5, "top_p": 1.0, "top_k": 0.0}},
		{"escaped key counts", `{"temp\u0065rature":0.2}`, nil, map[string]any{"temperature": 0.2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := withSampling([]byte(tc.body), tc.defaults)
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			sampling := map[string]any{}
			for _, k := range []string{"temperature", "top_p", "top_k"} {
				if v, ok := got[k]; ok {
					sampling[k] = v
				}
			}
			if !reflect.DeepEqual(sampling, tc.want) {
				t.Fatalf("%s: sampling %v, want %v", out, sampling, tc.want)
			}
			var in map[string]any
			_ = json.Unmarshal([]byte(tc.body), &in)
			for k, v := range in {
				if _, s := tc.want[k]; !s && !reflect.DeepEqual(got[k], v) {
					t.Fatalf("%s: field %s changed", out, k)
				}
			}
		})
	}
	for _, body := range []string{`[]`, `"x"`, `{"a":`, ``} {
		if out := withSampling([]byte(body), rec); string(out) != body {
			t.Fatalf("%q became %q", body, out)
		}
	}
}

// BenchmarkWithSampling is what a chat's sampling defaults cost the worker
// on a small request that sends none.
func BenchmarkWithSampling(b *testing.B) {
	body := []byte(`{"model":"sim-chat","messages":[{"role":"user","content":"Hello there, how are you today?"}],"max_tokens":64,"stream":true}`)
	defaults := map[string]float64{"temperature": 0.6, "top_p": 0.8}
	b.ReportAllocs()
	for b.Loop() {
		_ = withSampling(body, defaults)
	}
}
