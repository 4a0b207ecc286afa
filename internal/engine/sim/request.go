package sim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// chatRequest is the part of an OpenAI chat-completions request the
// simulator reads. Everything else is accepted and ignored, as a real
// engine ignores sampling switches it does not have.
type chatRequest struct {
	Model string `json:"model"`
	// RawMessages is decoded into Messages on its own, so that hashing the
	// messages for the seed does not take a second pass over the body.
	RawMessages         json.RawMessage `json:"messages"`
	Messages            []message       `json:"-"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *wholeInt       `json:"max_tokens"`
	MaxCompletionTokens *wholeInt       `json:"max_completion_tokens"`
	Seed                *wholeInt       `json:"seed"`
	N                   *float64        `json:"n"`
	Stop                json.RawMessage `json:"stop"`
	Tools               []tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ResponseFormat      *responseFormat `json:"response_format"`
	ReasoningEffort     string          `json:"reasoning_effort"`
	Reasoning           *reasoningOpts  `json:"reasoning"`
	EnableThinking      *bool           `json:"enable_thinking"`
	ChatTemplateKwargs  *struct {
		EnableThinking *bool `json:"enable_thinking"`
	} `json:"chat_template_kwargs"`

	// messagesJSON is the compacted messages array, hashed for the seed.
	messagesJSON []byte
	// stops are the non-empty stop sequences.
	stops []string
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type reasoningOpts struct {
	Effort    string    `json:"effort"`
	MaxTokens *wholeInt `json:"max_tokens"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Strict bool            `json:"strict"`
		Schema json.RawMessage `json:"schema"`
	} `json:"json_schema"`
}

// parseChatRequest decodes and checks a chat request body.
func parseChatRequest(body []byte) (*chatRequest, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	if len(req.RawMessages) > 0 {
		if err := json.Unmarshal(req.RawMessages, &req.Messages); err != nil {
			return nil, fmt.Errorf("messages: %w", err)
		}
	}
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("messages: at least one message is required")
	}
	for _, p := range []struct {
		name string
		v    *wholeInt
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return nil, fmt.Errorf("%s: must be at least 1, got %d", p.name, *p.v)
		}
	}
	if req.N != nil && (*req.N < 1 || *req.N > maxChoices || *req.N != float64(int(*req.N))) {
		return nil, fmt.Errorf("n: must be a whole number from 1 to %d, got %v", maxChoices, *req.N)
	}
	if req.Reasoning != nil && req.Reasoning.MaxTokens != nil && *req.Reasoning.MaxTokens < 0 {
		return nil, fmt.Errorf("reasoning.max_tokens: must be 0 or more, got %d", *req.Reasoning.MaxTokens)
	}
	stops, err := req.stopSequences()
	if err != nil {
		return nil, err
	}
	req.stops = stops
	// Hash the messages independently of the client's whitespace.
	var buf bytes.Buffer
	if err := json.Compact(&buf, req.RawMessages); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	req.messagesJSON = buf.Bytes()
	return &req, nil
}

// wholeInt is an integer field as engines read one: a JSON number without
// a fraction, written 5 or 5.0. The gateway checks such fields as whole
// numbers and forwards them as the client wrote them.
type wholeInt int64

func (w *wholeInt) UnmarshalJSON(b []byte) error {
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*w = wholeInt(n)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("%s is not a whole number", b)
	}
	*w = wholeInt(f)
	return nil
}

// maxChoices bounds n, as an engine bounds what it decodes at once.
const maxChoices = 128

// choices is how many replies the request asks for (n).
func (r *chatRequest) choices() int {
	if r.N == nil {
		return 1
	}
	return int(*r.N)
}

// contentPart is one part of an array content. Only text is read; the
// simulator counts images but never looks at them.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// isText reports whether the part is text; some clients leave out the
// type of a text part.
func (p *contentPart) isText() bool { return p.Type == "text" || (p.Type == "" && p.Text != "") }

// parts is the content of a message as parts: a string content is one
// text part.
func (m *message) parts() []contentPart {
	if len(m.Content) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []contentPart{{Type: "text", Text: s}}
	}
	var parts []contentPart
	if json.Unmarshal(m.Content, &parts) != nil {
		return nil
	}
	return parts
}

