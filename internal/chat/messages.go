package chat

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/netguard"
)

var (
	// developer is OpenAI's newer name for system, which its SDKs and
	// agent frameworks send; chat templates know only system.
	roleValues = []string{"system", "user", "assistant", "tool", "developer"}
	partValues = []string{"text", "image_url", "file"}
)

// messages checks the conversation and prepares the text parts that replace
// file parts, since engines do not take files.
func (c *checker) messages(top *object) {
	raw, ok := c.missing(top, nil, "messages")
	if !ok {
		return
	}
	if jsonraw.KindOf(raw) != jsonraw.Array {
		c.v.Add("messages", api.FieldWrongType, "must be an array")
		return
	}
	i := skipSpace(raw, skipSpace(raw, 0)+1)
	if i < len(raw) && raw[i] == ']' {
		c.v.Add("messages", api.FieldInvalid, "must contain at least one message")
		return
	}
	// Each message is parsed where it lies in the array, and where it
	// ends is where the next begins: a conversation's bytes are read once
	// here rather than once to split the array and again for each message.
	var elems, canon []json.RawMessage
	for n := 0; ; n++ {
		end, replaced := c.message(api.PathOf("messages").Index(n), raw, i)
		if end < 0 {
			return // not JSON, which Parse has ruled out
		}
		e := raw[i:end]
		elems = append(elems, e)
		if replaced != nil && canon == nil {
			canon = append(make([]json.RawMessage, 0, cap(elems)), elems[:n]...)
		}
		switch {
		case replaced != nil:
			canon = append(canon, replaced)
		case canon != nil:
			canon = append(canon, e)
		}
		if i = skipSpace(raw, end); i >= len(raw) || raw[i] != ',' {
			break
		}
		i = skipSpace(raw, i+1)
	}
	c.r.Messages = elems
	if canon != nil {
		c.r.messages = encodeArray(canon)
	}
}

// message checks the message that starts at body[start] and returns the
// index just past it, -1 if it is not JSON, with its canonical form when
// that differs from what was sent (file parts turned into text), else nil.
func (c *checker) message(path *api.Path, body []byte, start int) (end int, replaced json.RawMessage) {
	if start >= len(body) || body[start] != '{' {
		next, err := skipValue(body, start)
		if err != nil {
			return -1, nil
		}
		c.v.AddAt(path, api.FieldWrongType, "must be an object")
		return next, nil
	}
	msg := &c.msg
	end, err := msg.parseAt(body, start)
	if err != nil {
		return -1, nil
	}
	role, ok := c.requiredEnum(msg, path, "role", roleValues...)
	if !ok {
		return end, nil // the content rules depend on the role
	}
	developer := role == "developer"
	if developer {
		role = "system"
	}
	required := true
	switch role {
	case "assistant":
		// A turn that only calls tools has no text.
		required = c.toolCalls(path, msg) == 0
	case "tool":
		if id, ok := c.requiredString(msg, path, "tool_call_id"); ok && !c.answers(id) {
			// As the OpenAI API refuses it: engines' chat templates refuse
			// an orphan result with no field to name, or render it as if
			// the model had asked.
			c.v.AddAt(path.Key("tool_call_id"), api.FieldInvalid, "no assistant message before this one has a tool call with this id")
		}
	}
	content, ok := c.field(msg, path, "content")
	if !ok {
		if required {
			if role == "assistant" {
				c.v.AddAt(path.Key("content"), api.FieldMissing, "required unless tool_calls is present")
			} else {
				c.v.AddAt(path.Key("content"), api.FieldMissing, "required")
			}
		}
		return end, nil
	}
	parts, replacedParts := c.content(path, role, content)
	if !replacedParts && !developer {
		return end, nil
	}
	msg = msg.clone()
	if developer {
		msg.set("role", json.RawMessage(`"system"`))
	}
	if replacedParts {
		msg.set("content", parts)
	}
	return end, msg.encode()
}

// content checks the content of the message at msgPath; it returns the
// rewritten parts array and true only when a file part was replaced.
func (c *checker) content(msgPath *api.Path, role string, raw json.RawMessage) (json.RawMessage, bool) {
	kind := jsonraw.KindOf(raw)
	if kind == jsonraw.String {
		c.r.PromptChars += stringChars(raw)
		return nil, false
	}
	// Built past the common case, a string, for which nothing is reported.
	path := msgPath.Key("content")
	switch kind {
	case jsonraw.Array:
	default:
		if role == "user" {
			c.v.AddAt(path, api.FieldWrongType, "must be a string or an array of content parts")
		} else {
			c.v.AddAt(path, api.FieldWrongType, "must be a string or an array of text parts")
		}
		return nil, false
	}
	elems, _ := parseArray(raw)
	if len(elems) == 0 && role == "user" {
		c.v.AddAt(path, api.FieldInvalid, "must contain at least one part")
		return nil, false
	}
	changed := false
	out := make([]json.RawMessage, len(elems))
	for i, e := range elems {
		out[i] = e
		if text, ok := c.part(path.Index(i), role, e); ok {
			out[i] = textPart(text)
			changed = true
		}
	}
	if !changed {
		return nil, false
	}
	return encodeArray(out), true
}

