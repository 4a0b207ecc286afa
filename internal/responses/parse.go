package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// toolName is the function-name rule of the chat side, which the tools are
// sent to.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// statelessMsg ends every refusal of a feature that needs stored state.
const statelessMsg = "this gateway's Responses API is stateless (it stores no responses, conversations, files or prompts); send the whole conversation in input every time"

// Stateless is the 400 for a feature that needs a stored response,
// conversation, file or prompt: what names it. The server answers the
// endpoints that read stored responses (retrieve, delete, cancel, list
// input items) with it too.
func Stateless(what string) *api.Error {
	return api.BadRequest("%s is not supported: %s", what, statelessMsg)
}

// Request is a validated Responses API request: the chat-completions body
// that serves it, and what the response object echoes back.
type Request struct {
	// Model is the model asked for; the response reports it.
	Model string
	// Stream is whether the client asked for events.
	Stream bool

	chat []byte
	echo echo
	// paths maps each chat message to the Responses path it came from,
	// for ChatError.
	paths []msgPath
}

// echo holds the request's values that the response object repeats, each
// as sent (compacted); nil when not sent, so that the default is reported.
type echo struct {
	instructions      json.RawMessage
	maxOutputTokens   json.RawMessage
	temperature       json.RawMessage
	topP              json.RawMessage
	tools             json.RawMessage
	toolChoice        json.RawMessage
	parallelToolCalls json.RawMessage
	format            json.RawMessage
	verbosity         json.RawMessage
	effort            json.RawMessage
	summary           json.RawMessage
	truncation        json.RawMessage
	user              json.RawMessage
	metadata          json.RawMessage
}

// Chat is the chat-completions body that serves the request, shared with
// the Request (chat.Parse takes its own copy). It is a valid body for
// internal/chat's Parse, except that remote image URLs are passed on for
// that Parse to allow or refuse by the organisation's setting.
func (r *Request) Chat() []byte { return r.chat }

// Parse validates a Responses API request body and returns the request:
// its chat-completions body, and FromChat and NewStream to build the
// answers that echo its parameters. A malformed body is a 400 and field
// failures one 422 listing them all, as for chat completions, with
// Responses field paths (input.0.content); features that need server-side
// state are a 400 saying the API is stateless. store may be sent and is
// ignored: nothing is ever stored.
func Parse(body []byte) (*Request, error) {
	c, err := check(body)
	if err != nil {
		return nil, err
	}
	c.r.chat = appendChat(make([]byte, 0, len(body)+len(body)/8+256), &c.out)
	return c.r, nil
}

// check checks a body and builds its chat request.
func check(body []byte) (*checker, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, api.BadRequest("Request body is empty; send a JSON object")
	}
	if !jsontext.Valid(body) {
		return nil, jsonraw.Malformed(body)
	}
	c := &checker{r: &Request{}}
	top, ok := c.members.Read(body)
	if !ok {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "must be a JSON object"})
	}
	c.request(top)
	if c.refusal != nil {
		return nil, c.refusal
	}
	if err := c.v.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// chatBody is the chat-completions request, its members in the order sent.
type chatBody struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       json.RawMessage `json:"stream_options,omitempty"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens,omitempty"`
	Temperature         json.RawMessage `json:"temperature,omitempty"`
	TopP                json.RawMessage `json:"top_p,omitempty"`
	Tools               []chatTool      `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   json.RawMessage `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      json.RawMessage `json:"response_format,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
	User                json.RawMessage `json:"user,omitempty"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []chat.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID *string         `json:"tool_call_id,omitempty"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description json.RawMessage `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      json.RawMessage `json:"strict,omitempty"`
}

// checker walks a body, building the chat request and collecting every
// failure. A feature that cannot be served at all is a refusal: the first
// one is the answer, whatever else is wrong.
type checker struct {
	v       api.Validator
	refusal *api.Error
	r       *Request
	out     chatBody
	// members reads the request's objects, all into one list.
	members jsonraw.FieldReader
	// calls are the call_ids of the function_call items read so far.
	calls map[string]bool
}