// text is the text of a message: a string content, or its text parts
// joined by newlines. Images and files carry no text the simulator reads.
func (m *message) text() string {
	var texts []string
	for _, p := range m.parts() {
		if p.isText() {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// promptTokens estimates the prompt length at about four characters a
// token, as a rough stand-in for a tokenizer.
func (r *chatRequest) promptTokens() int {
	n := 0
	for i := range r.Messages {
		n += len(r.Messages[i].text())
	}
	return max(1, (n+3)/4)
}

// lastUserText is the text of the last user message, where directives live.
func (r *chatRequest) lastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].text()
		}
	}
	return ""
}

// maxTokens is the requested output cap; max_completion_tokens wins.
func (r *chatRequest) maxTokens() (int, bool) {
	switch {
	case r.MaxCompletionTokens != nil:
		return int(*r.MaxCompletionTokens), true
	case r.MaxTokens != nil:
		return int(*r.MaxTokens), true
	}
	return 0, false
}

// stopSequences reads stop as a string or an array of strings.
func (r *chatRequest) stopSequences() ([]string, error) {
	if len(r.Stop) == 0 || string(r.Stop) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(r.Stop, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(r.Stop, &many); err != nil {
		return nil, fmt.Errorf("stop: want a string or an array of strings")
	}
	out := many[:0:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// thinking decides whether a reasoning model thinks and at which effort.
// Any request switch that turns thinking off wins over one that turns it
// on; with neither, the model's default applies.
func (r *chatRequest) thinking(def bool) (on bool, effort string) {
	var offs, ons int
	vote := func(v bool) {
		if v {
			ons++
		} else {
			offs++
		}
	}
	for _, e := range []string{r.ReasoningEffort, r.reasoningEffort()} {
		switch strings.ToLower(e) {
		case "":
		case "none", "minimal":
			vote(false)
		case "low", "medium", "high":
			vote(true)
			effort = strings.ToLower(e)
		case "xhigh", "max":
			vote(true)
			effort = "high"
		}
	}
	if r.EnableThinking != nil {
		vote(*r.EnableThinking)
	}
	if r.ChatTemplateKwargs != nil && r.ChatTemplateKwargs.EnableThinking != nil {
		vote(*r.ChatTemplateKwargs.EnableThinking)
	}
	if r.Reasoning != nil && r.Reasoning.MaxTokens != nil && *r.Reasoning.MaxTokens == 0 {
		vote(false)
	}
	switch {
	case offs > 0:
		return false, ""
	case ons > 0:
		return true, effort
	}
	return def, effort
}

func (r *chatRequest) reasoningEffort() string {
	if r.Reasoning == nil {
		return ""
	}
	return r.Reasoning.Effort
}

// thinkingBudget is the request's reasoning.max_tokens when positive.
func (r *chatRequest) thinkingBudget() (int, bool) {
	if r.Reasoning == nil || r.Reasoning.MaxTokens == nil || *r.Reasoning.MaxTokens <= 0 {
		return 0, false
	}
	return int(*r.Reasoning.MaxTokens), true
}

// explicitOff reports whether the request turned thinking off, which a
// reasoning= directive must respect.
func (r *chatRequest) explicitOff() bool {
	on, _ := r.thinking(true)
	return !on
}

// toolToCall is the tool the reply must call, if any: the one tool_choice
// names, the directive's, or the first tool when tool_choice is
// "required". tool_choice "none" rules tools out.
func (r *chatRequest) toolToCall(directive string) (name string, params json.RawMessage, ok bool) {
	if len(r.Tools) == 0 {
		return "", nil, false
	}
	var choice string
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(r.ToolChoice, &choice) != nil && json.Unmarshal(r.ToolChoice, &named) == nil {
		choice = named.Function.Name
		if choice == "" {
			choice = "auto"
		}
	}
	// Like a tool-using model, once the results of its calls are in it
	// answers them in text, unless a call is what the request demands.
	answered := len(r.Messages) > 0 && r.Messages[len(r.Messages)-1].Role == "tool"
	switch {
	case choice == "none":
		return "", nil, false
	case choice == "required":
		name = cmp.Or(directive, r.Tools[0].Function.Name)
	case choice != "" && choice != "auto":
		name = choice
	case answered:
		return "", nil, false
	case directive != "":
		name = directive
	default:
		// auto: call the tool the question is about, if any is; a web
		// tool when the question is about the web.
		if name, _ = r.webCall(); name != "" {
			break
		}
		if name = r.fittingTool(); name == "" {
			return "", nil, false
		}
	}
	for _, t := range r.Tools {
		if t.Function.Name == name {
			return name, t.Function.Parameters, true
		}
	}
	// A directive may name a tool the request lacks, to test how clients
	// cope with a hallucinated call.
	return name, nil, true
}

// webCall is the web tool the last user message asks for, and its
// arguments, as a worker's web tools take them: web_fetch of the first
// http(s) URL in the message, else web_search of what follows "search"
// or "look up" (the whole message when nothing follows). "" when the
// message asks for neither or the tool is not offered.
func (r *chatRequest) webCall() (name, arguments string) {
	offered := func(n string) bool {
		return slices.ContainsFunc(r.Tools, func(t tool) bool { return t.Function.Name == n })
	}
	var lines []string
	for l := range strings.Lines(r.lastUserText()) {
		if !strings.HasPrefix(strings.TrimSpace(l), "sim:") {
			lines = append(lines, l)
		}
	}
	text := strings.Join(lines, "")
	if offered("web_fetch") {
		for _, f := range strings.Fields(text) {
			f = strings.TrimRight(f, ".,;:!?)]}>'\"")
			f = strings.TrimLeft(f, "([{<'\"")
			if strings.HasPrefix(f, "http://") || strings.HasPrefix(f, "https://") {
				b, _ := json.Marshal(map[string]string{"url": f})
				return "web_fetch", string(b)
			}
		}
	}
	if offered("web_search") {
		lower := strings.ToLower(text)
		for _, verb := range []string{"search the web for", "search for", "look up", "search"} {
			i := strings.Index(lower, verb)
			if i < 0 {
				continue
			}
			q := strings.Trim(text[i+len(verb):], " \t\n.?!:")
			if q == "" {
				q = strings.TrimSpace(text)
			}
			b, _ := json.Marshal(map[string]string{"query": q})
			return "web_search", string(b)
		}
	}
	return "", ""
}

// fittingTool is the tool the last user message asks about: the one with
// the most words of its name in the message (verbs such as get or list,
// and words under four letters, aside), or of its description when no
// name matches. "" when none is asked about.
func (r *chatRequest) fittingTool() string {
	asked := map[string]bool{}
	for _, w := range wordsOf(r.lastUserText()) {
		asked[w] = true
	}
	score := func(text string) int {
		n := 0
		for _, w := range wordsOf(text) {
			if asked[w] && len(w) >= 4 && !isToolVerb(w) {
				n++
			}
		}
		return n
	}
	best, bestScore := "", 0
	for _, by := range []func(*tool) string{
		func(t *tool) string { return t.Function.Name },
		func(t *tool) string { return t.Function.Description },
	} {
		for i := range r.Tools {
			if n := score(by(&r.Tools[i])); n > bestScore {
				best, bestScore = r.Tools[i].Function.Name, n
			}
		}
		if best != "" {
			return best
		}
	}
	return ""
}

// isToolVerb is a word of tool names that says nothing of what a tool is
// about.
func isToolVerb(w string) bool {
	switch w {
	case "get", "list", "fetch", "find", "make", "create", "update", "delete", "read", "write", "search",
		"lookup", "with", "from", "into", "that", "this", "what", "which":
		return true
	}
	return false
}

// wordsOf splits text into lower-case words of letters and digits; a tool
// name's snake_case, kebab-case and camelCase parts are words too.
func wordsOf(text string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			out = append(out, b.String())
			b.Reset()
		}
	}
	prevLower := false
	for _, c := range text {
		switch {
		case unicode.IsUpper(c):
			if prevLower {
				flush()
			}
			b.WriteRune(unicode.ToLower(c))
			prevLower = false
		case unicode.IsLetter(c) || unicode.IsDigit(c):
			b.WriteRune(c)
			prevLower = true
		default:
			flush()
			prevLower = false
		}
	}
	flush()
	return out
}

// jsonMode is the structured-output mode: "" (plain text), "object" or
// "schema".
func (r *chatRequest) jsonMode() string {
	if r.ResponseFormat == nil {
		return ""
	}
	switch r.ResponseFormat.Type {
	case "json_object":
		return "object"
	case "json_schema":
		return "schema"
	}
	return ""
}

// schema is the requested JSON schema, if any.
func (r *chatRequest) schema() json.RawMessage {
	if r.ResponseFormat == nil || r.ResponseFormat.JSONSchema == nil {
		return nil
	}
	return r.ResponseFormat.JSONSchema.Schema
}

// strictSchema reports whether json_schema.strict was set.
func (r *chatRequest) strictSchema() bool {
	return r.ResponseFormat != nil && r.ResponseFormat.JSONSchema != nil && r.ResponseFormat.JSONSchema.Strict
}
