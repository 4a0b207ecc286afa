package web

import (
	"encoding/json"
	"reflect"
	"testing"
)

// withHead changes a chunk's id and created to the stream's and nothing
// else, byte for byte; anything that is not an object stays as it is.
func TestWithHead(t *testing.T) {
	h := chunkHead{ID: "chatcmpl-1", Created: 7}
	for _, tc := range []struct{ in, want string }{
		{`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":9,"choices":[]}`, `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"choices":[]}`},
		{`{"id":"chatcmpl-1","created":7}`, `{"id":"chatcmpl-1","created":7}`},
		{`{ "choices" : [{"id":"x"}] , "id" : "y" }`, `{ "choices" : [{"id":"x"}] , "id" : "chatcmpl-1" }`},
		{`{"model":"m"}`, `{"model":"m"}`},
		{`[1,2]`, `[1,2]`},
		{`"id"`, `"id"`},
	} {
		if got := withHead([]byte(tc.in), h); string(got) != tc.want {
			t.Errorf("withHead(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := withHead([]byte(`{"id":"b"}`), chunkHead{}); string(got) != `{"id":"b"}` {
		t.Errorf("without a head: %s", got)
	}
}

func FuzzWithHead(f *testing.F) {
	f.Add([]byte(`{"id":"chatcmpl-2","created":9,"choices":[{"delta":{"content":"hi"}}]}`), "chatcmpl-1", int64(7))
	f.Add([]byte(`{"created":1,"id":"\u0041","x":{"id":"y"}}`), "a\"b", int64(-3))
	f.Add([]byte(`{}`), "x", int64(0))
	f.Fuzz(func(t *testing.T, data []byte, id string, created int64) {
		var in map[string]any
		if json.Unmarshal(data, &in) != nil || in == nil || id == "" {
			return
		}
		got := withHead(data, chunkHead{ID: id, Created: created})
		var out map[string]any
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("withHead(%s) = %s: %v", data, got, err)
		}
		for k, v := range in {
			switch k {
			case "id":
				var want any
				_ = json.Unmarshal(mustJSON(id), &want)
				v = want
			case "created":
				var want any
				_ = json.Unmarshal(mustJSON(created), &want)
				v = want
			}
			if !reflect.DeepEqual(out[k], v) {
				t.Fatalf("withHead(%s) = %s: %s is %v, want %v", data, got, k, out[k], v)
			}
		}
		if len(out) != len(in) {
			t.Fatalf("withHead(%s) = %s: members changed", data, got)
		}
	})
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