func (c *checker) refuse(param, format string, args ...any) {
	if c.refusal == nil {
		c.refusal = &api.Error{Kind: api.KindInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
	}
}

func (c *checker) stateful(param, what string) {
	if c.refusal == nil {
		c.refusal = Stateless(what)
		c.refusal.Param = param
	}
}

// Generic checks: each reports its own failure and returns ok only for a
// usable value. "opt" ones treat absent and null alike.

func (c *checker) str(path *api.Path, raw json.RawMessage) (string, bool) {
	s, ok := jsonraw.DecodeString(raw)
	if !ok {
		c.v.AddAt(path, api.FieldWrongType, "must be a string")
	}
	return s, ok
}

func (c *checker) boolean(path *api.Path, raw json.RawMessage) (bool, bool) {
	if jsonraw.KindOf(raw) != jsonraw.Bool {
		c.v.AddAt(path, api.FieldWrongType, "must be true or false")
		return false, false
	}
	return bytes.TrimSpace(raw)[0] == 't', true
}

// object and array read the body's values as views of it: what the
// request keeps of them to echo is copied (compact, appendString), and
// the rest is written into the chat body before Parse returns.
func (c *checker) object(path *api.Path, raw json.RawMessage) (object, bool) {
	o, ok := c.members.Read(raw)
	if !ok {
		c.v.AddAt(path, api.FieldWrongType, "must be an object")
	}
	return o, ok
}

func (c *checker) array(path *api.Path, raw json.RawMessage) ([]json.RawMessage, bool) {
	a, ok := jsonraw.CheckedArrayView(raw)
	if !ok {
		c.v.AddAt(path, api.FieldWrongType, "must be an array")
	}
	return a, ok
}

func (c *checker) enum(path *api.Path, s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	if len(allowed) == 1 {
		c.v.AddAt(path, api.FieldEnum, "must be %s", allowed[0])
	} else {
		c.v.AddAt(path, api.FieldEnum, "one of %s", strings.Join(allowed, ", "))
	}
	return false
}

func (c *checker) optString(o object, path *api.Path, key string) (string, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return "", false
	}
	return c.str(path.Key(key), raw)
}

func (c *checker) optBool(o object, path *api.Path, key string) (bool, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return false, false
	}
	return c.boolean(path.Key(key), raw)
}

func (c *checker) optObject(o object, path *api.Path, key string) (object, bool) {
	raw, ok := o.Field(key)
	if !ok {
		return nil, false
	}
	return c.object(path.Key(key), raw)
}

func (c *checker) optEnum(o object, path *api.Path, key string, allowed ...string) (string, bool) {
	s, ok := c.optString(o, path, key)
	if !ok || !c.enum(path.Key(key), s, allowed...) {
		return "", false
	}
	return s, true
}

func (c *checker) required(o object, path *api.Path, key string) (json.RawMessage, bool) {
	raw, ok := o.Field(key)
	if !ok {
		c.v.AddAt(path.Key(key), api.FieldMissing, "required")
	}
	return raw, ok
}

func (c *checker) requiredString(o object, path *api.Path, key string) (string, bool) {
	raw, ok := c.required(o, path, key)
	if !ok {
		return "", false
	}
	return c.str(path.Key(key), raw)
}

// requiredName is a required string that may not be empty.
func (c *checker) requiredName(o object, path *api.Path, key string) (string, bool) {
	s, ok := c.requiredString(o, path, key)
	if ok && s == "" {
		c.v.AddAt(path.Key(key), api.FieldMissing, "must not be empty")
		return "", false
	}
	return s, ok
}

// number checks a numeric member against [lo, hi] and returns it compacted.
func (c *checker) number(o object, key string, lo, hi float64, msg string) json.RawMessage {
	raw, ok := o.Field(key)
	if !ok {
		return nil
	}
	if jsonraw.KindOf(raw) != jsonraw.Number {
		c.v.Add(key, api.FieldWrongType, "must be a number")
		return nil
	}
	raw = compact(raw)
	if x := jsonraw.Float(string(raw)); !(x >= lo && x <= hi) {
		c.v.Add(key, api.FieldOutOfRange, "%s", msg)
		return nil
	}
	return raw
}

