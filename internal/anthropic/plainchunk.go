package anthropic

import (
	"strconv"

	"github.com/svc-dev/svc/internal/jsontext"
)

// plainChunk is Chunk for the chunk nearly every one of a stream is: text,
// or reasoning text, for choice 0, and nothing else the translation reads.
// It reads the chunk once with jsontext's scanner, which also checks it,
// and writes its events by hand, where the general path decoded it into a
// map at each level and encoded each event through reflection: 9 µs and 38
// allocations a chunk. ok is false, with nothing written and the stream
// unchanged, for any other chunk, which chunk reads (FuzzPlainChunk holds
// the two to the same events).
func (s *Stream) plainChunk(dst, data []byte) (_ []byte, ok bool) {
	var d plainDelta
	var sc jsontext.Scanner
	sc.Reset(data)
	if sc.Peek() != '{' {
		return dst, false
	}
	sc.Open()
	choices := false
	for n := 0; sc.Next(n, '}'); n++ {
		switch string(sc.Name()) {
		case "choices":
			if choices || !d.readChoices(&sc) {
				return dst, false
			}
			choices = true
		case "usage":
			if !sc.Null() {
				return dst, false
			}
		case "error", "svc":
			return dst, false
		default:
			sc.Value()
		}
	}
	if sc.End(); sc.Bad() {
		return dst, false
	}
	dst = s.start(dst)
	thinking := d.reasoning
	if d.hasReasoningContent {
		thinking = d.reasoningContent
	}
	if len(thinking) > 0 {
		dst = s.ensure(dst, blockThinking)
		dst = appendBlockDelta(dst, s.index, "thinking_delta", "thinking", thinking)
	}
	if len(d.content) > 0 {
		dst = s.ensure(dst, blockText)
		dst = appendBlockDelta(dst, s.index, "text_delta", "text", d.content)
	}
	return dst, true
}

// plainDelta is the text a plain chunk's delta carries.
type plainDelta struct {
	content, reasoningContent, reasoning []byte
	// hasReasoningContent: reasoning_content was sent and not null, and
	// is then the reasoning text, as reasoningOf reads it.
	hasReasoningContent bool
	seen                [3]bool
}

// readChoices reads a choices array of one choice, index 0, with at most a
// delta of text and no finish_reason.
func (d *plainDelta) readChoices(sc *jsontext.Scanner) bool {
	if sc.Peek() != '[' {
		return false
	}
	sc.Open()
	if !sc.Next(0, ']') || sc.Peek() != '{' {
		return false
	}
	sc.Open()
	var index, delta bool
	for n := 0; sc.Next(n, '}'); n++ {
		switch string(sc.Name()) {
		case "index":
			if index || string(sc.Raw()) != "0" {
				return false
			}
			index = true
		case "delta":
			if delta || !d.read(sc) {
				return false
			}
			delta = true
		case "finish_reason":
			if !sc.Null() {
				return false
			}
		default:
			sc.Value()
		}
	}
	return !sc.Next(1, ']') && !sc.Bad()
}

// read reads a delta whose members are text or null, and a role.
func (d *plainDelta) read(sc *jsontext.Scanner) bool {
	if sc.Peek() != '{' {
		return false
	}
	sc.Open()
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
		if d.seen[at] {
			return false
		}
		d.seen[at] = true
		text, isText := sc.Text()
		if !isText && (sc.Mistyped() || sc.Bad()) {
			return false // neither text nor null
		}
		switch at {
		case 0:
			d.content = text
		case 1:
			d.reasoningContent, d.hasReasoningContent = text, isText
		case 2:
			d.reasoning = text
		}
	}
	return !sc.Bad()
}

// appendBlockDelta writes the content_block_delta event of block index
// carrying text as its delta's member key, as event writes it.
func appendBlockDelta(dst []byte, index int, typ, key string, text []byte) []byte {
	dst = append(dst, `event: content_block_delta
data: {"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	dst = append(dst, `,"delta":{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","`...)
	dst = append(dst, key...)
	dst = append(dst, `":`...)
	dst = jsontext.AppendStringNoHTML(dst, string(text))
	return append(dst, "}}\n\n"...)
}
