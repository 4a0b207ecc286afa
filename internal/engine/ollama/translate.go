package ollama

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// chatRequest is Ollama's POST /api/chat body.
type chatRequest struct {
	Model    string                     `json:"model"`
	Messages []message                  `json:"messages"`
	Tools    json.RawMessage            `json:"tools,omitempty"`
	Format   json.RawMessage            `json:"format,omitempty"`
	Options  map[string]json.RawMessage `json:"options,omitempty"`
	// Think is a bool or "low"/"medium"/"high"; nil leaves the model's
	// default.
	Think  any  `json:"think,omitempty"`
	Stream bool `json:"stream"`
	// KeepAlive is set for a kept model (Engine.Keep).
	KeepAlive *int `json:"keep_alive,omitempty"`
	// Truncate is always sent false: by default Ollama drops the front
	// of a conversation over the model's context and answers as if it had
	// read it all; refused, it is the client's 400 context_length_exceeded.
	Truncate bool `json:"truncate"`
}

// message is one Ollama chat message.
type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Thinking   string     `json:"thinking,omitempty"`
	Images     []string   `json:"images,omitempty"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolName   string     `json:"tool_name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// toolCall is Ollama's tool call: arguments are a JSON object, where
// OpenAI has a string holding JSON.
type toolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// openAIChat is the part of an OpenAI chat request the adapter reads.
type openAIChat struct {
	Model          string          `json:"model"`
	Messages       []openAIMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
	Stop                json.RawMessage `json:"stop"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	ReasoningEffort     string          `json:"reasoning_effort"`
	Reasoning           *struct {
		Effort    string `json:"effort"`
		MaxTokens *int   `json:"max_tokens"`
	} `json:"reasoning"`
	EnableThinking     *bool `json:"enable_thinking"`
	ChatTemplateKwargs *struct {
		EnableThinking *bool `json:"enable_thinking"`
	} `json:"chat_template_kwargs"`
}

type openAIMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ReasoningContent string `json:"reasoning_content"`
	Reasoning        string `json:"reasoning"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// ImageURL is {"url": ...} or, from some clients, the URL itself.
	ImageURL json.RawMessage `json:"image_url"`
	File     *struct {
		FileData string `json:"file_data"`
		FileID   string `json:"file_id"`
		Filename string `json:"filename"`
	} `json:"file"`
}

// options maps OpenAI sampling fields (and the llama.cpp-style extras
// clients send) to Ollama options of the same meaning. Values pass
// through as sent, so integers stay integers.
var options = []struct{ from, to string }{
	{"temperature", "temperature"},
	{"top_p", "top_p"},
	{"top_k", "top_k"},
	{"min_p", "min_p"},
	{"seed", "seed"},
	{"frequency_penalty", "frequency_penalty"},
	{"presence_penalty", "presence_penalty"},
	{"repeat_penalty", "repeat_penalty"},
	{"repeat_last_n", "repeat_last_n"},
	{"mirostat", "mirostat"},
	{"mirostat_tau", "mirostat_tau"},
	{"mirostat_eta", "mirostat_eta"},
}

// badRequest is a request the adapter cannot translate; the client gets
// 400 with its message.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error {
	return &badRequest{msg: fmt.Sprintf(format, args...)}
}

