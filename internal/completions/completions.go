// Package completions checks POST /v1/completions requests: the legacy
// text completions, a raw prompt continued by a chat model with no chat
// template around it. The body goes to the worker as it came, but for a
// one-prompt array, which is sent as its string: every engine reads that.
//
// What the gateway cannot answer faithfully is refused up front rather than
// forwarded to an engine that may ignore it: several prompts or choices
// (n, best_of), token-id prompts, echo, logprobs and suffix.
package completions

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonbody"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// MaxStop is the most stop sequences a request may give, as OpenAI's
// completions API allows.
const MaxStop = 4

// Request is a checked completions request.
type Request struct {
	Model  string
	Stream bool
	// PromptChars is the prompt's length in characters, for estimates.
	PromptChars int
	// Body is what goes to the worker.
	Body []byte
}

// Parse checks a request; every failing field is listed in the 422.
func Parse(body []byte) (*Request, error) {
	// The members checked here are named for the case check: sent in
	// another case, an engine could obey them where this did not look.
	m, err := jsonbody.Members(body, "model", "prompt", "max_tokens", "n", "stream", "stream_options", "best_of", "echo", "logprobs", "suffix", "seed", "stop", "temperature", "top_p", "frequency_penalty", "presence_penalty", "user")
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected an object"})
	}
	r := &Request{Body: body}
	var v api.Validator
	switch raw := m["model"]; {
	case !jsonbody.Present(raw):
		v.Add("model", api.FieldMissing, "required")
	case json.Unmarshal(raw, &r.Model) != nil:
		v.Add("model", api.FieldWrongType, "expected a model id")
	case r.Model == "":
		v.Add("model", api.FieldMissing, "must not be empty")
	}
	prompt, single := checkPrompt(&v, m["prompt"])
	r.PromptChars = utf8.RuneCountInString(prompt)

	r.Stream = optBool(&v, m, "stream", "")
	if raw := m["stream_options"]; jsonbody.Present(raw) {
		var so map[string]json.RawMessage
		if json.Unmarshal(raw, &so) != nil {
			v.Add("stream_options", api.FieldWrongType, "expected an object")
		} else {
			optBool(&v, so, "include_usage", "stream_options.")
		}
	}
	// Whole numbers reach the engine written as such (100 for 1e2 or
	// 100.0), which integer fields of engines' servers require; one past
	// what they hold is out of range here, not malformed there.
	rewrite := false
	for _, f := range []struct {
		key    string
		lo, hi int64
		want   string
	}{
		{"max_tokens", 1, math.MaxInt32, "a whole number from 1 to 2147483647"},
		{"seed", math.MinInt64, math.MaxInt64, "a whole number that fits 64 bits"},
	} {
		if jsonbody.Present(m[f.key]) {
			_, _, rewritten := jsonbody.Whole(&v, m, f.key, f.lo, f.hi, f.want)
			rewrite = rewrite || rewritten
		}
	}
	number(&v, m, "temperature", false, 0, 2, "must be between 0 and 2")
	number(&v, m, "top_p", false, 0, 1, "must be between 0 and 1")
	number(&v, m, "frequency_penalty", false, -2, 2, "must be between -2 and 2")
	number(&v, m, "presence_penalty", false, -2, 2, "must be between -2 and 2")
	checkStop(&v, m["stop"])
	if n, ok := number(&v, m, "n", true, math.Inf(-1), math.Inf(1), ""); ok && n != 1 {
		v.Add("n", api.FieldNotSupported, "only n=1 is supported")
	}
	if n, ok := number(&v, m, "best_of", true, math.Inf(-1), math.Inf(1), ""); ok && n != 1 {
		v.Add("best_of", api.FieldNotSupported, "only best_of=1 is supported")
	}
	if optBool(&v, m, "echo", "") {
		v.Add("echo", api.FieldNotSupported, "echo is not supported; the prompt is not repeated in the reply")
	}
	if jsonbody.Present(m["logprobs"]) {
		v.Add("logprobs", api.FieldNotSupported, "logprobs are not supported on text completions; use /v1/chat/completions")
	}
	if raw := m["suffix"]; jsonbody.Present(raw) {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			v.Add("suffix", api.FieldWrongType, "expected a string")
		} else if s != "" {
			v.Add("suffix", api.FieldNotSupported, "suffix (insertion) is not supported")
		}
	}
	if raw := m["user"]; jsonbody.Present(raw) {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			v.Add("user", api.FieldWrongType, "expected a string")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if single {
		// The array's one string replaces it: the simulator and Ollama's
		// generate read a prompt as a string only.
		s, err := json.Marshal(prompt)
		if err != nil {
			return nil, api.BadRequest("prompt: %v", err)
		}
		m["prompt"] = s
		rewrite = true
	}
	if rewrite {
		var err error
		if r.Body, err = json.Marshal(m); err != nil {
			return nil, api.BadRequest("Malformed JSON: %v", err)
		}
	}
	return r, nil
}

