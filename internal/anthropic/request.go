package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// toolName is the rule both APIs give function names; the chat parser
// enforces it, so a name it would refuse is refused here with the
// Anthropic path.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxStops is the chat parser's limit on stop sequences.
const maxStops = 16

// maxFileBytes is the chat parser's limit on a decoded file part;
// documents become file parts, so it is theirs too.
const maxFileBytes = chat.MaxFileBytes

// The chat request built from a Messages request. Field order is the order
// of the body sent on.
type chatRequest struct {
	Model             string          `json:"model"`
	Messages          []chatMessage   `json:"messages"`
	MaxTokens         int64           `json:"max_tokens"`
	Stop              []string        `json:"stop,omitempty"`
	Temperature       json.RawMessage `json:"temperature,omitempty"`
	TopP              json.RawMessage `json:"top_p,omitempty"`
	TopK              *int64          `json:"top_k,omitempty"`
	Stream            bool            `json:"stream,omitempty"`
	StreamOptions     *streamOptions  `json:"stream_options,omitempty"`
	User              string          `json:"user,omitempty"`
	Tools             []chatTool      `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	ReasoningEffort   string          `json:"reasoning_effort,omitempty"`
	Reasoning         *chatReasoning  `json:"reasoning,omitempty"`
	ResponseFormat    *responseFormat `json:"response_format,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatReasoning struct {
	MaxTokens int64 `json:"max_tokens"`
}

type responseFormat struct {
	Type       string     `json:"type"`
	JSONSchema jsonSchema `json:"json_schema"`
}

type jsonSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is a string or []chatPart; nil leaves it out, for an
	// assistant turn that only calls tools.
	Content    any             `json:"content,omitempty"`
	ToolCalls  []chat.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID *string         `json:"tool_call_id,omitempty"`
}

type chatPart struct {
	Type     string    `json:"type"`
	Text     *string   `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
	File     *chatFile `json:"file,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type chatFile struct {
	Filename string `json:"filename"`
	FileData string `json:"file_data"`
}

type chatTool struct {
	Type     string      `json:"type"`
	Function chatToolDef `json:"function"`
}

type chatToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type namedToolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

func textPart(s string) chatPart { return chatPart{Type: "text", Text: &s} }

// Options are what a request may do by its organisation's settings.
type Options struct {
	// AllowRemoteImages permits https image URLs, which the chat parser
	// refuses otherwise (the organisation setting allow_remote_image_urls):
	// refused here, the refusal names the field the client sent.
	AllowRemoteImages bool
}

// ToChat validates an Anthropic Messages request body and returns the
// equivalent OpenAI chat-completions request body, its model and whether it
// streams. Malformed JSON is a 400 (api.BadRequest); every field that fails
// is listed, with its Anthropic path, in one api.Invalid.
func ToChat(body []byte, o Options) (chatBody []byte, model string, stream bool, err error) {
	out, r, err := toChat(body, o)
	if err != nil {
		return nil, "", false, err
	}
	return out, r.Model, r.Stream, nil
}

// ToChatCounted is ToChat that also gives the characters Count counts of
// the request, so that message_start's estimate of its input tokens is
// count_tokens' answer.
func ToChatCounted(body []byte, o Options) (chatBody []byte, model string, chars int, err error) {
	out, r, err := toChat(body, o)
	if err != nil {
		return nil, "", 0, err
	}
	return out, r.Model, inputChars(r), nil
}

func toChat(body []byte, o Options) ([]byte, *chatRequest, error) {
	r, err := translateFor(body, translation{remoteImages: o.AllowRemoteImages})
	if err != nil {
		return nil, nil, err
	}
	// About the size of what it is built from, which it holds again.
	out, err := appendChat(make([]byte, 0, len(body)+len(body)/8+256), r)
	if err != nil {
		return nil, nil, err
	}
	return out, r, nil
}

// translation is how a body is translated.
type translation struct {
	// counting is for count_tokens, whose requests need no max_tokens.
	counting bool
	// remoteImages permits https image URLs.
	remoteImages bool
}

