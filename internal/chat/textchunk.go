package chat

import (
	"strings"

	"github.com/svc-dev/svc/internal/jsontext"
)

// TextChunk is what a plain chunk of a chat stream carries: text, or
// reasoning text, for choice 0. Nearly every chunk of a stream is one, and
// the translations into other APIs' events take it by a path of their own
// (ReadTextChunk), where decoding the chunk into its members at each level
// cost several microseconds and tens of allocations a chunk.
type TextChunk struct {
	// Content, ReasoningContent and Reasoning are the delta's members of
	// those names: their text, nil when absent or null. The texts are
	// valid until the chunk's bytes change.
	Content, ReasoningContent, Reasoning []byte
	// HasReasoningContent is set when reasoning_content was sent and not
	// null.
	HasReasoningContent bool
}

// ReadTextChunk reads data, a chunk of a chat stream, when it is a plain
// one: a JSON object whose choices are one choice of index 0 (or none
// given), without a finish_reason, whose delta holds only content,
// reasoning_content and reasoning, each text or null, and a role; and
// which has no usage but null, no svc and no error. It reads data once
// with jsontext's scanner, which checks it is JSON. ok is false for any
// other chunk, and for one its reader would have to decide between two of
// a member (a name sent twice, or also in another case, which
// encoding/json matches to a field too), to be read in full.
func ReadTextChunk(data []byte) (c TextChunk, ok bool) {
	var sc jsontext.Scanner
	sc.Reset(data)
	if sc.Peek() != '{' {
		return c, false
	}
	sc.Open()
	choices := false
	for n := 0; sc.Next(n, '}'); n++ {
		switch name := string(sc.Name()); name {
		case "choices":
			if choices || !c.readChoices(&sc) {
				return c, false
			}
			choices = true
		case "usage":
			if !sc.Null() {
				return c, false
			}
		default:
			if foldsTo(name, "choices", "usage", "svc", "error") {
				return c, false
			}
			sc.Value()
		}
	}
	sc.End()
	return c, !sc.Bad()
}

// foldsTo reports whether name is one of names in any case.
func foldsTo(name string, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}

func (c *TextChunk) readChoices(sc *jsontext.Scanner) bool {
	if sc.Peek() != '[' {
		return false
	}
	sc.Open()
	if !sc.Next(0, ']') || sc.Peek() != '{' {
		return false
	}
	sc.Open()
	var index, delta, finish bool
	for n := 0; sc.Next(n, '}'); n++ {
		switch name := string(sc.Name()); name {
		case "index":
			if index || string(sc.Raw()) != "0" {
				return false
			}
			index = true
		case "delta":
			if delta || !c.readDelta(sc) {
				return false
			}
			delta = true
		case "finish_reason":
			if finish || !sc.Null() {
				return false
			}
			finish = true
		default:
			if foldsTo(name, "index", "delta", "finish_reason") {
				return false
			}
			sc.Value()
		}
	}
	return !sc.Next(1, ']') && !sc.Bad()
}

func (c *TextChunk) readDelta(sc *jsontext.Scanner) bool {
	if sc.Peek() != '{' {
		return false
	}
	sc.Open()
	var seen [3]bool
	for n := 0; sc.Next(n, '}'); n++ {
		var at int
		switch string(sc.Name()) {
		case "role":
			sc.Value()
			continue
		case "content":
			at = 0
		case "reasoning_content":
			at = 1
		case "reasoning":
			at = 2
		default:
			return false
		}
		if seen[at] {
			return false
		}
		seen[at] = true
		text, isText := sc.Text()
		if !isText && (sc.Mistyped() || sc.Bad()) {
			return false // neither text nor null
		}
		switch at {
		case 0:
			c.Content = text
		case 1:
			c.ReasoningContent, c.HasReasoningContent = text, isText
		case 2:
			c.Reasoning = text
		}
	}
	return !sc.Bad()
}
