package responses

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// msgPath is where one chat message came from in the Responses request.
type msgPath struct {
	// item is the index of the input item, or fromInput or
	// fromInstructions.
	item int
	// tool is set for a tool message, whose content is the item's output.
	tool bool
	// parts is set when the content was an array of parts, which keep
	// their indices.
	parts bool
	// calls are the function_call items behind tool_calls.
	calls []int
}

// The items of msgPath that are not input items.
const (
	fromInput        = -1 // input sent as a string
	fromInstructions = -2
)

// path is the message's path: input.3, input, or instructions.
func (mp *msgPath) path() string {
	switch mp.item {
	case fromInput:
		return "input"
	case fromInstructions:
		return "instructions"
	}
	return itemPath(mp.item)
}

// itemPath is the path of input item i.
func itemPath(i int) string { return "input." + strconv.Itoa(i) }

// input converts the conversation. lastAssistant is the message that a
// function_call item joins: the assistant turn right before it.
func (c *checker) input(top object) {
	raw, ok := c.required(top, nil, "input")
	if !ok {
		return
	}
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		c.out.Messages = append(c.out.Messages, chatMessage{Role: "user", Content: compact(raw)})
		c.r.paths = append(c.r.paths, msgPath{item: fromInput})
		return
	case jsonraw.Array:
	default:
		c.v.Add("input", api.FieldWrongType, "must be a string or an array of input items")
		return
	}
	items, _ := jsonraw.CheckedArrayView(raw)
	if len(items) == 0 {
		c.v.Add("input", api.FieldInvalid, "must contain at least one item")
		return
	}
	lastAssistant := -1
	dropped := 0
	for i, e := range items {
		path := api.PathOf("input").Index(i)
		o, ok := c.object(path, e)
		if !ok {
			continue
		}
		typ := "message"
		if t, has := o.Field("type"); has {
			if typ, ok = c.str(path.Key("type"), t); !ok {
				continue
			}
		}
		switch typ {
		case "message":
			if c.message(i, path, o) && c.out.Messages[len(c.out.Messages)-1].Role == "assistant" {
				lastAssistant = len(c.out.Messages) - 1
			} else {
				lastAssistant = -1
			}
		case "function_call":
			lastAssistant = c.functionCall(i, path, o, lastAssistant)
		case "function_call_output":
			c.functionCallOutput(i, path, o)
			lastAssistant = -1
		case "reasoning":
			// Chat engines take no reasoning back; the turn it belonged to
			// is still whole without it.
			dropped++
		case "item_reference":
			c.stateful(path.String(), "item_reference")
		default:
			c.v.AddAt(path.Key("type"), api.FieldNotSupported,
				"%q items are not supported; this gateway takes message, function_call, function_call_output and reasoning items", typ)
		}
	}
	if dropped == len(items) {
		c.v.Add("input", api.FieldInvalid, "must contain a message or a function call, not only reasoning")
	}
}

// message converts a message item and reports whether it was added.
func (c *checker) message(item int, path *api.Path, o object) bool {
	role, ok := c.requiredString(o, path, "role")
	if !ok || !c.enum(path.Key("role"), role, "user", "assistant", "system", "developer") {
		return false
	}
	raw, ok := c.required(o, path, "content")
	if !ok {
		return false
	}
	cpath := path.Key("content")
	mp := msgPath{item: item}
	var content json.RawMessage
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		content = compact(raw)
	case jsonraw.Array:
		elems, _ := jsonraw.CheckedArrayView(raw)
		if len(elems) == 0 && role == "user" {
			c.v.AddAt(cpath, api.FieldInvalid, "must contain at least one part")
			return false
		}
		parts := make([][]byte, 0, len(elems))
		for k, e := range elems {
			if p, ok := c.part(cpath.Index(k), role, e); ok {
				parts = append(parts, p)
			}
		}
		if len(parts) != len(elems) {
			return false
		}
		content = joinArray(parts)
		mp.parts = true
	default:
		c.v.AddAt(cpath, api.FieldWrongType, "must be a string or an array of content parts")
		return false
	}
	if role == "developer" {
		role = "system" // chat engines know no developer role
	}
	c.out.Messages = append(c.out.Messages, chatMessage{Role: role, Content: content})
	c.r.paths = append(c.r.paths, mp)
	return true
}