// translateFor checks a Messages request body and builds its chat form.
func translateFor(body []byte, how translation) (*chatRequest, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, api.BadRequest("Request body is empty; send a JSON object")
	}
	if !jsontext.Valid(body) {
		return nil, jsonraw.Malformed(body)
	}
	t := translator{how: how}
	top, ok := t.members.Read(body)
	if !ok {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "must be a JSON object"})
	}
	t.request(top)
	if err := t.v.Err(); err != nil {
		return nil, err
	}
	return &t.out, nil
}

// translator checks a request and builds its chat form as it goes; the
// chat form is only used when no check failed.
type translator struct {
	v   api.Validator
	out chatRequest
	// members reads the request's objects, all into one list.
	members jsonraw.FieldReader
	how     translation
	// uses are the ids of the tool_use blocks read so far.
	uses map[string]bool
}

// request checks the members in a fixed order, so a body with several
// failures always lists them the same way.
func (t *translator) request(top object) {
	if s, ok := t.requiredString(top, nil, "model"); ok {
		if s == "" {
			t.v.Add("model", api.FieldMissing, "must not be empty")
		}
		t.out.Model = s
	}
	if raw, ok := t.maxTokens(top); ok {
		if n, ok := t.integer(api.PathOf("max_tokens"), raw); ok {
			if n < 1 {
				t.v.Add("max_tokens", api.FieldOutOfRange, "must be at least 1")
			}
			t.out.MaxTokens = n
		}
	}
	t.system(top)
	t.messages(top)
	t.stopSequences(top)
	t.float(top, "temperature", 0, 1, &t.out.Temperature)
	t.float(top, "top_p", 0, 1, &t.out.TopP)
	if raw, ok := top.Field("top_k"); ok {
		if n, ok := t.integer(api.PathOf("top_k"), raw); ok {
			if n < 0 {
				t.v.Add("top_k", api.FieldOutOfRange, "must be 0 or more")
			}
			t.out.TopK = &n
		}
	}
	if b, ok := t.optBool(top, nil, "stream"); ok && b {
		t.out.Stream = true
		// Usage is what message_delta reports; the gateway forces it on
		// too, but the body should say what it needs.
		t.out.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if md, ok := t.optObject(top, nil, "metadata"); ok {
		if s, ok := t.optString(md, api.PathOf("metadata"), "user_id"); ok {
			t.out.User = s
		}
	}
	t.tools(top)
	t.mcpServers(top)
	t.toolChoice(top)
	t.reasoning(top)
}

// maxTokens is the max_tokens member, which a Messages request must have
// and a count need not.
func (t *translator) maxTokens(top object) (json.RawMessage, bool) {
	if t.how.counting {
		return top.Field("max_tokens")
	}
	return t.missing(top, nil, "max_tokens")
}

// mcpServers refuses Anthropic's MCP connector: the model would answer
// without the servers' tools, as if it had none, where the caller expects
// them called.
func (t *translator) mcpServers(top object) {
	if elems, ok := t.optArray(top, nil, "mcp_servers"); ok && len(elems) > 0 {
		t.v.Add("mcp_servers", api.FieldNotSupported, "MCP servers are not available here; call the server's tools from the client as custom tools")
	}
}

// system becomes one leading system message.
func (t *translator) system(top object) {
	raw, ok := top.Field("system")
	if !ok {
		return
	}
	var text string
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		text, _ = jsonraw.DecodeString(raw)
	case jsonraw.Array:
		elems, _ := t.array(api.PathOf("system"), raw)
		var texts []string
		for i, e := range elems {
			path := api.PathOf("system").Index(i)
			b, ok := t.object(path, e)
			if !ok {
				continue
			}
			if _, ok := t.requiredEnum(b, path, "type", "text"); !ok {
				continue
			}
			if s, ok := t.requiredString(b, path, "text"); ok {
				texts = append(texts, s)
			}
		}
		text = strings.Join(texts, "\n\n")
	default:
		t.v.Add("system", api.FieldWrongType, "must be a string or an array of text blocks")
		return
	}
	if text != "" {
		t.out.Messages = append(t.out.Messages, chatMessage{Role: "system", Content: text})
	}
}

