package anthropic

import (
	"unicode/utf8"
)

// Count checks the body of POST /v1/messages/count_tokens, a Messages
// request without max_tokens, and reports its model and the characters of
// what the model would read as text: the system prompt, every message's
// text, documents and tool calls and results, and the tools' definitions.
// Images are not counted. Failures are ToChat's, in the same paths.
func Count(body []byte, o Options) (model string, chars int, err error) {
	r, err := translateFor(body, translation{counting: true, remoteImages: o.AllowRemoteImages})
	if err != nil {
		return "", 0, err
	}
	return r.Model, inputChars(r), nil
}

// inputChars is what the model would read of r, in characters.
func inputChars(r *chatRequest) (chars int) {
	for _, m := range r.Messages {
		switch c := m.Content.(type) {
		case string:
			chars += utf8.RuneCountInString(c)
		case []chatPart:
			for _, p := range c {
				chars += partChars(p)
			}
		}
		for _, tc := range m.ToolCalls {
			chars += utf8.RuneCountInString(tc.Function.Name) + utf8.RuneCountInString(tc.Function.Arguments)
		}
	}
	for _, t := range r.Tools {
		d := t.Function
		chars += utf8.RuneCountInString(d.Name) + utf8.RuneCountInString(d.Description) + utf8.RuneCount(d.Parameters)
	}
	return chars
}

func partChars(p chatPart) int {
	switch {
	case p.Text != nil:
		return utf8.RuneCountInString(*p.Text)
	case p.File != nil:
		// A document's text travels in base64, checked as UTF-8 text.
		if text, ok := base64Decode(p.File.FileData); ok {
			return utf8.RuneCountInString(text)
		}
	}
	return 0
}