// request checks the top-level members in a fixed order, so that a body
// with several failures always lists them the same way.
func (c *checker) request(top object) {
	c.stateless(top)

	if s, ok := c.requiredString(top, nil, "model"); ok {
		if s == "" {
			c.v.Add("model", api.FieldMissing, "must not be empty")
		}
		c.r.Model = s
		c.out.Model = s
	}
	c.instructions(top)
	c.input(top)

	if b, ok := c.optBool(top, nil, "stream"); ok && b {
		c.r.Stream = true
		c.out.Stream = true
		// The final response object carries usage, and the gateway bills
		// and times by it.
		c.out.StreamOptions = json.RawMessage(`{"include_usage":true}`)
	}
	c.maxOutputTokens(top)
	c.out.Temperature = c.number(top, "temperature", 0, 2, "must be between 0 and 2")
	c.r.echo.temperature = c.out.Temperature
	c.out.TopP = c.number(top, "top_p", 0, 1, "must be between 0 and 1")
	c.r.echo.topP = c.out.TopP
	c.tools(top)
	c.toolChoice(top)
	if b, ok := c.optBool(top, nil, "parallel_tool_calls"); ok {
		c.out.ParallelToolCalls = json.RawMessage(strconv.FormatBool(b))
		c.r.echo.parallelToolCalls = c.out.ParallelToolCalls
	}
	c.text(top)
	c.reasoning(top)
	if s, ok := c.optString(top, nil, "user"); ok {
		c.out.User = json.RawMessage(appendString(nil, s))
		c.r.echo.user = c.out.User
	}
	if s, ok := c.optEnum(top, nil, "truncation", "disabled", "auto"); ok {
		c.r.echo.truncation = json.RawMessage(appendString(nil, s))
	}
	if raw, ok := top.Field("metadata"); ok {
		if jsonraw.KindOf(raw) == jsonraw.Object {
			c.r.echo.metadata = compact(raw)
		} else {
			c.v.Add("metadata", api.FieldWrongType, "must be an object")
		}
	}
	c.optBool(top, nil, "store")
	if raw, ok := top.Field("top_logprobs"); ok {
		if jsonraw.KindOf(raw) != jsonraw.Number {
			c.v.Add("top_logprobs", api.FieldWrongType, "must be an integer")
		} else if n, res := jsonraw.Int(string(raw)); res == jsonraw.IntFraction || n != 0 {
			c.v.Add("top_logprobs", api.FieldNotSupported, "log probabilities are not served on the Responses API; use chat completions")
		}
	}
}

// stateless refuses the features that need the gateway to keep state.
func (c *checker) stateless(top object) {
	if _, ok := top.Field("previous_response_id"); ok {
		c.stateful("previous_response_id", "previous_response_id")
	}
	if _, ok := top.Field("conversation"); ok {
		c.stateful("conversation", "conversation")
	}
	if raw, ok := top.Field("background"); ok && jsonraw.KindOf(raw) == jsonraw.Bool && bytes.TrimSpace(raw)[0] == 't' {
		c.stateful("background", "background mode")
	}
	if _, ok := top.Field("prompt"); ok {
		c.stateful("prompt", "a stored prompt")
	}
	c.optBool(top, nil, "background")
}

func (c *checker) instructions(top object) {
	raw, ok := top.Field("instructions")
	if !ok {
		return
	}
	s, ok := c.str(api.PathOf("instructions"), raw)
	if !ok {
		return
	}
	c.r.echo.instructions = json.RawMessage(appendString(nil, s))
	if s == "" {
		// An empty system message is not no system message: templates
		// put their default one in only when there is none.
		return
	}
	c.out.Messages = append(c.out.Messages, chatMessage{Role: "system", Content: c.r.echo.instructions})
	c.r.paths = append(c.r.paths, msgPath{item: fromInstructions})
}