// part checks one content part. For a valid file part it returns the text
// that replaces it.
func (c *checker) part(path *api.Path, role string, raw json.RawMessage) (string, bool) {
	p, ok := c.object(path, "", raw)
	if !ok {
		return "", false
	}
	typ, ok := c.requiredEnum(p, path, "type", partValues...)
	if !ok {
		return "", false
	}
	if typ != "text" && role != "user" {
		c.v.AddAt(path.Key("type"), api.FieldNotSupported, "only user messages may carry %s parts", typ)
		return "", false
	}
	switch typ {
	case "text":
		if s, ok := c.requiredString(p, path, "text"); ok {
			c.r.PromptChars += utf8.RuneCountInString(s)
		}
	case "image_url":
		c.r.Images++
		c.imageURL(path, p)
	case "file":
		text, ok := c.file(path, p)
		if ok {
			c.r.PromptChars += utf8.RuneCountInString(text)
		}
		return text, ok
	}
	return "", false
}

func textPart(text string) json.RawMessage {
	b := []byte(`{"type":"text","text":`)
	b = appendString(b, text)
	return append(b, '}')
}

// imageURL accepts both {"image_url": {"url": ...}} and the bare-string
// form {"image_url": "..."} that some clients send.
func (c *checker) imageURL(path *api.Path, p *object) {
	raw, ok := c.missing(p, path, "image_url")
	if !ok {
		return
	}
	path = path.Key("image_url")
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		s, _ := decodeString(raw)
		c.checkImageURL(path, s)
	case jsonraw.Object:
		o, _ := parseObject(raw)
		if s, ok := c.requiredString(o, path, "url"); ok {
			c.checkImageURL(path.Key("url"), s)
		}
	default:
		c.v.AddAt(path, api.FieldWrongType, "must be an object with a url, or a URL string")
	}
}

func (c *checker) checkImageURL(path *api.Path, s string) {
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
		case !ValidBase64(data):
			c.v.AddAt(path, api.FieldInvalid, "the image data is not valid base64")
		}
		return
	}
	if hasPrefixFold(s, "http://") || hasPrefixFold(s, "https://") {
		switch {
		case c.opts.Sealed:
			c.v.AddAt(path, api.FieldNotAllowed, "an encrypted request carries its images inline, not as URLs to fetch; send the image as a data:image/...;base64 URL")
			return
		case !c.opts.AllowRemoteImages:
			c.v.AddAt(path, api.FieldNotAllowed, "remote image URLs are turned off for this organisation; send the image as a data:image/...;base64 URL")
			return
		}
		if typ, msg := RemoteImageProblem(s); typ != "" {
			c.v.AddAt(path, typ, "%s", msg)
		}
		return
	}
	if c.opts.AllowRemoteImages {
		c.v.AddAt(path, api.FieldInvalid, "must be a data:image/...;base64,... URL or an https URL")
	} else {
		c.v.AddAt(path, api.FieldInvalid, "must be a data:image/...;base64,... URL")
	}
}

// file checks a file part and returns the text the engine gets instead:
// the file name, a newline and the decoded content.
func (c *checker) file(partPath *api.Path, p *object) (string, bool) {
	f, ok := c.requiredObject(p, partPath, "file")
	if !ok {
		return "", false
	}
	path := partPath.Key("file")
	name, nameOK := c.requiredString(f, path, "filename")
	if nameOK {
		lower := strings.ToLower(name)
		if !strings.HasSuffix(lower, ".txt") && !strings.HasSuffix(lower, ".csv") {
			c.v.AddAt(path.Key("filename"), api.FieldNotSupported, "only .txt and .csv files are supported")
			nameOK = false
		}
	}
	raw, ok := c.field(f, path, "file_data")
	if !ok {
		c.v.AddAt(path.Key("file_data"), api.FieldMissing, "required: send the file's content as base64 (file_id is not supported)")
		return "", false
	}
	dataPath := path.Key("file_data")
	data, ok := c.str(dataPath, "", raw)
	if !ok {
		return "", false
	}
	text, ok := c.decodeFile(dataPath, data)
	if !ok || !nameOK {
		return "", false
	}
	return name + ":\n" + text, true
}