func joinArray(elems [][]byte) json.RawMessage {
	b := []byte{'['}
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

func textPart(s string) []byte {
	return append(appendString([]byte(`{"type":"text","text":`), s), '}')
}

// part converts one content part to its chat form.
func (c *checker) part(path *api.Path, role string, raw json.RawMessage) ([]byte, bool) {
	p, ok := c.object(path, raw)
	if !ok {
		return nil, false
	}
	typ, ok := c.requiredString(p, path, "type")
	if !ok {
		return nil, false
	}
	switch typ {
	case "input_text", "output_text":
		if s, ok := c.requiredString(p, path, "text"); ok {
			return textPart(s), true
		}
	case "refusal":
		// A refusal the model gave earlier is what it said.
		if s, ok := c.requiredString(p, path, "refusal"); ok {
			return textPart(s), true
		}
	case "input_image", "input_file":
		if role != "user" {
			c.v.AddAt(path.Key("type"), api.FieldNotSupported, "only user messages may carry %s parts", typ)
			return nil, false
		}
		if typ == "input_image" {
			return c.image(path, p)
		}
		if s, ok := c.file(path, p); ok {
			return textPart(s), true
		}
	case "input_audio":
		c.v.AddAt(path.Key("type"), api.FieldNotSupported, "audio input is not supported")
	default:
		c.enum(path.Key("type"), typ, "input_text", "input_image", "input_file", "output_text", "refusal")
	}
	return nil, false
}

func (c *checker) image(path *api.Path, p object) ([]byte, bool) {
	if _, ok := p.Field("file_id"); ok {
		c.stateful(path.Key("file_id").String(), "an image by file_id")
		return nil, false
	}
	u, ok := c.requiredString(p, path, "image_url")
	if !ok || !c.imageURL(path.Key("image_url"), u) {
		return nil, false
	}
	img := struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	}{URL: u}
	if d, ok := c.optEnum(p, path, "detail", "auto", "low", "high", "original"); ok {
		if d == "original" {
			d = "high" // the chat side's most detailed setting
		}
		img.Detail = d
	} else if _, sent := p.Field("detail"); sent {
		return nil, false
	}
	return marshal(struct {
		Type     string `json:"type"`
		ImageURL any    `json:"image_url"`
	}{"image_url", img}), true
}

// imageURL applies the chat side's rules, so that what passes here passes
// there; whether remote URLs are allowed is the organisation's setting,
// which the chat side applies.
func (c *checker) imageURL(path *api.Path, s string) bool {
	if hasPrefixFold(s, "data:") {
		meta, data, ok := strings.Cut(s[len("data:"):], ",")
		meta = strings.ToLower(meta)
		switch {
		case !ok || !strings.HasPrefix(meta, "image/"):
			c.v.AddAt(path, api.FieldInvalid, "must be a data:image/...;base64,... URL")
		case !strings.HasSuffix(meta, ";base64"):
			c.v.AddAt(path, api.FieldInvalid, "the image data must be base64 (data:image/...;base64,...)")
		case data == "":
			c.v.AddAt(path, api.FieldInvalid, "the image data is empty")
		case !chat.ValidBase64(data):
			c.v.AddAt(path, api.FieldInvalid, "the image data is not valid base64")
		default:
			return true
		}
		return false
	}
	if hasPrefixFold(s, "http://") || hasPrefixFold(s, "https://") {
		if typ, msg := chat.RemoteImageProblem(s); typ != "" {
			c.v.AddAt(path, typ, "%s", msg)
			return false
		}
		return true
	}
	c.v.AddAt(path, api.FieldInvalid, "must be a data:image/...;base64,... URL or an https URL")
	return false
}

