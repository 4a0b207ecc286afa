package relay

import (
	"encoding/json"

	"github.com/svc-dev/svc/internal/jsontext"
)

// The relay reads a few fields of every chunk it passes on, and of every
// non-streaming answer it completes, with jsontext's scanner: one pass over
// the bytes that reads them as encoding/json did, where decoding them
// cost a tenth of a stream's CPU.

// chunkChoice is what the relay reads of a streamed chunk's choice.
type chunkChoice struct {
	index int // -1 when not a whole number
	// text is a text_completion chunk's choices[].text, beside the
	// delta's content of a chat chunk.
	text               []byte
	content, reasoning []byte
	toolCalls          bool // delta.tool_calls present and not null
	finish             []byte
	finished           bool // finish_reason a string, not null
}

// chunkScan reads streamed chunks; one serves a whole stream.
type chunkScan struct {
	jsontext.Scanner
	id []byte
	// created is the chunk's created member as sent, nil when absent.
	created []byte
	choices []chunkChoice
	// notJSON is set when the chunk last read is not JSON at all.
	notJSON bool
}

// read takes what the relay needs from a chunk, false when encoding/json
// would not have decoded it: a chunk of another shape, or not JSON
// (notJSON).
func (s *chunkScan) read(msg []byte) bool {
	s.Reset(msg)
	defer s.Reset(nil)
	s.id, s.created, s.choices, s.notJSON = nil, nil, s.choices[:0], false
	again := false
	seen := false
	if s.Object() {
		for n := 0; s.Next(n, '}'); n++ {
			k, kind := s.Key()
			switch {
			case s.Is(k, kind, "id"):
				if t, ok := s.Text(); ok {
					s.id = t
				}
			case s.Is(k, kind, "created"):
				// Read as sent: a chunk whose created is no integer is
				// still relayed as it is.
				s.created = s.Raw()
			case s.Is(k, kind, "choices"):
				again, seen = seen, true
				s.readChoices()
			default:
				s.Value()
			}
		}
	}
	s.End()
	if s.Bad() {
		s.notJSON = true
		return false
	}
	if s.Mistyped() {
		return false
	}
	if again {
		return s.decode(msg)
	}
	return true
}

func (s *chunkScan) readChoices() {
	elements, null := s.Array()
	if elements || null {
		s.choices = s.choices[:0]
	}
	if !elements {
		return
	}
	for n := 0; s.Next(n, ']'); n++ {
		s.choices = append(s.choices, chunkChoice{index: -1})
		ch := &s.choices[n]
		if !s.Object() {
			continue
		}
		for m := 0; s.Next(m, '}'); m++ {
			k, kind := s.Key()
			switch {
			case s.Is(k, kind, "index"):
				ch.index = choiceIndex(s.Raw())
			case s.Is(k, kind, "delta"):
				s.readDelta(ch)
			case s.Is(k, kind, "text"):
				if t, ok := s.Text(); ok {
					ch.text = t
				}
			case s.Is(k, kind, "finish_reason"):
				ch.finish, ch.finished = s.Text()
			default:
				s.Value()
			}
		}
	}
}

func (s *chunkScan) readDelta(ch *chunkChoice) {
	if !s.Object() {
		return
	}
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		switch {
		case s.Is(k, kind, "content"):
			if t, ok := s.Text(); ok {
				ch.content = t
			}
		case s.Is(k, kind, "reasoning_content"):
			if t, ok := s.Text(); ok {
				ch.reasoning = t
			}
		case s.Is(k, kind, "tool_calls"):
			ch.toolCalls = !s.Null()
		default:
			s.Value()
		}
	}
}