func (c *checker) maxOutputTokens(top object) {
	raw, ok := top.Field("max_output_tokens")
	if !ok {
		return
	}
	if jsonraw.KindOf(raw) != jsonraw.Number {
		c.v.Add("max_output_tokens", api.FieldWrongType, "must be an integer")
		return
	}
	n, res := jsonraw.Int(string(compact(raw)))
	switch {
	case res == jsonraw.IntFraction:
		c.v.Add("max_output_tokens", api.FieldWrongType, "must be a whole number")
	case res == jsonraw.IntOverflow:
		c.v.Add("max_output_tokens", api.FieldOutOfRange, "is too large")
	case n < 1:
		c.v.Add("max_output_tokens", api.FieldOutOfRange, "must be at least 1")
	default:
		// Written as a plain integer: the chat side reads 5e2 too, but
		// engines may not.
		c.out.MaxCompletionTokens = strconv.AppendInt(nil, n, 10)
		c.r.echo.maxOutputTokens = c.out.MaxCompletionTokens
	}
}

// hostedTool says what a hosted tool type is, for the refusal.
func hostedTool(typ string) string {
	if typ == "" {
		return "tools other than function tools"
	}
	return typ + " tools"
}

func (c *checker) tools(top object) {
	raw, ok := top.Field("tools")
	if !ok {
		return
	}
	elems, ok := c.array(api.PathOf("tools"), raw)
	if !ok {
		return
	}
	c.r.echo.tools = compact(raw)
	seen := make(map[string]int, len(elems))
	for i, e := range elems {
		path := api.PathOf("tools").Index(i)
		t, ok := c.object(path, e)
		if !ok {
			continue
		}
		typ, ok := c.requiredString(t, path, "type")
		if !ok {
			continue
		}
		if typ != "function" {
			c.refuse(path.Key("type").String(), "%s are not served by this gateway; only function tools are (%s.type is %q)", hostedTool(typ), path.String(), typ)
			continue
		}
		name, ok := c.requiredString(t, path, "name")
		if ok && !toolName.MatchString(name) {
			c.v.AddAt(path.Key("name"), api.FieldInvalid, "must be 1 to 64 letters, digits, underscores or hyphens")
			ok = false
		}
		// A call names its function: two of one name could not be told
		// apart.
		ok = ok && c.v.Unique(seen, path.Key("name"), "tools", name, i)
		fn := chatFunction{Name: name}
		if s, has := c.optString(t, path, "description"); has {
			fn.Description = json.RawMessage(appendString(nil, s))
		}
		if p, has := t.Field("parameters"); has {
			if jsonraw.KindOf(p) == jsonraw.Object {
				fn.Parameters = compact(p)
			} else {
				c.v.AddAt(path.Key("parameters"), api.FieldWrongType, "must be an object (a JSON schema)")
			}
		}
		if b, has := c.optBool(t, path, "strict"); has {
			fn.Strict = json.RawMessage(strconv.FormatBool(b))
		}
		if ok {
			c.out.Tools = append(c.out.Tools, chatTool{Type: "function", Function: fn})
		}
	}
}