// decodeFile decodes file_data at path, recording why when it cannot.
func (c *checker) decodeFile(path *api.Path, data string) (string, bool) {
	text, fail := DecodeFile(data)
	if fail != nil {
		c.v.AddAt(path, fail.Type, "%s", fail.Message)
		return "", false
	}
	return text, true
}

// DecodeFile decodes a text file part's file_data (plain base64 or a
// base64 data: URL), checking the size before decoding so that an
// oversized file costs nothing. A refusal is a FieldError without its
// field, which the caller names in its own request's terms.
func DecodeFile(data string) (string, *api.FieldError) {
	fail := func(typ, msg string) (string, *api.FieldError) {
		return "", &api.FieldError{Type: typ, Message: msg}
	}
	if hasPrefixFold(data, "data:") {
		_, payload, ok := SplitDataURL(data)
		if !ok {
			return fail(api.FieldInvalid, "a data: URL must be base64 (data:...;base64,...)")
		}
		data = payload
	}
	if !ValidBase64(data) {
		return fail(api.FieldInvalid, "must be base64")
	}
	data = strings.TrimRight(data, "=")
	if base64.RawStdEncoding.DecodedLen(len(data)) > MaxFileBytes {
		return fail(api.FieldTooLong, "the file is larger than 1 MB")
	}
	b, err := base64.RawStdEncoding.DecodeString(data)
	if err != nil {
		return fail(api.FieldInvalid, "must be base64")
	}
	if !utf8.Valid(b) {
		return fail(api.FieldInvalid, "the file must be UTF-8 text")
	}
	// Spreadsheet exports often start with a byte-order mark; it is not
	// text the model should see.
	return strings.TrimPrefix(string(b), "\uFEFF"), nil
}

// toolCalls checks an assistant message's tool_calls and returns how many
// there are.
func (c *checker) toolCalls(path *api.Path, msg *object) int {
	elems, ok := c.optArray(msg, path, "tool_calls")
	if !ok {
		return 0
	}
	for i, raw := range elems {
		p := path.Key("tool_calls").Index(i)
		tc, ok := c.object(p, "", raw)
		if !ok {
			continue
		}
		if id, ok := c.requiredString(tc, p, "id"); ok {
			if c.callIDs == nil {
				c.callIDs = map[string]struct{}{}
			}
			c.callIDs[strings.Clone(id)] = struct{}{}
		}
		c.requiredEnum(tc, p, "type", "function")
		fn, ok := c.requiredObject(tc, p, "function")
		if !ok {
			continue
		}
		fp := p.Key("function")
		c.requiredString(fn, fp, "name")
		if args, ok := c.optString(fn, fp, "arguments"); ok {
			c.r.PromptChars += utf8.RuneCountInString(args)
		}
	}
	return len(elems)
}

// answers reports whether id is the id of an earlier tool call.
func (c *checker) answers(id string) bool {
	_, ok := c.callIDs[id]
	return ok
}

// SplitDataURL splits a base64 data: URL ("data:<media>;base64,<data>",
// the scheme and ";base64" in any case) into its media type, lowered, and
// its data; false for any other URL.
func SplitDataURL(u string) (media, data string, ok bool) {
	if !hasPrefixFold(u, "data:") {
		return "", "", false
	}
	meta, data, ok := strings.Cut(u[len("data:"):], ",")
	if !ok || !hasSuffixFold(meta, ";base64") {
		return "", "", false
	}
	return strings.ToLower(meta[:len(meta)-len(";base64")]), data, true
}

// ValidBase64 reports whether s is standard base64, padded or not. Unlike
// the decoder it refuses line breaks, which engines may not skip; it
// allocates nothing, as image data can be megabytes.
func ValidBase64(s string) bool {
	trimmed := strings.TrimRight(s, "=")
	pad := len(s) - len(trimmed)
	if pad > 2 || (pad > 0 && len(s)%4 != 0) || len(trimmed)%4 == 1 {
		return false
	}
	for i := 0; i < len(trimmed); i++ {
		b := trimmed[i]
		if !('A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '+' || b == '/') {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// RemoteImageProblem says what is wrong with an http(s) image URL whatever
// the organisation allows (the field error's type and message), or "".
// The worker fetches the image through its address guard; what is
// refused whatever it resolves to is refused as the request is read,
// before a worker's slot is taken.
func RemoteImageProblem(s string) (typ, msg string) {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "":
		return api.FieldInvalid, "must be a valid https URL"
	case !strings.EqualFold(u.Scheme, "https"):
		return api.FieldNotAllowed, "remote images are fetched over https only"
	case u.User != nil:
		return api.FieldNotAllowed, "the URL must not contain a user name or password"
	}
	if _, why := netguard.HostVerdict(u.Hostname()); why != "" {
		return api.FieldNotAllowed, "the image's address is refused: " + why
	}
	return "", ""
}