// translateChat turns an OpenAI chat request into Ollama's. model, when
// set, overrides the body's (the gateway may have resolved an alias).
func translateChat(body []byte, model string, stream bool) (*chatRequest, error) {
	var in openAIChat
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, badf("invalid chat request: %v", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, badf("invalid chat request: %v", err)
	}
	if n := fields["n"]; present(n) {
		var choices float64
		if json.Unmarshal(n, &choices) != nil || choices != 1 {
			return nil, badf("n: Ollama makes one choice a request; leave n out or send 1")
		}
	}
	out := &chatRequest{Model: in.Model, Stream: stream}
	if model != "" {
		out.Model = model
	}
	msgs, err := translateMessages(in.Messages)
	if err != nil {
		return nil, err
	}
	out.Messages = msgs

	// Ollama has no tool_choice; "none" is honoured by not offering tools.
	if present(in.Tools) && !bytes.Equal(bytes.TrimSpace(in.ToolChoice), []byte(`"none"`)) {
		out.Tools = in.Tools
	}
	if rf := in.ResponseFormat; rf != nil {
		switch rf.Type {
		case "json_object":
			out.Format = json.RawMessage(`"json"`)
		case "json_schema":
			out.Format = json.RawMessage(`"json"`)
			if rf.JSONSchema != nil && present(rf.JSONSchema.Schema) {
				out.Format = rf.JSONSchema.Schema
			}
		}
	}

	opts := make(map[string]json.RawMessage)
	for _, o := range options {
		if v := fields[o.from]; present(v) {
			opts[o.to] = v
		}
	}
	switch {
	case present(in.MaxCompletionTokens):
		opts["num_predict"] = in.MaxCompletionTokens
	case present(in.MaxTokens):
		opts["num_predict"] = in.MaxTokens
	}
	if present(in.Stop) {
		stop, err := stopList(in.Stop)
		if err != nil {
			return nil, err
		}
		opts["stop"] = stop
	}
	if len(opts) > 0 {
		out.Options = opts
	}
	out.Think = think(&in)
	return out, nil
}

// present reports whether a raw field was sent with a value.
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// stopList turns OpenAI's stop (a string or an array) into Ollama's array.
func stopList(raw json.RawMessage) (json.RawMessage, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		b, _ := json.Marshal([]string{one})
		return b, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badf("stop must be a string or an array of strings")
	}
	return raw, nil
}

// think maps the request's reasoning switches onto Ollama's think. As
// everywhere in svc, any switch that turns thinking off wins; then an
// effort sets the level, then enable_thinking turns it on.
func think(in *openAIChat) any {
	effort := in.ReasoningEffort
	if effort == "" && in.Reasoning != nil {
		effort = in.Reasoning.Effort
	}
	enable := in.EnableThinking
	if enable == nil && in.ChatTemplateKwargs != nil {
		enable = in.ChatTemplateKwargs.EnableThinking
	}
	zeroBudget := in.Reasoning != nil && in.Reasoning.MaxTokens != nil && *in.Reasoning.MaxTokens == 0
	if effort == "none" || effort == "minimal" || zeroBudget || (enable != nil && !*enable) {
		return false
	}
	switch effort {
	case "low", "medium", "high":
		return effort
	case "xhigh", "max":
		// "high" is the highest level every thinking-capable Ollama takes.
		return "high"
	}
	if enable != nil {
		return true
	}
	return nil
}

func translateMessages(in []openAIMessage) ([]message, error) {
	// Ollama names a tool result by the tool, OpenAI by the call id: the
	// earlier assistant messages say which tool each id called.
	toolNames := make(map[string]string)
	out := make([]message, 0, len(in))
	for i, m := range in {
		var msg message
		switch m.Role {
		case "system", "developer":
			msg.Role = "system"
		case "user", "assistant", "tool":
			msg.Role = m.Role
		default:
			return nil, badf("messages[%d]: unsupported role %q", i, m.Role)
		}
		text, images, err := content(m.Content)
		if err != nil {
			return nil, badf("messages[%d]: %v", i, err)
		}
		msg.Content, msg.Images = text, images
		if m.Role == "assistant" {
			msg.Thinking = m.ReasoningContent
			if msg.Thinking == "" {
				msg.Thinking = m.Reasoning
			}
			for j, tc := range m.ToolCalls {
				args, err := toolArguments(tc.Function.Arguments)
				if err != nil {
					return nil, badf("messages[%d].tool_calls[%d]: %v", i, j, err)
				}
				var call toolCall
				call.ID = tc.ID
				call.Function.Name = tc.Function.Name
				call.Function.Arguments = args
				msg.ToolCalls = append(msg.ToolCalls, call)
				if tc.ID != "" {
					toolNames[tc.ID] = tc.Function.Name
				}
			}
		}
		if m.Role == "tool" {
			msg.ToolCallID = m.ToolCallID
			msg.ToolName = toolNames[m.ToolCallID]
		}
		out = append(out, msg)
	}
	return out, nil
}