func (c *checker) toolChoice(top object) {
	raw, ok := top.Field("tool_choice")
	if !ok {
		return
	}
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		s, _ := jsonraw.DecodeString(raw)
		if c.enum(api.PathOf("tool_choice"), s, "none", "auto", "required") {
			// A choice that needs a tool the request does not declare is
			// refused, as the API refuses it (and chat.Parse would).
			if s == "required" && len(c.out.Tools) == 0 {
				c.v.Add("tool_choice", api.FieldInvalid, "required needs tools to choose from")
				return
			}
			c.out.ToolChoice = compact(raw)
			c.r.echo.toolChoice = c.out.ToolChoice
		}
	case jsonraw.Object:
		o, _ := c.members.Read(raw)
		typ, ok := c.requiredString(o, api.PathOf("tool_choice"), "type")
		if !ok {
			return
		}
		switch typ {
		case "function":
			if name, ok := c.requiredName(o, api.PathOf("tool_choice"), "name"); ok {
				if !slices.ContainsFunc(c.out.Tools, func(x chatTool) bool { return x.Function.Name == name }) {
					c.v.AddAt(api.PathOf("tool_choice").Key("name"), api.FieldInvalid, "names no function of tools")
					return
				}
				c.out.ToolChoice = append(appendString([]byte(`{"type":"function","function":{"name":`), name), "}}"...)
				c.r.echo.toolChoice = compact(raw)
			}
		case "allowed_tools":
			c.v.Add("tool_choice.type", api.FieldNotSupported, "allowed_tools is not supported; send only the tools the model may call")
		default:
			c.refuse("tool_choice.type", "%s are not served by this gateway; only function tools are (tool_choice.type is %q)", hostedTool(typ), typ)
		}
	default:
		c.v.Add("tool_choice", api.FieldWrongType, "must be none, auto, required, or an object naming a function")
	}
}

func (c *checker) text(top object) {
	t, ok := c.optObject(top, nil, "text")
	if !ok {
		return
	}
	if raw, ok := t.Field("verbosity"); ok {
		c.r.echo.verbosity = compact(raw)
	}
	rawFormat, ok := t.Field("format")
	if !ok {
		return
	}
	path := api.PathOf("text").Key("format")
	f, ok := c.object(path, rawFormat)
	if !ok {
		return
	}
	typ, ok := c.requiredString(f, path, "type")
	if !ok || !c.enum(path.Key("type"), typ, "text", "json_object", "json_schema") {
		return
	}
	switch typ {
	case "text":
		// The chat side's default; nothing to send.
	case "json_object":
		c.out.ResponseFormat = json.RawMessage(`{"type":"json_object"}`)
	case "json_schema":
		js := struct {
			Name        string          `json:"name"`
			Description json.RawMessage `json:"description,omitempty"`
			Schema      json.RawMessage `json:"schema"`
			Strict      json.RawMessage `json:"strict,omitempty"`
		}{}
		name, nameOK := c.requiredName(f, path, "name")
		js.Name = name
		if s, has := c.optString(f, path, "description"); has {
			js.Description = json.RawMessage(appendString(nil, s))
		}
		schema, schemaOK := c.required(f, path, "schema")
		if schemaOK && jsonraw.KindOf(schema) != jsonraw.Object {
			c.v.AddAt(path.Key("schema"), api.FieldWrongType, "must be an object (a JSON schema)")
			schemaOK = false
		}
		js.Schema = compact(schema)
		if b, has := c.optBool(f, path, "strict"); has {
			js.Strict = json.RawMessage(strconv.FormatBool(b))
		}
		if !nameOK || !schemaOK {
			return
		}
		c.out.ResponseFormat = marshal(struct {
			Type       string `json:"type"`
			JSONSchema any    `json:"json_schema"`
		}{"json_schema", js})
	}
	c.r.echo.format = compact(rawFormat)
}

func (c *checker) reasoning(top object) {
	o, ok := c.optObject(top, nil, "reasoning")
	if !ok {
		return
	}
	if s, ok := c.optEnum(o, api.PathOf("reasoning"), "effort", "none", "minimal", "low", "medium", "high", "xhigh"); ok {
		c.r.echo.effort = json.RawMessage(appendString(nil, s))
		// The chat side knows every effort but xhigh; its nearest is high.
		if s == "xhigh" {
			s = "high"
		}
		c.out.ReasoningEffort = s
	}
	// The summary is always the engine's whole reasoning text, whatever
	// was asked for, but the setting is echoed so clients read it back.
	if s, ok := c.optEnum(o, api.PathOf("reasoning"), "summary", "auto", "concise", "detailed"); ok {
		c.r.echo.summary = json.RawMessage(appendString(nil, s))
	}
}
