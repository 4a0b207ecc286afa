package chat

import (
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// toolName is the function-name rule the common chat-completions API uses.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// numRule is the range rule of one numeric top-level field.
type numRule struct {
	key     string
	integer bool
	lo, hi  float64 // inclusive bounds, ±Inf when open-ended
	above   bool    // lo itself is excluded
	msg     string  // what to say when out of range
}

// numericRules is read-only: the sampling and length controls, in the order
// their failures are reported.
var numericRules = [...]numRule{
	{key: "temperature", lo: 0, hi: 2, msg: "must be between 0 and 2"},
	{key: "top_p", lo: 0, hi: 1, msg: "must be between 0 and 1"},
	{key: "top_k", integer: true, lo: 0, hi: math.Inf(1), msg: "must be 0 or more"},
	{key: "min_p", lo: 0, hi: 1, msg: "must be between 0 and 1"},
	{key: "seed", integer: true, lo: math.Inf(-1), hi: math.Inf(1)},
	{key: "xtc_probability", lo: 0, hi: 1, msg: "must be between 0 and 1"},
	{key: "xtc_threshold", lo: 0, hi: 0.5, msg: "must be between 0 and 0.5"},
	{key: "mirostat", integer: true, lo: 0, hi: 2, msg: "must be 0, 1 or 2"},
	{key: "mirostat_tau", lo: 0, above: true, hi: math.Inf(1), msg: "must be greater than 0"},
	{key: "mirostat_eta", lo: 0, above: true, hi: math.Inf(1), msg: "must be greater than 0"},
	{key: "max_tokens", integer: true, lo: 1, hi: math.Inf(1), msg: "must be at least 1"},
	{key: "max_completion_tokens", integer: true, lo: 1, hi: math.Inf(1), msg: "must be at least 1"},
	{key: "frequency_penalty", lo: -2, hi: 2, msg: "must be between -2 and 2"},
	{key: "presence_penalty", lo: -2, hi: 2, msg: "must be between -2 and 2"},
	{key: "repeat_penalty", lo: 0, above: true, hi: math.Inf(1), msg: "must be greater than 0"},
	{key: "repeat_last_n", integer: true, lo: -1, hi: math.Inf(1), msg: "must be -1 or more"},
	{key: "top_logprobs", integer: true, lo: 0, hi: 20, msg: "must be between 0 and 20"},
}

// Values of the enumerated fields.
var (
	effortValues         = []string{"low", "medium", "high", "none", "minimal"}
	toolChoiceValues     = []string{"none", "auto", "required"}
	responseFormatValues = []string{"text", "json_object", "json_schema"}
)

// checker walks a body, filling the request and collecting every failure.
type checker struct {
	v    api.Validator
	opts Options
	r    *Request
	// msg holds the message being checked: a conversation's messages are
	// read one after another and none is kept, so they share one object
	// rather than each costing one.
	msg object
	// toolNames are the functions tools declares, for tool_choice.
	toolNames []string
	// callIDs are the ids of the tool calls of the assistant messages
	// read so far, which a tool message answers: a set, as a body may
	// hold tens of thousands of calls and answers.
	callIDs map[string]struct{}
	// ambiguous is the first member found under two cases, or a field
	// read here sent in another case (field).
	ambiguous error
}

// request checks the top-level fields in a fixed order, so a body with
// several failures always lists them the same way. Unknown fields are not
// looked at: they are forwarded as sent.
func (c *checker) request(top *object) {
	if s, ok := c.requiredString(top, nil, "model"); ok {
		if s == "" {
			c.v.Add("model", api.FieldMissing, "must not be empty")
		}
		c.r.Model = strings.Clone(s)
	}
	c.messages(top)

	if b, ok := c.optBool(top, nil, "stream"); ok {
		c.r.Stream = b
	}
	if so, ok := c.optObject(top, nil, "stream_options"); ok {
		c.optBool(so, api.PathOf("stream_options"), "include_usage")
	}
	c.tools(top)
	c.toolChoice(top)
	c.optBool(top, nil, "parallel_tool_calls")
	c.responseFormat(top)
	c.thinking(top)

	for _, rule := range numericRules {
		c.numeric(top, rule)
	}
	c.r.UserMaxTokens = c.userMaxTokens(top)

	c.logitBias(top)
	c.stop(top)
	c.optBool(top, nil, "logprobs")
	c.r.Choices = 1
	if raw, ok := c.field(top, nil, "n"); ok {
		if n, ok := c.integer(nil, "n", raw); ok {
			if n < 1 || n > MaxChoices {
				c.v.Add("n", api.FieldOutOfRange, "must be a whole number from 1 to %d", MaxChoices)
			} else {
				c.r.Choices = int(n)
			}
		}
	}
	c.optString(top, nil, "user")
}

func (c *checker) tools(top *object) {
	elems, ok := c.optArray(top, nil, "tools")
	if !ok {
		return
	}
	seen := make(map[string]int, len(elems))
	for i, raw := range elems {
		path := api.PathOf("tools").Index(i)
		tool, ok := c.object(path, "", raw)
		if !ok {
			continue
		}
		c.requiredEnum(tool, path, "type", "function")
		fn, ok := c.requiredObject(tool, path, "function")
		if !ok {
			continue
		}
		fpath := path.Key("function")
		name, ok := c.requiredString(fn, fpath, "name")
		if ok && !toolName.MatchString(name) {
			c.v.AddAt(fpath.Key("name"), api.FieldInvalid, "must be 1 to 64 letters, digits, underscores or hyphens")
		} else if ok {
			// A model calls a tool by its name: two of one name could not
			// be told apart, and OpenAI refuses them too.
			c.v.Unique(seen, fpath.Key("name"), "tools", name, i)
		}
		c.toolNames = append(c.toolNames, name)
		c.optString(fn, fpath, "description")
		c.optObject(fn, fpath, "parameters")
	}
}

func (c *checker) toolChoice(top *object) {
	raw, ok := c.field(top, nil, "tool_choice")
	if !ok {
		return
	}
	// A choice that needs a tool the request does not declare is refused,
	// as the OpenAI API and the engines refuse it: sent on, it would fail
	// at the engine, or be answered without the tool.
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		s, _ := decodeString(raw)
		if _, ok := c.enum(nil, "tool_choice", s, toolChoiceValues...); ok && s == "required" && len(c.toolNames) == 0 {
			c.v.Add("tool_choice", api.FieldInvalid, "required needs tools to choose from")
		}
	case jsonraw.Object:
		o, ok := c.object(nil, "tool_choice", raw)
		if !ok {
			return
		}
		c.requiredEnum(o, api.PathOf("tool_choice"), "type", "function")
		if fn, ok := c.requiredObject(o, api.PathOf("tool_choice"), "function"); ok {
			path := api.PathOf("tool_choice").Key("function")
			if name, ok := c.requiredString(fn, path, "name"); ok && !slices.Contains(c.toolNames, name) {
				c.v.AddAt(path.Key("name"), api.FieldInvalid, "names no function of tools")
			}
		}
	default:
		c.v.Add("tool_choice", api.FieldWrongType, "must be none, auto, required, or an object naming a function")
	}
}