// streamChunk is a chunk as encoding/json decodes it, for the chunk that
// repeats its choices: encoding/json decodes the second array into the
// first one's elements, spare capacity included, which is not worth
// copying for something no engine sends.
type streamChunk struct {
	ID      string          `json:"id"`
	Created json.RawMessage `json:"created"`
	Choices []struct {
		Index json.RawMessage `json:"index"`
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

func (s *chunkScan) decode(msg []byte) bool {
	var ch streamChunk
	if json.Unmarshal(msg, &ch) != nil {
		return false
	}
	s.id, s.created, s.choices = []byte(ch.ID), ch.Created, s.choices[:0]
	for _, c := range ch.Choices {
		d := c.Delta
		out := chunkChoice{index: choiceIndex(c.Index), text: []byte(c.Text), content: []byte(d.Content), reasoning: []byte(d.ReasoningContent), toolCalls: present(d.ToolCalls)}
		if c.FinishReason != nil {
			out.finish, out.finished = []byte(*c.FinishReason), true
		}
		s.choices = append(s.choices, out)
	}
	return true
}

// answerChoice is what the relay reads of a non-streaming answer's choice.
type answerChoice struct {
	index              int    // its index member, else its place in choices
	text               []byte // a text_completion's choices[].text
	content, reasoning []byte
	toolCalls          bool
	finish             []byte
}

// answerScan is what the relay reads of a non-streaming answer.
type answerScan struct {
	jsontext.Scanner
	choices      []answerChoice
	usage        bool   // usage present and not null
	webToolSteps []byte // as sent, null included
	// stepsAt is where the web_tool_steps member lies in the answer, from
	// its comma (or its name when first) to the end of its value; 0, 0
	// when unknown.
	stepsAt    [2]int
	stepsFirst bool
}

// read takes what the relay needs from an answer; false when
// encoding/json would not have decoded it.
func (s *answerScan) read(body []byte) bool {
	s.Reset(body)
	s.choices, s.usage, s.webToolSteps = s.choices[:0], false, nil
	s.stepsAt, s.stepsFirst = [2]int{}, false
	again, seen := false, false
	if s.Object() {
		for n := 0; ; n++ {
			at := s.Offset()
			if !s.Next(n, '}') {
				break
			}
			k, kind := s.Key()
			switch {
			case s.Is(k, kind, "choices"):
				again, seen = seen, true
				s.readChoices()
			case s.Is(k, kind, "usage"):
				s.usage = !s.Null()
			case s.Is(k, kind, "web_tool_steps"):
				s.webToolSteps = s.Raw()
				s.stepsAt, s.stepsFirst = [2]int{at, s.Offset()}, n == 0
			default:
				s.Value()
			}
		}
	}
	s.End()
	if s.Bad() || s.Mistyped() {
		return false
	}
	if again {
		return s.decode(body) == nil
	}
	return true
}

// cutSteps is body without its web_tool_steps member, which the gateway
// moves into svc: a new slice, body unchanged.
func (s *answerScan) cutSteps(body []byte) []byte {
	from, to := s.stepsAt[0], s.stepsAt[1]
	if to <= from || to > len(body) {
		return body
	}
	return cutMember(body, from, to, s.stepsFirst)
}

// cutMember removes the member of obj from from to to: from its comma, or,
// when it is the first, from its name and through the comma after it.
func cutMember(obj []byte, from, to int, first bool) []byte {
	if first {
		i := to
		for i < len(obj) && (obj[i] == ' ' || obj[i] == '\t' || obj[i] == '\n' || obj[i] == '\r') {
			i++
		}
		if i < len(obj) && obj[i] == ',' {
			to = i + 1
		}
	}
	out := make([]byte, 0, len(obj)-(to-from))
	return append(append(out, obj[:from]...), obj[to:]...)
}

func (s *answerScan) readChoices() {
	elements, null := s.Array()
	if elements || null {
		s.choices = s.choices[:0]
	}
	if !elements {
		return
	}
	for n := 0; s.Next(n, ']'); n++ {
		s.choices = append(s.choices, answerChoice{index: n})
		ch := &s.choices[n]
		if !s.Object() {
			continue
		}
		for m := 0; s.Next(m, '}'); m++ {
			k, kind := s.Key()
			switch {
			case s.Is(k, kind, "index"):
				if i := choiceIndex(s.Raw()); i >= 0 {
					ch.index = i
				}
			case s.Is(k, kind, "message"):
				s.readMessage(ch)
			case s.Is(k, kind, "text"):
				ch.text, _ = s.Text()
			case s.Is(k, kind, "finish_reason"):
				if t, ok := s.Text(); ok {
					ch.finish = t
				}
			default:
				s.Value()
			}
		}
	}
}

func (s *answerScan) readMessage(ch *answerChoice) {
	if !s.Object() {
		return
	}
	for n := 0; s.Next(n, '}'); n++ {
		k, kind := s.Key()
		switch {
		case s.Is(k, kind, "content"):
			ch.content, _ = s.Text()
		case s.Is(k, kind, "reasoning_content"):
			ch.reasoning, _ = s.Text()
		case s.Is(k, kind, "tool_calls"):
			ch.toolCalls = !s.Null()
		default:
			s.Value()
		}
	}
}

// completionBody is an answer as encoding/json decodes it: for the answer
// that repeats its choices (see streamChunk), and for saying what is wrong
// with one the scanner turned down.
type completionBody struct {
	Choices []struct {
		Index   json.RawMessage `json:"index"`
		Message struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		Text         *string `json:"text"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
	Usage        json.RawMessage `json:"usage"`
	WebToolSteps json.RawMessage `json:"web_tool_steps"`
}

func (s *answerScan) decode(body []byte) error {
	var cb completionBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return err
	}
	s.choices = s.choices[:0]
	for n, c := range cb.Choices {
		m := c.Message
		out := answerChoice{index: n, toolCalls: present(m.ToolCalls), finish: []byte(c.FinishReason)}
		if i := choiceIndex(c.Index); i >= 0 {
			out.index = i
		}
		if m.Content != nil {
			out.content = []byte(*m.Content)
		}
		if c.Text != nil {
			out.text = []byte(*c.Text)
		}
		if m.ReasoningContent != nil {
			out.reasoning = []byte(*m.ReasoningContent)
		}
		s.choices = append(s.choices, out)
	}
	s.usage, s.webToolSteps = present(cb.Usage), cb.WebToolSteps
	return nil
}

// choiceIndex reads a choice's index member as sent: -1 unless a whole
// number that fits an int. The relay reads it only to tell choices apart,
// so one it cannot read leaves the chunk to be relayed as before rather
// than refused.
func choiceIndex(raw []byte) int {
	if len(raw) == 0 || len(raw) > 6 {
		return -1
	}
	n := 0
	for _, b := range raw {
		if b < '0' || b > '9' {
			return -1
		}
		n = n*10 + int(b-'0')
	}
	return n
}