func (t *translator) messages(top object) {
	raw, ok := t.missing(top, nil, "messages")
	if !ok {
		return
	}
	elems, ok := t.array(api.PathOf("messages"), raw)
	if !ok {
		return
	}
	if len(elems) == 0 {
		t.v.Add("messages", api.FieldInvalid, "must contain at least one message")
		return
	}
	for i, e := range elems {
		t.message(api.PathOf("messages").Index(i), e)
	}
}

func (t *translator) message(path *api.Path, raw json.RawMessage) {
	msg, ok := t.object(path, raw)
	if !ok {
		return
	}
	role, ok := t.requiredEnum(msg, path, "role", "user", "assistant")
	if !ok {
		return // what the content may hold depends on the role
	}
	content, ok := t.missing(msg, path, "content")
	if !ok {
		return
	}
	cpath := path.Key("content")
	switch jsonraw.KindOf(content) {
	case jsonraw.String:
		s, _ := jsonraw.DecodeString(content)
		t.out.Messages = append(t.out.Messages, chatMessage{Role: role, Content: s})
		return
	case jsonraw.Array:
	default:
		t.v.AddAt(cpath, api.FieldWrongType, "must be a string or an array of content blocks")
		return
	}
	blocks, _ := t.array(cpath, content)
	if role == "user" {
		if len(blocks) == 0 {
			t.v.AddAt(cpath, api.FieldInvalid, "must contain at least one content block")
			return
		}
		t.userBlocks(cpath, blocks)
	} else {
		t.assistantBlocks(cpath, blocks)
	}
}

// blockTypes are the block types a role's messages may carry.
func blockTypes(role string) []string {
	if role == "user" {
		return []string{"text", "image", "document", "tool_result"}
	}
	return []string{"text", "tool_use", "thinking", "redacted_thinking"}
}

// unsupportedBlock reports Anthropic's block types that have no chat
// equivalent (server tools' blocks, search results, uploads), which are
// refused as unsupported rather than unknown.
func unsupportedBlock(typ string) bool {
	switch typ {
	case "search_result", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
		"code_execution_tool_result", "bash_code_execution_tool_result",
		"text_editor_code_execution_tool_result", "tool_search_tool_result",
		"container_upload", "mcp_tool_use", "mcp_tool_result":
		return true
	}
	return false
}