// file returns the text an engine gets for a file part: its name, a newline
// and its content, as chat completions gives .txt and .csv files.
func (c *checker) file(path *api.Path, p object) (string, bool) {
	if _, ok := p.Field("file_id"); ok {
		c.stateful(path.Key("file_id").String(), "a file by file_id")
		return "", false
	}
	if _, ok := p.Field("file_url"); ok {
		c.v.AddAt(path.Key("file_url"), api.FieldNotSupported, "file_url is not supported; send the file's content as base64 in file_data")
		return "", false
	}
	name, nameOK := c.requiredString(p, path, "filename")
	if nameOK {
		lower := strings.ToLower(name)
		if !strings.HasSuffix(lower, ".txt") && !strings.HasSuffix(lower, ".csv") {
			c.v.AddAt(path.Key("filename"), api.FieldNotSupported, "only .txt and .csv files are supported")
			nameOK = false
		}
	}
	raw, ok := p.Field("file_data")
	if !ok {
		c.v.AddAt(path.Key("file_data"), api.FieldMissing, "required: send the file's content as base64")
		return "", false
	}
	dataPath := path.Key("file_data")
	data, ok := c.str(dataPath, raw)
	if !ok {
		return "", false
	}
	text, ok := c.decodeFile(dataPath, data)
	if !ok || !nameOK {
		return "", false
	}
	return name + ":\n" + text, true
}

// decodeFile decodes file_data at path as the chat parser does.
func (c *checker) decodeFile(path *api.Path, data string) (string, bool) {
	text, fail := chat.DecodeFile(data)
	if fail != nil {
		c.v.AddAt(path, fail.Type, "%s", fail.Message)
		return "", false
	}
	return text, true
}

// functionCall adds a tool call to the assistant turn before it, or starts
// one, and returns the index of that turn.
func (c *checker) functionCall(item int, path *api.Path, o object, lastAssistant int) int {
	callID, ok1 := c.requiredName(o, path, "call_id")
	name, ok2 := c.requiredName(o, path, "name")
	args, ok3 := c.requiredString(o, path, "arguments")
	if !ok1 || !ok2 || !ok3 {
		return lastAssistant
	}
	if c.calls == nil {
		c.calls = map[string]bool{}
	}
	c.calls[callID] = true
	tc := chat.FunctionCall(callID, name, args)
	if lastAssistant < 0 {
		c.out.Messages = append(c.out.Messages, chatMessage{Role: "assistant"})
		c.r.paths = append(c.r.paths, msgPath{item: item})
		lastAssistant = len(c.out.Messages) - 1
	}
	m := &c.out.Messages[lastAssistant]
	m.ToolCalls = append(m.ToolCalls, tc)
	mp := &c.r.paths[lastAssistant]
	mp.calls = append(mp.calls, item)
	return lastAssistant
}

func (c *checker) functionCallOutput(item int, path *api.Path, o object) {
	callID, ok := c.requiredName(o, path, "call_id")
	if ok && !c.calls[callID] {
		// A result must answer a call: engines' chat templates refuse an
		// orphan tool message with no field to name, or render it as if
		// the model had asked, and the Responses API refuses it too.
		c.v.AddAt(path.Key("call_id"), api.FieldInvalid, "no function_call item before this one has call_id %q", callID)
		ok = false
	}
	raw, has := c.required(o, path, "output")
	if !has {
		return
	}
	opath := path.Key("output")
	mp := msgPath{item: item, tool: true}
	var content json.RawMessage
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		content = compact(raw)
	case jsonraw.Array:
		elems, _ := jsonraw.CheckedArrayView(raw)
		parts := make([][]byte, 0, len(elems))
		for k, e := range elems {
			ppath := opath.Index(k)
			p, isObj := c.object(ppath, e)
			if !isObj {
				continue
			}
			typ, isStr := c.requiredString(p, ppath, "type")
			switch {
			case !isStr:
			case typ == "input_text" || typ == "output_text":
				if s, ok := c.requiredString(p, ppath, "text"); ok {
					parts = append(parts, textPart(s))
				}
			case typ == "input_image" || typ == "input_file":
				c.v.AddAt(ppath.Key("type"), api.FieldNotSupported, "function call outputs may carry only text here; chat engines take no %s in tool results", typ)
			default:
				c.enum(ppath.Key("type"), typ, "input_text", "input_image", "input_file")
			}
		}
		if len(parts) != len(elems) {
			return
		}
		content = joinArray(parts)
		mp.parts = true
	default:
		c.v.AddAt(opath, api.FieldWrongType, "must be a string or an array of content parts")
		return
	}
	if !ok {
		return
	}
	c.out.Messages = append(c.out.Messages, chatMessage{Role: "tool", ToolCallID: &callID, Content: content})
	c.r.paths = append(c.r.paths, mp)
}
