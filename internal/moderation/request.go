package moderation

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// Request is a validated body of POST /v1/moderations.
type Request struct {
	// Model is the model asked for, or Options.DefaultModel when the
	// body named none.
	Model string
	// Defaulted reports that Model is Options.DefaultModel: an error about
	// the model then names the setting that chose it, not the request.
	Defaulted bool
	// Checks are run in order, one result each: one per input string, or
	// a single check holding every part.
	Checks []api.ModerationCheck
	// Images reports that some check holds an image.
	Images bool
}

// Options are what Parse needs from the caller's organisation.
type Options struct {
	// AllowRemoteImages keeps https image URLs for the worker to fetch.
	AllowRemoteImages bool
	// DefaultModel is used when the body has no model (or a null one), as
	// the common API's clients send none and expect its default.
	DefaultModel string
}

// Parse reads and validates a moderations body. Malformed JSON is a 400;
// every field failure is listed in one 422 with dotted paths
// (input.3.image_url.url). Unknown top-level fields are ignored, as the
// common API's clients send extras.
//
// input is a non-empty string (one check), 1 to 32 non-empty strings (a
// check each, in order) or 1 to 32 parts checked together, each
// {"type":"text","text":...} or {"type":"image_url","image_url":{"url":...}}
// (the bare-string image_url some clients send is accepted too). An
// empty string is refused like an empty array: there is nothing to judge,
// and a guard's "safe" on nothing would read as a verdict.
//
// Images: a base64 data: URL is decoded here and kept as Data and the
// MediaType read from its bytes; it must be a PNG, JPEG, GIF or WebP whose
// header decodes, of at most api.ModerationMaxImageBytes decoded bytes and
// at most 16384 pixels a side (a bound on what the engine must decode). An
// oversized image is a 422 too_long on its field, not a 413: the body as a
// whole was acceptable, and the 422 names which part to shrink alongside
// any other failure. An https URL is kept as URL only when allowRemote;
// otherwise, when nothing else is wrong, Parse returns a 400 with code
// remote_image_url_not_allowed. http and other schemes are a 422.
//
// model absent or null is o.DefaultModel; an empty string or another type
// is a 422, as it is a client's mistake rather than a choice of the
// default.
func Parse(body []byte, o Options) (*Request, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, api.BadRequest("Request body is empty; send a JSON object")
	}
	// One decode into generic values, walked below: a body may carry 32
	// images of 20 MB, and re-decoding raw sub-values level by level
	// would scan them again at every level. UseNumber keeps an
	// out-of-range number, which is valid JSON, from failing the decode.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, malformed(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, api.BadRequest("Malformed JSON: data after the top-level value")
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "must be a JSON object"})
	}
	p := parser{allowRemote: o.AllowRemoteImages, r: &Request{}}
	p.model(top, o.DefaultModel)
	p.input(top)
	if err := p.v.Err(); err != nil {
		return nil, err
	}
	if p.remote != nil {
		return nil, p.remote
	}
	return p.r, nil
}

// malformed explains a decode failure of a body that is not JSON.
func malformed(err error) error {
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return api.BadRequest("Malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.BadRequest("Malformed JSON: the body ends before the value does")
	}
	return api.BadRequest("Malformed JSON: %v", err)
}

// parser walks a decoded body, filling the request and collecting every
// failure.
type parser struct {
	allowRemote bool
	r           *Request
	v           api.Validator
	// remote is the refusal of the first https URL when remote images are
	// off. It is returned only when the body is otherwise valid: a 422 is
	// about the body, this 400 about the organisation's setting.
	remote *api.Error
}

func (p *parser) model(top map[string]any, def string) {
	switch m := top["model"].(type) {
	case nil:
		// Null reads as not sent, as every optional field of chat does.
		if def == "" {
			p.v.Add("model", api.FieldMissing, "required: the moderation model to use, such as guard-b:4b")
		}
		p.r.Model, p.r.Defaulted = def, true
	case string:
		if m == "" {
			p.v.Add("model", api.FieldMissing, "must not be empty")
		}
		p.r.Model = m
	default:
		p.v.Add("model", api.FieldWrongType, "must be a string")
	}
}

