package openai

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// usageCases are usage objects as engines send them and odd ones; fast
// says whether readUsage takes them itself.
var usageCases = []struct {
	in   string
	fast bool
}{
	{`{"prompt_tokens":12,"total_tokens":21,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":4},"prompt_tokens_details":null}`, true},
	{`{"completion_tokens":6,"prompt_tokens":12,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":4}}`, true},
	{`{"prompt_tokens":5.0,"completion_tokens":"3","total_tokens":null}`, true},
	{`{"prompt_tokens":7,"total_tokens":7,"completion_tokens":0,"prompt_tokens_details":null}`, true},
	{`{"prompt_tokens":5,"completion_tokens_details":{"reasoning_tokens":null,"other":[1,{"a":2}]}}`, true},
	{` { "prompt_tokens" : 1 , "x" : {"prompt_tokens":99} } `, true},
	{`{"prompt_tokens":true,"completion_tokens":{},"total_tokens":[1]}`, true},
	{`{}`, true},
	{`{"Prompt_Tokens":5}`, false},
	{`{"prompt_tokens":5,"prompt_tokens":6}`, false},
	{`{"completion_tokens_details":{"Reasoning_Tokens":2}}`, false},
	{`{"completion_tokens_details":{"reasoning_tokens":2,"reasoning_tokens":3}}`, false},
	{`{"completion_tokens_details":3}`, false},
	{`{"prompt_tokens_details":"none"}`, false},
	{`{"prompt_\u0074okens":5}`, false},
	{`[1,2]`, false},
	{`"junk"`, false},
}

// usageByReflection is captureUsage as encoding/json alone reads it.
func usageByReflection(raw []byte) *api.Usage {
	var st stats
	var u usageJSON
	if isNull(raw) || json.Unmarshal(raw, &u) != nil {
		return nil
	}
	f := u.fields()
	st.usage = &api.Usage{PromptTokens: int(f.prompt), CompletionTokens: int(f.completion), TotalTokens: int(f.total)}
	if st.usage.TotalTokens == 0 {
		st.usage.TotalTokens = st.usage.PromptTokens + st.usage.CompletionTokens
	}
	if f.hasReasoning {
		st.usage.ReasoningTokens = ptr(int(f.reasoning))
	}
	if f.hasCached {
		st.usage.CachedTokens = ptr(int(f.cached))
	}
	return st.usage
}

func TestReadUsage(t *testing.T) {
	for _, tt := range usageCases {
		var f usageFields
		if got := readUsage([]byte(tt.in), &f); got != tt.fast {
			t.Errorf("readUsage(%s) = %v, want %v", tt.in, got, tt.fast)
		}
		var st stats
		st.captureUsage(json.RawMessage(tt.in))
		if want := usageByReflection([]byte(tt.in)); !reflect.DeepEqual(st.usage, want) {
			t.Errorf("captureUsage(%s) = %+v, want %+v", tt.in, st.usage, want)
		}
	}
}

func FuzzCaptureUsage(f *testing.F) {
	for _, tt := range usageCases {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return // captureUsage is only given valid JSON
		}
		var st stats
		st.captureUsage(b)
		if want := usageByReflection(b); !reflect.DeepEqual(st.usage, want) {
			t.Fatalf("captureUsage(%s) = %+v, want %+v", b, st.usage, want)
		}
	})
}