func (c *checker) responseFormat(top *object) {
	rf, ok := c.optObject(top, nil, "response_format")
	if !ok {
		return
	}
	typ, ok := c.requiredEnum(rf, api.PathOf("response_format"), "type", responseFormatValues...)
	if !ok || typ == "text" {
		return
	}
	c.r.JSONMode = typ
	if typ != "json_schema" {
		return
	}
	js, ok := c.requiredObject(rf, api.PathOf("response_format"), "json_schema")
	if !ok {
		return
	}
	path := api.PathOf("response_format").Key("json_schema")
	c.requiredString(js, path, "name")
	c.optObject(js, path, "schema")
	if strict, ok := c.optBool(js, path, "strict"); ok {
		c.r.StrictSchema = strict
	}
}

// thinking reads the reasoning controls. When they disagree, off wins: an
// engine honours whichever off switch it reads, and every one sent is
// forwarded.
func (c *checker) thinking(top *object) {
	var on, off bool
	effort := func(s string) {
		switch s {
		case "none", "minimal":
			off = true
		case "low", "medium", "high":
			on = true
			if c.r.Effort == "" { // reasoning_effort is read before reasoning.effort and wins
				c.r.Effort = s
			}
		}
	}
	if s, ok := c.optEnum(top, nil, "reasoning_effort", effortValues...); ok {
		effort(s)
	}
	if ro, ok := c.optObject(top, nil, "reasoning"); ok {
		if raw, ok := c.field(ro, api.PathOf("reasoning"), "max_tokens"); ok {
			if n, ok := c.integer(nil, "reasoning.max_tokens", raw); ok {
				switch {
				case n < 0:
					c.v.Add("reasoning.max_tokens", api.FieldOutOfRange, "must be 0 or more")
				case n == 0:
					off = true
				default:
					c.r.ThinkingBudget = clampInt(n)
				}
			}
		}
		if s, ok := c.optEnum(ro, api.PathOf("reasoning"), "effort", effortValues...); ok {
			effort(s)
		}
	}
	if b, ok := c.optBool(top, nil, "enable_thinking"); ok {
		on = on || b
		off = off || !b
	}
	switch {
	case off:
		c.r.Thinking = new(false)
	case on:
		c.r.Thinking = new(true)
	}
}