func (p *parser) input(top map[string]any) {
	switch in := top["input"].(type) {
	case nil:
		p.v.Add("input", api.FieldMissing, "required: a string, an array of strings, or an array of text and image_url parts")
	case string:
		if in == "" {
			p.v.Add("input", api.FieldMissing, "must not be empty")
			return
		}
		p.r.Checks = []api.ModerationCheck{{Texts: []string{in}}}
	case []any:
		p.array(in)
	default:
		p.v.Add("input", api.FieldWrongType, "must be a string, an array of strings, or an array of text and image_url parts")
	}
}

// array checks an input array. Its first string or object decides whether
// it holds strings or parts; elements of the other kind are reported as
// mixed, so the client learns both what is wrong and where.
func (p *parser) array(elems []any) {
	switch n := len(elems); {
	case n == 0:
		p.v.Add("input", api.FieldMissing, "must not be empty")
		return
	case n > api.ModerationMaxInputs:
		// The items are not looked at: there may be thousands.
		p.v.Add("input", api.FieldTooLong, "at most %d strings or parts, got %d", api.ModerationMaxInputs, n)
		return
	}
	const (
		strs = iota + 1
		objs
	)
	var mode int
	var parts api.ModerationCheck
	for i, e := range elems {
		path := "input." + strconv.Itoa(i)
		kind := 0
		switch e.(type) {
		case string:
			kind = strs
		case map[string]any:
			kind = objs
		default:
			p.v.Add(path, api.FieldWrongType, "must be a string, or a text or image_url part")
			continue
		}
		if mode == 0 {
			mode = kind
		}
		if kind != mode {
			p.v.Add(path, api.FieldWrongType, "strings and parts cannot be mixed: send strings (a result each) or parts (one result for all)")
			continue
		}
		switch e := e.(type) {
		case string:
			if e == "" {
				p.v.Add(path, api.FieldMissing, "must not be empty")
				continue
			}
			p.r.Checks = append(p.r.Checks, api.ModerationCheck{Texts: []string{e}})
		case map[string]any:
			p.part(path, e, &parts)
		}
	}
	if mode == objs {
		p.r.Checks = []api.ModerationCheck{parts}
		p.r.Images = len(parts.Images) > 0
	}
}

// part checks one content part and adds it to the check.
func (p *parser) part(path string, part map[string]any, c *api.ModerationCheck) {
	typ, ok := p.requiredString(part, path, "type", "required: text or image_url")
	if !ok {
		return
	}
	switch typ {
	case "text":
		text, ok := p.requiredString(part, path, "text", "required: the text to check")
		if !ok {
			return
		}
		if text == "" {
			p.v.Add(path+".text", api.FieldMissing, "must not be empty")
			return
		}
		c.Texts = append(c.Texts, text)
	case "image_url":
		if img, ok := p.imagePart(path, part); ok {
			c.Images = append(c.Images, img)
		}
	default:
		p.v.Add(path+".type", api.FieldEnum, "must be text or image_url, not %q", typ)
	}
}

// imagePart reads {"image_url": {"url": ...}} or the bare-string form
// {"image_url": "..."}.
func (p *parser) imagePart(path string, part map[string]any) (api.ModerationImage, bool) {
	path += ".image_url"
	switch iu := part["image_url"].(type) {
	case nil:
		p.v.Add(path, api.FieldMissing, "required: an object with the image's url")
	case string:
		return p.image(path, iu)
	case map[string]any:
		if u, ok := p.requiredString(iu, path, "url", "required: a base64 data:image/... URL or an https URL"); ok {
			return p.image(path+".url", u)
		}
	default:
		p.v.Add(path, api.FieldWrongType, "must be an object with a url")
	}
	return api.ModerationImage{}, false
}

