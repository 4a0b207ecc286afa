package completions

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestParse(t *testing.T) {
	ok := []struct {
		name, body string
		stream     bool
		chars      int
	}{
		{"plain", `{"model":"m","prompt":"Once upon"}`, false, 9},
		{"everything", `{"model":"m","prompt":"é","max_tokens":16,"temperature":0,"top_p":1,"stop":["a","b","c","d"],
			"stream":true,"stream_options":{"include_usage":true},"seed":-3,"n":1,"best_of":1,"echo":false,"logprobs":null,
			"suffix":"","user":"u","frequency_penalty":0.5,"logit_bias":{"1":2}}`, true, 1},
		{"stop string", `{"model":"m","prompt":"p","stop":"\n"}`, false, 1},
		{"nulls", `{"model":"m","prompt":"p","max_tokens":null,"stop":null,"stream":null,"n":null}`, false, 1},
	}
	for _, c := range ok {
		r, err := Parse([]byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if r.Model != "m" || r.Stream != c.stream || r.PromptChars != c.chars || string(r.Body) != c.body {
			t.Errorf("%s: %+v", c.name, r)
		}
	}

	bad := []struct {
		name, body string
		fields     []string // field:type
	}{
		{"empty object", `{}`, []string{"model:missing", "prompt:missing"}},
		{"empty model", `{"model":"","prompt":"p"}`, []string{"model:missing"}},
		{"model number", `{"model":1,"prompt":"p"}`, []string{"model:type_error"}},
		{"empty prompt", `{"model":"m","prompt":""}`, []string{"prompt:value_error"}},
		{"prompt object", `{"model":"m","prompt":{}}`, []string{"prompt:type_error"}},
		{"prompt empty array", `{"model":"m","prompt":[]}`, []string{"prompt:value_error"}},
		{"two prompts", `{"model":"m","prompt":["a","b"]}`, []string{"prompt:not_supported"}},
		{"token ids", `{"model":"m","prompt":[1,2,3]}`, []string{"prompt:not_supported"}},
		{"token arrays", `{"model":"m","prompt":[[1,2]]}`, []string{"prompt:not_supported"}},
		{"prompt element", `{"model":"m","prompt":[true]}`, []string{"prompt.0:type_error"}},
		{"max_tokens zero", `{"model":"m","prompt":"p","max_tokens":0}`, []string{"max_tokens:out_of_range"}},
		{"max_tokens past 32 bits", `{"model":"m","prompt":"p","max_tokens":2147483648}`, []string{"max_tokens:out_of_range"}},
		{"max_tokens 1e30", `{"model":"m","prompt":"p","max_tokens":1e30}`, []string{"max_tokens:out_of_range"}},
		{"max_tokens past 64 bits", `{"model":"m","prompt":"p","max_tokens":99999999999999999999}`, []string{"max_tokens:out_of_range"}},
		{"seed past 64 bits", `{"model":"m","prompt":"p","seed":1e30}`, []string{"seed:out_of_range"}},
		{"max_tokens fraction", `{"model":"m","prompt":"p","max_tokens":1.5}`, []string{"max_tokens:type_error"}},
		{"max_tokens string", `{"model":"m","prompt":"p","max_tokens":"8"}`, []string{"max_tokens:type_error"}},
		{"temperature", `{"model":"m","prompt":"p","temperature":2.5}`, []string{"temperature:out_of_range"}},
		{"top_p", `{"model":"m","prompt":"p","top_p":-0.1}`, []string{"top_p:out_of_range"}},
		{"five stops", `{"model":"m","prompt":"p","stop":["a","b","c","d","e"]}`, []string{"stop:too_long"}},
		{"stop element", `{"model":"m","prompt":"p","stop":["a",1]}`, []string{"stop.1:type_error"}},
		{"stop number", `{"model":"m","prompt":"p","stop":1}`, []string{"stop:type_error"}},
		{"stream string", `{"model":"m","prompt":"p","stream":"yes"}`, []string{"stream:type_error"}},
		{"include_usage", `{"model":"m","prompt":"p","stream_options":{"include_usage":1}}`, []string{"stream_options.include_usage:type_error"}},
		{"stream_options", `{"model":"m","prompt":"p","stream_options":[]}`, []string{"stream_options:type_error"}},
		{"n", `{"model":"m","prompt":"p","n":2}`, []string{"n:not_supported"}},
		{"best_of", `{"model":"m","prompt":"p","best_of":3}`, []string{"best_of:not_supported"}},
		{"echo", `{"model":"m","prompt":"p","echo":true}`, []string{"echo:not_supported"}},
		{"logprobs", `{"model":"m","prompt":"p","logprobs":2}`, []string{"logprobs:not_supported"}},
		{"suffix", `{"model":"m","prompt":"p","suffix":"end"}`, []string{"suffix:not_supported"}},
		{"user", `{"model":"m","prompt":"p","user":5}`, []string{"user:type_error"}},
		{"seed", `{"model":"m","prompt":"p","seed":0.5}`, []string{"seed:type_error"}},
		{"several", `{"prompt":["a","b"],"n":3,"echo":true}`, []string{"model:missing", "prompt:not_supported", "n:not_supported", "echo:not_supported"}},
	}
	for _, c := range bad {
		_, err := Parse([]byte(c.body))
		var ae *api.Error
		if !errors.As(err, &ae) || ae.HTTPStatus() != 422 {
			t.Errorf("%s: %v, want a 422", c.name, err)
			continue
		}
		var got []string
		for _, f := range ae.Fields {
			got = append(got, f.Field+":"+f.Type)
		}
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %v, want %v", c.name, got, c.fields)
		}
	}

	for _, body := range []string{``, `{`, `[]`, `null`, `"s"`} {
		_, err := Parse([]byte(body))
		if s := api.ErrorOf(err).HTTPStatus(); s != 400 && s != 422 {
			t.Errorf("%q: status %d, want 400 or 422", body, s)
		}
	}
}