func (c *checker) numeric(top *object, rule numRule) {
	raw, ok := c.field(top, nil, rule.key)
	if !ok {
		return
	}
	var x float64
	if rule.integer {
		n, ok := c.integer(nil, rule.key, raw)
		if !ok {
			return
		}
		x = float64(n)
	} else {
		f, ok := c.number(nil, rule.key, raw)
		if !ok {
			return
		}
		x = f
	}
	if x < rule.lo || x > rule.hi || (rule.above && x == rule.lo) {
		c.v.Add(rule.key, api.FieldOutOfRange, "%s", rule.msg)
	}
}

// userMaxTokens is the answer cap the client asked for: max_completion_tokens
// wins over max_tokens, as in the common API. Both were range-checked above.
func (c *checker) userMaxTokens(top *object) int {
	for _, key := range []string{"max_completion_tokens", "max_tokens"} {
		if raw, ok := c.field(top, nil, key); ok && jsonraw.KindOf(raw) == jsonraw.Number {
			if n, res := jsonraw.Int(string(raw)); res == jsonraw.IntOK && n >= 1 {
				return clampInt(n)
			}
			return 0
		}
	}
	return 0
}

func (c *checker) logitBias(top *object) {
	lb, ok := c.optObject(top, nil, "logit_bias")
	if !ok {
		return
	}
	for _, m := range lb.members {
		path := api.PathOf("logit_bias").Key(m.key)
		if !isTokenID(m.key) {
			c.v.AddAt(path, api.FieldInvalid, "keys must be token ids (whole numbers 0 or more)")
			continue
		}
		if f, ok := c.number(path, "", m.value); ok && (f < -100 || f > 100) {
			c.v.AddAt(path, api.FieldOutOfRange, "must be between -100 and 100")
		}
	}
}

func isTokenID(s string) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (c *checker) stop(top *object) {
	raw, ok := c.field(top, nil, "stop")
	if !ok {
		return
	}
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
	case jsonraw.Array:
		elems, _ := parseArray(raw)
		if len(elems) > 16 {
			c.v.Add("stop", api.FieldTooLong, "at most 16 stop sequences")
		}
		for i, e := range elems {
			c.str(api.PathOf("stop").Index(i), "", e)
		}
	default:
		c.v.Add("stop", api.FieldWrongType, "must be a string or an array of strings")
	}
}