// blockType reads a block's type; it reports the failure when the type is
// missing, or is one role may not carry.
func (t *translator) blockType(path *api.Path, b object, role string) (string, bool) {
	typ, ok := t.requiredString(b, path, "type")
	if !ok {
		return "", false
	}
	own, other := "user", "assistant"
	if role == "assistant" {
		own, other = other, own
	}
	tpath := path.Key("type")
	switch {
	case contains(blockTypes(own), typ):
		return typ, true
	case contains(blockTypes(other), typ):
		t.v.AddAt(tpath, api.FieldNotAllowed, "%s blocks may only be sent in %s messages", typ, other)
	case unsupportedBlock(typ):
		t.v.AddAt(tpath, api.FieldNotSupported, "%s blocks are not supported", typ)
	default:
		t.v.AddAt(tpath, api.FieldEnum, "%s messages take one of %s", own, strings.Join(blockTypes(own), ", "))
	}
	return "", false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// userBlocks translates a user turn: its tool results first, as tool
// messages (chat wants them straight after the assistant's calls), then
// the rest of it as one user message.
func (t *translator) userBlocks(path *api.Path, blocks []json.RawMessage) {
	var tools []chatMessage
	var moved, parts []chatPart // moved: images returned by tools
	for i, e := range blocks {
		bpath := path.Index(i)
		b, ok := t.object(bpath, e)
		if !ok {
			continue
		}
		typ, ok := t.blockType(bpath, b, "user")
		if !ok {
			continue
		}
		switch typ {
		case "text":
			if s, ok := t.requiredString(b, bpath, "text"); ok {
				parts = append(parts, textPart(s))
			}
		case "image":
			if p, ok := t.image(bpath, b); ok {
				parts = append(parts, p)
			}
		case "document":
			parts = append(parts, t.document(bpath, b)...)
		case "tool_result":
			msg, images := t.toolResult(bpath, b)
			tools = append(tools, msg)
			moved = append(moved, images...)
		}
	}
	t.out.Messages = append(t.out.Messages, tools...)
	if all := append(moved, parts...); len(all) > 0 {
		t.out.Messages = append(t.out.Messages, chatMessage{Role: "user", Content: partsContent(all)})
	}
}

// partsContent is a lone text part as a plain string, which every chat
// template reads; anything else stays a parts array.
func partsContent(parts []chatPart) any {
	if len(parts) == 1 && parts[0].Type == "text" {
		return *parts[0].Text
	}
	return parts
}

func (t *translator) assistantBlocks(path *api.Path, blocks []json.RawMessage) {
	msg := chatMessage{Role: "assistant"}
	var parts []chatPart
	for i, e := range blocks {
		bpath := path.Index(i)
		b, ok := t.object(bpath, e)
		if !ok {
			continue
		}
		typ, ok := t.blockType(bpath, b, "assistant")
		if !ok {
			continue
		}
		switch typ {
		case "text":
			if s, ok := t.requiredString(b, bpath, "text"); ok {
				parts = append(parts, textPart(s))
			}
		case "tool_use":
			tc, id, ok := t.toolUse(bpath, b)
			if ok {
				msg.ToolCalls = append(msg.ToolCalls, tc)
			}
			if id != "" {
				// Known even when the block is refused for another
				// field, so that its result is not also called an orphan.
				if t.uses == nil {
					t.uses = map[string]bool{}
				}
				t.uses[id] = true
			}
		case "thinking", "redacted_thinking":
			// Dropped: another model's reasoning, signed for Anthropic's.
		}
	}
	switch {
	case len(parts) > 0:
		msg.Content = partsContent(parts)
	case len(msg.ToolCalls) == 0:
		// Chat requires content on an assistant turn without tool calls;
		// a turn that was all thinking is an empty one.
		msg.Content = ""
	}
	t.out.Messages = append(t.out.Messages, msg)
}

// toolUse is the call a tool_use block makes, and its id when it has one,
// whether or not the rest of the block is valid.
func (t *translator) toolUse(path *api.Path, b object) (chat.ToolCall, string, bool) {
	id, idOK := t.requiredString(b, path, "id")
	if !idOK {
		id = ""
	}
	name, nameOK := t.requiredString(b, path, "name")
	raw, ok := t.missing(b, path, "input")
	if ok && jsonraw.KindOf(raw) != jsonraw.Object {
		t.v.AddAt(path.Key("input"), api.FieldWrongType, "must be an object")
		ok = false
	}
	if !idOK || !nameOK || !ok {
		return chat.ToolCall{}, id, false
	}
	var args bytes.Buffer
	if err := json.Compact(&args, raw); err != nil {
		return chat.ToolCall{}, id, false
	}
	return chat.FunctionCall(id, name, args.String()), id, true
}

// toolResult returns the tool message for a tool_result block and the
// images it held, which must travel in a user message.
func (t *translator) toolResult(path *api.Path, b object) (chatMessage, []chatPart) {
	id, ok := t.requiredString(b, path, "tool_use_id")
	if ok && !t.uses[id] {
		// A result must answer a call: engines' chat templates refuse an
		// orphan tool message with no field to name, or render it as if
		// the model had asked, and Anthropic's API refuses it too.
		t.v.AddAt(path.Key("tool_use_id"), api.FieldInvalid, "no tool_use block before this one has id %q", id)
	}
	isError, _ := t.optBool(b, path, "is_error")
	var texts []string
	var images []chatPart
	if raw, ok := b.Field("content"); ok {
		cpath := path.Key("content")
		switch jsonraw.KindOf(raw) {
		case jsonraw.String:
			s, _ := jsonraw.DecodeString(raw)
			texts = append(texts, s)
		case jsonraw.Array:
			elems, _ := t.array(cpath, raw)
			for i, e := range elems {
				bpath := cpath.Index(i)
				blk, ok := t.object(bpath, e)
				if !ok {
					continue
				}
				typ, ok := t.requiredString(blk, bpath, "type")
				if !ok {
					continue
				}
				switch typ {
				case "text":
					if s, ok := t.requiredString(blk, bpath, "text"); ok {
						texts = append(texts, s)
					}
				case "image":
					if p, ok := t.image(bpath, blk); ok {
						images = append(images, p)
					}
				case "document", "search_result", "tool_reference":
					t.v.AddAt(bpath.Key("type"), api.FieldNotSupported, "%s blocks are not supported in tool results; send text or images", typ)
				default:
					t.v.AddAt(bpath.Key("type"), api.FieldEnum, "one of text, image")
				}
			}
		default:
			t.v.AddAt(cpath, api.FieldWrongType, "must be a string or an array of text and image blocks")
		}
	}
	text := strings.Join(texts, "\n")
	switch len(images) {
	case 0:
	case 1:
		text = appendLine(text, "[The image this tool returned follows in the next message.]")
	default:
		text = appendLine(text, "[The "+strconv.Itoa(len(images))+" images this tool returned follow in the next message.]")
	}
	if isError {
		text = "Error: " + text
	}
	return chatMessage{Role: "tool", Content: text, ToolCallID: &id}, images
}

func appendLine(text, line string) string {
	if text == "" {
		return line
	}
	return text + "\n" + line
}

// image translates an image block. Base64 data is checked here, with the
// block's path, by the chat parser's rules; a URL's scheme too, though
// whether remote images are allowed at all is the chat parser's call.
func (t *translator) image(path *api.Path, b object) (chatPart, bool) {
	src, ok := t.requiredObject(b, path, "source")
	if !ok {
		return chatPart{}, false
	}
	spath := path.Key("source")
	typ, ok := t.requiredString(src, spath, "type")
	if !ok {
		return chatPart{}, false
	}
	switch typ {
	case "base64":
		mt, mtOK := t.requiredEnum(src, spath, "media_type", "image/jpeg", "image/png", "image/gif", "image/webp")
		data, ok := t.requiredString(src, spath, "data")
		if ok {
			data, ok = t.base64(spath.Key("data"), data)
		}
		if !ok || !mtOK {
			return chatPart{}, false
		}
		return chatPart{Type: "image_url", ImageURL: &imageURL{URL: "data:" + mt + ";base64," + data}}, true
	case "url":
		u, ok := t.requiredString(src, spath, "url")
		if !ok {
			return chatPart{}, false
		}
		if !webURL(u) {
			t.v.AddAt(spath.Key("url"), api.FieldInvalid, "must be an https URL")
			return chatPart{}, false
		}
		if !t.how.remoteImages {
			t.v.AddAt(spath.Key("url"), api.FieldNotAllowed, "remote image URLs are turned off for this organisation; send the image as base64")
			return chatPart{}, false
		}
		if typ, msg := chat.RemoteImageProblem(u); typ != "" {
			t.v.AddAt(spath.Key("url"), typ, "%s", msg)
			return chatPart{}, false
		}
		return chatPart{Type: "image_url", ImageURL: &imageURL{URL: u}}, true
	case "file":
		t.v.AddAt(spath.Key("type"), api.FieldNotSupported, "uploaded files are not supported; send the image as base64 or a URL")
	default:
		t.v.AddAt(spath.Key("type"), api.FieldEnum, "one of base64, url")
	}
	return chatPart{}, false
}

// document translates a document block into parts: plain text becomes a
// file part, a content source its own text and image parts.
func (t *translator) document(path *api.Path, b object) []chatPart {
	title, _ := t.optString(b, path, "title")
	context, _ := t.optString(b, path, "context")
	src, ok := t.requiredObject(b, path, "source")
	if !ok {
		return nil
	}
	spath := path.Key("source")
	typ, ok := t.requiredString(src, spath, "type")
	if !ok {
		return nil
	}
	var parts []chatPart
	switch typ {
	case "text":
		if mt, ok := t.optString(src, spath, "media_type"); ok && mt != "text/plain" {
			t.v.AddAt(spath.Key("media_type"), api.FieldEnum, "must be text/plain")
			return nil
		}
		data, ok := t.requiredString(src, spath, "data")
		if !ok {
			return nil
		}
		if len(data) > maxFileBytes {
			t.v.AddAt(spath.Key("data"), api.FieldTooLong, "the document is larger than 1 MB")
			return nil
		}
		parts = append(parts, filePart(title, base64Encode(data)))
	case "base64":
		mt, ok := t.requiredString(src, spath, "media_type")
		if !ok {
			return nil
		}
		switch mt {
		case "text/plain":
		case "application/pdf":
			t.v.AddAt(spath.Key("media_type"), api.FieldNotSupported, "PDF documents are not supported; send the document's text as a text/plain document")
			return nil
		default:
			t.v.AddAt(spath.Key("media_type"), api.FieldEnum, "must be text/plain")
			return nil
		}
		data, ok := t.requiredString(src, spath, "data")
		if !ok {
			return nil
		}
		if data, ok = t.textFile(spath.Key("data"), data); !ok {
			return nil
		}
		parts = append(parts, filePart(title, data))
	case "content":
		parts = t.contentSource(spath, src)
	case "url":
		t.v.AddAt(spath.Key("type"), api.FieldNotSupported, "PDF documents are not supported; send the document's text as a text document")
		return nil
	case "file":
		t.v.AddAt(spath.Key("type"), api.FieldNotSupported, "uploaded files are not supported; send the document's text as a text document")
		return nil
	default:
		t.v.AddAt(spath.Key("type"), api.FieldEnum, "one of text, base64, content")
		return nil
	}
	if context != "" {
		parts = append(parts, textPart(context))
	}
	return parts
}

// contentSource flattens a document whose source is content blocks.
func (t *translator) contentSource(path *api.Path, src object) []chatPart {
	raw, ok := t.missing(src, path, "content")
	if !ok {
		return nil
	}
	cpath := path.Key("content")
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		s, _ := jsonraw.DecodeString(raw)
		return []chatPart{textPart(s)}
	case jsonraw.Array:
	default:
		t.v.AddAt(cpath, api.FieldWrongType, "must be a string or an array of text and image blocks")
		return nil
	}
	elems, _ := t.array(cpath, raw)
	var parts []chatPart
	for i, e := range elems {
		bpath := cpath.Index(i)
		b, ok := t.object(bpath, e)
		if !ok {
			continue
		}
		typ, ok := t.requiredEnum(b, bpath, "type", "text", "image")
		if !ok {
			continue
		}
		if typ == "text" {
			if s, ok := t.requiredString(b, bpath, "text"); ok {
				parts = append(parts, textPart(s))
			}
		} else if p, ok := t.image(bpath, b); ok {
			parts = append(parts, p)
		}
	}
	return parts
}