// image checks an image URL: a data: URL is decoded and inspected, an
// https URL kept for the worker to fetch.
func (p *parser) image(path, s string) (api.ModerationImage, bool) {
	switch {
	case hasPrefixFold(s, "data:"):
		return p.dataImage(path, s[len("data:"):])
	case hasPrefixFold(s, "https://"):
		u, err := url.Parse(s)
		switch {
		case err != nil || u.Hostname() == "":
			p.v.Add(path, api.FieldInvalid, "must be a valid https URL")
		case u.User != nil:
			// user@host is the classic way to make a URL read as one
			// host and go to another; no image host needs it.
			p.v.Add(path, api.FieldInvalid, "must not contain a user name or password")
		case !p.allowRemote:
			if p.remote == nil {
				p.remote = remoteRefused(path)
			}
		default:
			return api.ModerationImage{URL: s}, true
		}
		return api.ModerationImage{}, false
	case hasPrefixFold(s, "http://"):
		p.v.Add(path, api.FieldInvalid, "plain http image URLs are not fetched: use https, or a base64 data:image/... URL")
	default:
		p.v.Add(path, api.FieldInvalid, "must be a base64 data:image/... URL or an https URL")
	}
	return api.ModerationImage{}, false
}

// dataImage decodes the part of a data: URL after "data:". The size is
// checked before decoding, so an oversized image costs nothing.
func (p *parser) dataImage(path, s string) (api.ModerationImage, bool) {
	meta, payload, ok := strings.Cut(s, ",")
	meta = strings.ToLower(meta)
	switch {
	case !ok || !strings.HasPrefix(meta, "image/"):
		p.v.Add(path, api.FieldInvalid, "must be a data:image/...;base64,... URL")
		return api.ModerationImage{}, false
	case !strings.HasSuffix(meta, ";base64"):
		p.v.Add(path, api.FieldInvalid, "the image data must be base64 (data:image/...;base64,...)")
		return api.ModerationImage{}, false
	}
	payload = strings.TrimRight(payload, "=")
	if payload == "" {
		p.v.Add(path, api.FieldInvalid, "the image data is empty")
		return api.ModerationImage{}, false
	}
	if base64.RawStdEncoding.DecodedLen(len(payload)) > api.ModerationMaxImageBytes {
		p.v.Add(path, api.FieldTooLong, "the image is larger than %d MB", api.ModerationMaxImageBytes>>20)
		return api.ModerationImage{}, false
	}
	data, err := base64.RawStdEncoding.DecodeString(payload)
	if err != nil {
		p.v.Add(path, api.FieldInvalid, "the image data is not valid base64")
		return api.ModerationImage{}, false
	}
	mt, err := inspectImage(data)
	switch {
	case errors.Is(err, errNotImage):
		p.v.Add(path, api.FieldInvalid, "%s", err.Error())
		return api.ModerationImage{}, false
	case err != nil:
		p.v.Add(path, api.FieldTooLong, "%s", err.Error())
		return api.ModerationImage{}, false
	}
	// The media type read from the bytes wins over the declared one:
	// the guard's engine decodes by content, and so do we.
	return api.ModerationImage{Data: data, MediaType: mt}, true
}

func remoteRefused(path string) *api.Error {
	return &api.Error{
		Kind:       api.KindInvalidRequest,
		Type:       api.TypeInvalidRequest,
		Code:       api.CodeRemoteImageURLNotAllowed,
		CodeHeader: true,
		Param:      path,
		Message: "Remote image URLs are turned off: send the image inline as a base64 data: URL " +
			"(data:image/png;base64,...), which always works, or have the organisation turn on " +
			"Allow remote image URLs (allow_remote_image_urls)",
	}
}

// requiredString reads a required string member of obj, reporting it
// under path.key when missing (or null) or not a string.
func (p *parser) requiredString(obj map[string]any, path, key, missing string) (string, bool) {
	switch v := obj[key].(type) {
	case nil:
		p.v.Add(path+"."+key, api.FieldMissing, "%s", missing)
	case string:
		return v, true
	default:
		p.v.Add(path+"."+key, api.FieldWrongType, "must be a string")
	}
	return "", false
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
