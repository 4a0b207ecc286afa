package worker

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/moderation"
)

// A guard judges what fits its context window, its own policy included.
// Text longer than that is judged in pieces, sized by a low estimate of
// the characters a token takes so that most pieces fit; one that does not
// is judged again in halves.
const (
	guardCharsPerToken = 3
	// guardPolicyTokens is what a guard's own prompt takes of its window:
	// the categories, instructions and template.
	guardPolicyTokens = 1024
	// guardWindowUnknown is the window taken for a guard whose engine
	// does not list one: the smallest of the guards svc knows.
	guardWindowUnknown = 8192
	// guardMinPiece is the shortest piece halved again when the guard
	// finds it too long: below it, the guard's own failure stands.
	guardMinPiece = 256
)

// span is how many characters of text one call to the guard judges.
func (g *guard) span() int {
	w := g.window
	if w <= 0 {
		w = guardWindowUnknown
	}
	return max(w-guardPolicyTokens, w/2) * guardCharsPerToken
}

// judgeConversation judges texts, the messages of a request, as the
// user's turn: in one call when they fit the guard's window, else in
// pieces that do. The first piece flagged decides.
func (g *guard) judgeConversation(ctx context.Context, texts []string) (moderation.Verdict, *api.Result) {
	for _, piece := range pack(texts, g.span()) {
		if v, res := g.judgeFitting(ctx, moderation.Check{Role: moderation.RoleUser, Texts: piece}); res != nil || v.Unsafe {
			return v, res
		}
	}
	return moderation.Verdict{}, nil
}

// judgeReply judges texts, what of a reply's choices is to be checked
// (none: no call), as the assistant's turn after prompt, the user's message it answers:
// in as many calls as the guard's window needs, with the end of the
// prompt as context. The first piece flagged decides.
func (g *guard) judgeReply(ctx context.Context, prompt string, texts []string) (moderation.Verdict, *api.Result) {
	if charsOf(texts) == 0 {
		return moderation.Verdict{}, nil // nothing to flag
	}
	span := g.span()
	prompt = tail(prompt, span/4)
	for _, piece := range pack(texts, span-len(prompt)) {
		c := moderation.Check{Role: moderation.RoleAssistant, Prompt: prompt, Texts: piece}
		if v, res := g.judgeFitting(ctx, c); res != nil || v.Unsafe {
			return v, res
		}
	}
	return moderation.Verdict{}, nil
}

// replyContext is how much of a choice's text, already passed, a check
// of its new text reads before it: a harm that spans a window's edge is
// read whole.
func (g *guard) replyContext() int { return g.span() / 4 }

// judgeFitting judges c, in halves of its texts, each with the end of
// its prompt, when the guard finds it longer than its window.
func (g *guard) judgeFitting(ctx context.Context, c moderation.Check) (moderation.Verdict, *api.Result) {
	_, v, res := g.judge(ctx, c)
	if res == nil || res.Error == nil || res.Error.Type != api.TypeContextLengthExceeded || charsOf(c.Texts) <= guardMinPiece {
		return v, res
	}
	for _, half := range halve(c.Texts) {
		part := c
		part.Texts = half
		part.Prompt = tail(c.Prompt, len(c.Prompt)/2)
		if v, res := g.judgeFitting(ctx, part); res != nil || v.Unsafe {
			return v, res
		}
	}
	return moderation.Verdict{}, nil
}

// pack groups texts, in order, into pieces of at most size characters
// together. A text longer than size is cut into parts that overlap, so
// that what straddles a cut is read whole in one of them. There is always
// at least one piece, empty when texts are.
func pack(texts []string, size int) [][]string {
	var pieces [][]string
	var cur []string
	n := 0
	for _, t := range texts {
		for _, part := range cut(t, size) {
			if n+len(part) > size && len(cur) > 0 {
				pieces = append(pieces, cur)
				cur, n = nil, 0
			}
			cur = append(cur, part)
			n += len(part)
		}
	}
	if len(cur) > 0 || len(pieces) == 0 {
		pieces = append(pieces, cur)
	}
	return pieces
}

// halve splits texts into two pieces of about half their length: between
// texts where there are several, else within the one text, overlapping.
func halve(texts []string) [][]string {
	if len(texts) < 2 {
		if len(texts) == 0 {
			return [][]string{texts}
		}
		parts := cut(texts[0], len(texts[0])/2+overlapOf(len(texts[0])/2))
		halves := make([][]string, len(parts))
		for i, p := range parts {
			halves[i] = []string{p}
		}
		return halves
	}
	half, n := charsOf(texts)/2, 0
	for i := 0; i < len(texts)-1; i++ {
		if n += len(texts[i]); n >= half {
			return [][]string{texts[:i+1], texts[i+1:]}
		}
	}
	return [][]string{texts[:len(texts)-1], texts[len(texts)-1:]}
}

// cut divides s into parts of at most size bytes, at a space near the
// end where there is one and at rune boundaries always, each after the
// first starting an overlap before the previous one's end.
func cut(s string, size int) []string {
	if len(s) <= size || size < 8 {
		return []string{s}
	}
	var parts []string
	for start := 0; ; {
		end := runeStart(s, min(start+size, len(s)))
		if end < len(s) {
			// At a space where one is near, so that words are read whole.
			if i := strings.LastIndexAny(s[end-overlapOf(size):end], " \n"); i >= 0 {
				end += i + 1 - overlapOf(size)
			}
		}
		parts = append(parts, s[start:end])
		if end == len(s) {
			return parts
		}
		next := runeStart(s, end-overlapOf(size))
		if next <= start {
			next = end
		}
		start = next
	}
}

// overlapOf is how much of a part of size the next one repeats.
func overlapOf(size int) int { return size / 8 }

// runeStart moves i back to the start of the rune it falls in.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// charsOf is the length of texts together.
func charsOf(texts []string) int {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	return n
}

// tail is the last size bytes of s, at a rune boundary.
func tail(s string, size int) string {
	if len(s) <= size {
		return s
	}
	return s[runeStart(s, len(s)-size):]
}