// filePart names a document's file after its title; the chat parser only
// takes .txt and .csv names, and the engine sees the name above the text.
func filePart(title, data string) chatPart {
	name := strings.TrimSpace(title)
	if name == "" {
		name = "document"
	}
	lower := strings.ToLower(name)
	if !strings.HasSuffix(lower, ".txt") && !strings.HasSuffix(lower, ".csv") {
		name += ".txt"
	}
	return chatPart{Type: "file", File: &chatFile{Filename: name, FileData: data}}
}

// textFile checks base64 text as the chat parser will: within its size
// limit and UTF-8.
func (t *translator) textFile(path *api.Path, data string) (string, bool) {
	data, ok := t.base64(path, data)
	if !ok {
		return "", false
	}
	if base64DecodedLen(data) > maxFileBytes {
		t.v.AddAt(path, api.FieldTooLong, "the document is larger than 1 MB")
		return "", false
	}
	text, ok := base64Decode(data)
	if !ok {
		t.v.AddAt(path, api.FieldInvalid, "must be base64")
		return "", false
	}
	if !utf8.ValidString(text) {
		t.v.AddAt(path, api.FieldInvalid, "the document must be UTF-8 text")
		return "", false
	}
	return data, true
}

// base64 returns data without the line breaks some encoders add (engines
// may not skip them, so the chat parser refuses them), and checks it.
func (t *translator) base64(path *api.Path, data string) (string, bool) {
	data = strings.Map(func(r rune) rune {
		switch r {
		case '\n', '\r', ' ', '\t':
			return -1
		}
		return r
	}, data)
	switch {
	case data == "":
		t.v.AddAt(path, api.FieldInvalid, "is empty")
		return "", false
	case !chat.ValidBase64(data):
		t.v.AddAt(path, api.FieldInvalid, "must be base64")
		return "", false
	}
	return data, true
}