// A one-prompt array is sent on as its string, the other fields kept.
// A whole number in another form reaches the engine written as one,
// which engines' integer fields require.
func TestParseWritesWholeNumbers(t *testing.T) {
	r, err := Parse([]byte(`{"model":"m","prompt":"p","max_tokens":2.0,"seed":1e2,"x":[1.0]}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["max_tokens"]) != "2" || string(got["seed"]) != "100" || string(got["x"]) != "[1.0]" {
		t.Errorf("body %s", r.Body)
	}
}

func TestParseOnePromptArray(t *testing.T) {
	r, err := Parse([]byte(`{"model":"m","prompt":["Hi \u00e9"],"max_tokens":3,"x":{"y":[1]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["prompt"]) != `"Hi é"` || string(got["max_tokens"]) != "3" || string(got["x"]) != `{"y":[1]}` || r.PromptChars != 4 {
		t.Fatalf("body %s, %d chars", r.Body, r.PromptChars)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":"p"}`, `{"model":"m","prompt":["p"],"stop":["a"],"n":1}`,
		`{"model":"m","prompt":[1],"stream":true,"stream_options":{"include_usage":true}}`, `[`, `null`, `{"prompt":[[]]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) || ae.Message == "" {
				t.Fatalf("Parse(%q) = %v", body, err)
			}
			return
		}
		if r.Model == "" || r.PromptChars == 0 {
			t.Fatalf("Parse(%q) = %+v", body, r)
		}
		// What goes to the worker parses again, to the same request, with
		// its prompt a string.
		again, err := Parse(r.Body)
		if err != nil || again.Model != r.Model || again.Stream != r.Stream || again.PromptChars != r.PromptChars {
			t.Fatalf("Parse(%q) then Parse(%q) = %+v, %v", body, r.Body, again, err)
		}
		var m struct{ Prompt string }
		if json.Unmarshal(r.Body, &m) != nil {
			t.Fatalf("Parse(%q): prompt of %s is not a string", body, r.Body)
		}
	})
}