// checkPrompt checks the prompt: a string, or an array of one string,
// which single reports.
func checkPrompt(v *api.Validator, raw json.RawMessage) (prompt string, single bool) {
	if !jsonbody.Present(raw) {
		v.Add("prompt", api.FieldMissing, "required")
		return "", false
	}
	// A prompt is most of a request's bytes: it is decoded in one pass of
	// jsontext's scanner, where json.Unmarshal reads it twice.
	if prompt, ok := jsonraw.DecodeString(raw); ok {
		if prompt == "" {
			v.Add("prompt", api.FieldInvalid, "must not be empty")
		}
		return prompt, false
	}
	items, ok := jsonraw.DecodeArray(raw)
	if !ok {
		v.Add("prompt", api.FieldWrongType, "expected a string or an array of one string")
		return "", false
	}
	switch {
	case len(items) == 0:
		v.Add("prompt", api.FieldInvalid, "must not be empty")
		return "", false
	case isTokens(items[0]):
		v.Add("prompt", api.FieldNotSupported, "token-id prompts are not supported; send the prompt as text")
		return "", false
	case len(items) > 1:
		v.Add("prompt", api.FieldNotSupported, "one prompt per request; send each prompt as its own request")
		return "", false
	}
	prompt, ok = jsonraw.DecodeString(items[0])
	if !ok {
		v.Add("prompt.0", api.FieldWrongType, "expected a string")
		return "", false
	}
	if prompt == "" {
		v.Add("prompt.0", api.FieldInvalid, "must not be empty")
	}
	return prompt, true
}

// isTokens reports whether an element of a prompt array is a token id or
// an array of them.
func isTokens(raw json.RawMessage) bool {
	var n float64
	var ns []float64
	return json.Unmarshal(raw, &n) == nil || json.Unmarshal(raw, &ns) == nil
}

func checkStop(v *api.Validator, raw json.RawMessage) {
	if !jsonbody.Present(raw) {
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		v.Add("stop", api.FieldWrongType, "must be a string or an array of strings")
		return
	}
	if len(items) > MaxStop {
		v.Add("stop", api.FieldTooLong, "at most %d stop sequences", MaxStop)
	}
	for i, it := range items {
		if json.Unmarshal(it, &s) != nil {
			v.Add("stop."+strconv.Itoa(i), api.FieldWrongType, "expected a string")
		}
	}
}

// optBool reads an optional boolean, false when absent, null or not one;
// path is where m lies, for the field path of a failure.
func optBool(v *api.Validator, m map[string]json.RawMessage, key, path string) bool {
	raw := m[key]
	if !jsonbody.Present(raw) {
		return false
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		v.Add(path+key, api.FieldWrongType, "expected a boolean")
	}
	return b
}

// number reads an optional number within [lo, hi], a whole one when
// integer is set; ok is false when it is absent or failed.
func number(v *api.Validator, m map[string]json.RawMessage, key string, integer bool, lo, hi float64, msg string) (n float64, ok bool) {
	raw := m[key]
	if !jsonbody.Present(raw) {
		return 0, false
	}
	if json.Unmarshal(raw, &n) != nil {
		v.Add(key, api.FieldWrongType, "expected a number")
		return 0, false
	}
	if integer && n != math.Trunc(n) {
		v.Add(key, api.FieldWrongType, "expected a whole number")
		return 0, false
	}
	if n < lo || n > hi {
		v.Add(key, api.FieldOutOfRange, "%s", msg)
		return 0, false
	}
	return n, true
}