func webURL(s string) bool {
	lower := strings.ToLower(s)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Host != ""
}

func (t *translator) stopSequences(top object) {
	elems, ok := t.optArray(top, nil, "stop_sequences")
	if !ok {
		return
	}
	if len(elems) > maxStops {
		t.v.Add("stop_sequences", api.FieldTooLong, "at most %d stop sequences", maxStops)
		return
	}
	for i, e := range elems {
		if s, ok := t.str(api.PathOf("stop_sequences").Index(i), e); ok {
			t.out.Stop = append(t.out.Stop, s)
		}
	}
}

// float checks a number in [lo, hi] and keeps its literal, so the chat
// parser reads exactly what was sent.
func (t *translator) float(top object, key string, lo, hi float64, dst *json.RawMessage) {
	raw, ok := top.Field(key)
	if !ok {
		return
	}
	if jsonraw.KindOf(raw) != jsonraw.Number {
		t.v.Add(key, api.FieldWrongType, "must be a number")
		return
	}
	f, _ := strconv.ParseFloat(string(raw), 64)
	if math.IsNaN(f) || f < lo || f > hi {
		t.v.Add(key, api.FieldOutOfRange, "must be between %g and %g", lo, hi)
		return
	}
	*dst = raw
}

func (t *translator) tools(top object) {
	elems, ok := t.optArray(top, nil, "tools")
	if !ok {
		return
	}
	seen := make(map[string]int, len(elems))
	for i, e := range elems {
		path := api.PathOf("tools").Index(i)
		tool, ok := t.object(path, e)
		if !ok {
			continue
		}
		if typ, ok := t.optString(tool, path, "type"); ok && typ != "custom" {
			t.v.AddAt(path.Key("type"), api.FieldNotSupported, "%s is one of Anthropic's server tools, which are not available here; define a custom tool (name, description, input_schema)", typ)
			continue
		}
		name, nameOK := t.requiredString(tool, path, "name")
		if nameOK && !toolName.MatchString(name) {
			t.v.AddAt(path.Key("name"), api.FieldInvalid, "must be 1 to 64 letters, digits, underscores or hyphens")
			nameOK = false
		}
		// Anthropic's API refuses two tools of one name: a call names
		// its tool.
		nameOK = nameOK && t.v.Unique(seen, path.Key("name"), "tools", name, i)
		desc, _ := t.optString(tool, path, "description")
		raw, schemaOK := t.missing(tool, path, "input_schema")
		if schemaOK && jsonraw.KindOf(raw) != jsonraw.Object {
			t.v.AddAt(path.Key("input_schema"), api.FieldWrongType, "must be an object")
			schemaOK = false
		}
		if nameOK && schemaOK {
			t.out.Tools = append(t.out.Tools, chatTool{Type: "function", Function: chatToolDef{Name: name, Description: desc, Parameters: raw}})
		}
	}
}

