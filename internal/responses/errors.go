package responses

import (
	"errors"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// ChatError restates an error about the chat body (from internal/chat's
// Parse or Prepare: a remote image the organisation does not allow, a
// prompt too long for the model) in terms of the Responses request, so the
// client reads input.2.content.0.image_url rather than a path into a body
// it never sent. Errors of other kinds, and paths with no counterpart, are
// returned as they are.
func (r *Request) ChatError(err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return err
	}
	out := *ae
	out.Param = r.fieldPath(ae.Param)
	if len(ae.Fields) > 0 {
		out.Fields = make([]api.FieldError, len(ae.Fields))
		for i, f := range ae.Fields {
			f.Field = r.fieldPath(f.Field)
			out.Fields[i] = f
		}
		if ae.Kind == api.KindValidation {
			out.Message = api.Invalid(out.Fields...).Message
		}
	}
	return &out
}

// fieldPath maps a chat field path to the Responses one.
func (r *Request) fieldPath(p string) string {
	head, rest, _ := strings.Cut(p, ".")
	switch head {
	case "messages":
		if rest == "" {
			return "input"
		}
		return r.messagePath(rest, p)
	case "max_tokens", "max_completion_tokens":
		return "max_output_tokens"
	case "reasoning_effort":
		return "reasoning.effort"
	case "response_format":
		// response_format.json_schema.name is text.format.name.
		rest = strings.TrimPrefix(strings.TrimPrefix(rest, "json_schema"), ".")
		return join("text.format", rest)
	case "tools":
		// tools.0.function.name is tools.0.name.
		i, sub, _ := strings.Cut(rest, ".")
		return join(join("tools", i), strings.TrimPrefix(strings.TrimPrefix(sub, "function"), "."))
	case "tool_choice":
		return strings.Replace(p, "tool_choice.function", "tool_choice", 1)
	}
	return p
}

func (r *Request) messagePath(rest, orig string) string {
	idx, sub, _ := strings.Cut(rest, ".")
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= len(r.paths) {
		return orig
	}
	mp := r.paths[i]
	path := mp.path()
	field, tail, _ := strings.Cut(sub, ".")
	switch field {
	case "":
		return path
	case "content":
		base := path
		if mp.item >= 0 {
			if mp.tool {
				base = join(path, "output")
			} else {
				base = join(path, "content")
			}
		}
		if !mp.parts || tail == "" {
			return base
		}
		// content.0.image_url.url is content.0.image_url, a string here.
		k, ptail, _ := strings.Cut(tail, ".")
		ptail = strings.TrimSuffix(ptail, ".url")
		if ptail == "text" || ptail == "" || strings.HasPrefix(ptail, "image_url") {
			return join(join(base, k), ptail)
		}
		return join(base, k)
	case "tool_call_id":
		return join(path, "call_id")
	case "tool_calls":
		k, ctail, _ := strings.Cut(tail, ".")
		j, err := strconv.Atoi(k)
		if err != nil || j < 0 || j >= len(mp.calls) {
			return path
		}
		switch ctail {
		case "id":
			return join(itemPath(mp.calls[j]), "call_id")
		case "function.name":
			return join(itemPath(mp.calls[j]), "name")
		case "function.arguments":
			return join(itemPath(mp.calls[j]), "arguments")
		}
		return itemPath(mp.calls[j])
	case "role":
		if mp.item < 0 {
			return path
		}
		return join(path, "role")
	}
	return path
}

// join appends key to a field path of an error, which is rewritten as a
// string; an empty key leaves the path as it is.
func join(path, key string) string {
	switch {
	case key == "":
		return path
	case path == "":
		return key
	}
	return path + "." + key
}