// toolArguments turns OpenAI's arguments, a string holding a JSON object,
// into the object Ollama wants. An object sent as is is accepted too.
func toolArguments(raw json.RawMessage) (json.RawMessage, error) {
	if !present(raw) {
		return json.RawMessage(`{}`), nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return json.RawMessage(`{}`), nil
		}
		raw = json.RawMessage(s)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New("function.arguments must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, errors.New("function.arguments must be a JSON object")
	}
	return buf.Bytes(), nil
}

// content flattens OpenAI message content (a string or an array of
// parts) into Ollama's text plus base64 images. Text parts and text files
// are joined by newlines.
func content(raw json.RawMessage) (string, []string, error) {
	if !present(raw) {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, errors.New("content must be a string or an array of parts")
	}
	var texts, images []string
	for j, p := range parts {
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "image_url":
			img, err := inlineImage(p.ImageURL)
			if err != nil {
				return "", nil, fmt.Errorf("content[%d]: %w", j, err)
			}
			images = append(images, img)
		case "file":
			text, err := textFile(p)
			if err != nil {
				return "", nil, fmt.Errorf("content[%d]: %w", j, err)
			}
			texts = append(texts, text)
		default:
			return "", nil, fmt.Errorf("content[%d]: the Ollama engine does not take %q parts", j, p.Type)
		}
	}
	return strings.Join(texts, "\n"), images, nil
}

// inlineImage returns the base64 data of a data: image URL. Ollama takes
// images only inline; the worker fetches a chat's remote images and
// inlines them before any engine runs it, so a URL here came some other
// way, and is refused.
func inlineImage(raw json.RawMessage) (string, error) {
	var u string
	if json.Unmarshal(raw, &u) != nil {
		var obj struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", errors.New("image_url must hold a url")
		}
		u = obj.URL
	}
	if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		//lint:ignore ST1005 Ollama is a name, and the message is the client's answer
		return "", errors.New("Ollama needs images inline: send a data:image/...;base64, URL")
	}
	media, data, ok := dataURL(u)
	if !ok || !strings.HasPrefix(media, "image/") {
		return "", errors.New("image_url must be a data:image/...;base64, URL")
	}
	return data, nil
}

// dataURL splits "data:<media>;base64,<data>".
func dataURL(u string) (media, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", false
	}
	media, isBase64 := strings.CutSuffix(meta, ";base64")
	if !isBase64 {
		return "", "", false
	}
	return strings.ToLower(media), data, true
}

// textFiles are the file types inlined as text into the prompt.
var textFiles = []string{".txt", ".csv", ".tsv", ".md"}

// textFile decodes a file part holding a text file. Ollama has no file
// input, so the text goes into the prompt, headed by the file's name.
func textFile(p contentPart) (string, error) {
	if p.File == nil || p.File.FileData == "" {
		return "", errors.New("file parts need file.file_data; file_id is not supported")
	}
	data, media := p.File.FileData, ""
	if m, d, ok := dataURL(data); ok {
		media, data = m, d
	}
	ext := strings.ToLower(path.Ext(p.File.Filename))
	isText := strings.HasPrefix(media, "text/")
	for _, x := range textFiles {
		isText = isText || ext == x
	}
	if !isText {
		return "", fmt.Errorf("the Ollama engine reads only text files (%s)", strings.Join(textFiles, ", "))
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return "", fmt.Errorf("file.file_data is not base64: %w", err)
	}
	if !utf8.Valid(b) {
		return "", errors.New("file.file_data is not UTF-8 text")
	}
	if p.File.Filename == "" {
		return string(b), nil
	}
	return p.File.Filename + ":\n" + string(b), nil
}