func (t *translator) toolChoice(top object) {
	tc, ok := t.optObject(top, nil, "tool_choice")
	if !ok {
		return
	}
	path := api.PathOf("tool_choice")
	typ, ok := t.requiredEnum(tc, path, "type", "auto", "any", "tool", "none")
	if !ok {
		return
	}
	switch typ {
	case "auto":
		t.out.ToolChoice = "auto"
	case "any":
		// A choice that needs a tool the request does not declare is
		// refused, as the API refuses it (and chat.Parse would).
		if len(t.out.Tools) == 0 {
			t.v.Add("tool_choice", api.FieldInvalid, "any needs tools to choose from")
			return
		}
		t.out.ToolChoice = "required"
	case "none":
		t.out.ToolChoice = "none"
	case "tool":
		name, ok := t.requiredString(tc, path, "name")
		if !ok {
			return
		}
		if !slices.ContainsFunc(t.out.Tools, func(x chatTool) bool { return x.Function.Name == name }) {
			t.v.AddAt(path.Key("name"), api.FieldInvalid, "names no tool of tools")
			return
		}
		var named namedToolChoice
		named.Type = "function"
		named.Function.Name = name
		t.out.ToolChoice = named
	}
	if off, ok := t.optBool(tc, path, "disable_parallel_tool_use"); ok && off && typ != "none" {
		t.out.ParallelToolCalls = new(false)
	}
}

// effortOf maps Anthropic's effort levels onto chat's, which stop at high.
func effortOf(s string) string {
	switch s {
	case "xhigh", "max":
		return "high"
	}
	return s
}

// reasoning reads thinking and output_config, which together set the
// chat request's reasoning controls and response format.
func (t *translator) reasoning(top object) {
	effort := ""
	if oc, ok := t.optObject(top, nil, "output_config"); ok {
		if s, ok := t.optEnum(oc, api.PathOf("output_config"), "effort", "low", "medium", "high", "xhigh", "max"); ok {
			effort = effortOf(s)
		}
		if f, ok := t.optObject(oc, api.PathOf("output_config"), "format"); ok {
			path := api.PathOf("output_config").Key("format")
			_, typeOK := t.requiredEnum(f, path, "type", "json_schema")
			schema, ok := t.missing(f, path, "schema")
			if ok && jsonraw.KindOf(schema) != jsonraw.Object {
				t.v.AddAt(path.Key("schema"), api.FieldWrongType, "must be an object")
				ok = false
			}
			if ok && typeOK {
				t.out.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: jsonSchema{Name: "output", Schema: schema, Strict: true}}
			}
		}
	}
	th, ok := t.optObject(top, nil, "thinking")
	if !ok {
		t.out.ReasoningEffort = effort
		return
	}
	typ, ok := t.requiredEnum(th, api.PathOf("thinking"), "type", "enabled", "disabled", "adaptive")
	if !ok {
		return
	}
	switch typ {
	case "enabled":
		raw, ok := t.missing(th, api.PathOf("thinking"), "budget_tokens")
		if !ok {
			return
		}
		n, ok := t.integer(api.PathOf("thinking").Key("budget_tokens"), raw)
		if !ok {
			return
		}
		if n < 1 {
			t.v.Add("thinking.budget_tokens", api.FieldOutOfRange, "must be at least 1")
			return
		}
		if effort == "" {
			effort = budgetEffort(n)
		}
		t.out.ReasoningEffort = effort
		t.out.Reasoning = &chatReasoning{MaxTokens: n}
	case "adaptive":
		if effort == "" {
			effort = "high"
		}
		t.out.ReasoningEffort = effort
	case "disabled":
		// Off, whatever the model's default and the effort asked.
		t.out.ReasoningEffort = "none"
	}
}

// budgetEffort is the effort a thinking budget reads as: Claude Code's
// "think" (4,000) is low, "think hard" (10,000) medium, "ultrathink"
// (31,999) high.
func budgetEffort(n int64) string {
	switch {
	case n < 4096:
		return "low"
	case n < 16384:
		return "medium"
	}
	return "high"
}
