package sim

import (
	"fmt"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsontext"
)

// GuardFormat is the family a simulated guard imitates: how it reads a
// check and how it words its verdict. The answers are the real models',
// word for word, so that the worker's prompt builders and verdict parsers
// are exercised end to end without a GPU.
type GuardFormat uint8

const (
	// NotGuard is an ordinary model that generates text.
	NotGuard GuardFormat = iota
	// LlamaGuard (Llama Guard 3) reads the raw prompt its chat template
	// builds, or plain messages as Ollama's template takes them, judges
	// the last message of the role the prompt names and answers "safe"
	// or "unsafe\nS1,S10".
	LlamaGuard
	// QwenGuard (Qwen3Guard-Gen) reads chat messages, judges the last
	// one, a user prompt or an assistant reply, and answers
	// "Safety: Unsafe\nCategories: Violent", adding "\nRefusal: Yes|No"
	// for a reply.
	QwenGuard
	// LlavaGuard (LlavaGuard 1.2) reads a user message of text and images
	// and answers a JSON object with a rating, one category and a
	// rationale.
	LlavaGuard
)

// guardContextWindow is the window of the simulated guards: small, as a
// check is one exchange and a policy.
const guardContextWindow = 8192

// guardSpec is a simulated guard. Its capabilities are those of the chat
// model it is to an engine; the worker adds moderation when it recognises
// the guard.
func guardSpec(id string, f GuardFormat, lacks ...string) ModelSpec {
	caps := []string{api.CapChat}
	if f == LlavaGuard {
		caps = append(caps, api.CapVision)
	}
	return ModelSpec{
		Model:      api.Model{ID: id, Capabilities: caps, ContextWindow: guardContextWindow},
		Guard:      f,
		GuardLacks: lacks,
	}
}

// verdict is a guard's judgement of a check.
type verdict string

const (
	verdictSafe   verdict = "safe"
	verdictUnsafe verdict = "unsafe"
	// verdictBorderline is Qwen3Guard's Controversial; the other families
	// have no middle ground and call it unsafe.
	verdictBorderline verdict = "borderline"
	// verdictMalformed is an answer in no guard format, as a model that
	// goes off script gives: the gateway must not read it as a verdict.
	verdictMalformed verdict = "malformed"
)

// malformedAnswer is every family's answer under verdict=malformed.
const malformedAnswer = "I cannot help with that."

// check is what a guard judges.
type check struct {
	// text is the judged message as written; its directive lines decide.
	text string
	// content is what the keyword table reads: the text without its
	// directive lines, and for LlavaGuard without its policy.
	content string
	// reply is set when the judged message is an assistant reply rather
	// than a user prompt.
	reply bool
	// prompt is the user message a reply answers: its reply_ directives
	// decide a reply that has no verdict directive of its own.
	prompt string
	// images counts the image parts beside the text (LlavaGuard).
	images int
	// listed are the category codes a Llama Guard prompt lists: a label
	// left out of the list is never given. Nil when the prompt lists none.
	listed []string
}

// guardReply plans a guard's answer to req. The directives it returns are
// those of the judged message, which pace the answer or fail it.
func guardReply(spec *ModelSpec, req *chatRequest) (directives, *plan, *api.Result) {
	c := readCheck(spec.Guard, req)
	dir, err := parseDirectives(c.text)
	if err != nil {
		return directives{}, nil, badRequest(err.Error())
	}
	v, labels := dir.guardVerdict()
	if v == "" && c.reply {
		pd, err := parseDirectives(c.prompt)
		if err != nil {
			return directives{}, nil, badRequest(err.Error())
		}
		v, labels = pd.guardReplyVerdict()
	}
	v, labels = decide(spec, &c, v, labels)
	p, fail := guardPlan(spec, req, spec.Guard.answer(v, labels, &c))
	return dir, p, fail
}

// decide completes a verdict. Without a directive the keyword table
// decides alone. An unsafe or borderline directive takes its own labels in
// the family's spelling, else those the keyword table finds, else the
// family's stock label, since a real guard always names a category.
func decide(spec *ModelSpec, c *check, v verdict, labels []string) (verdict, []string) {
	switch v {
	case "":
		return keywordVerdict(spec, c)
	case verdictSafe, verdictMalformed:
		return v, nil
	}
	if len(labels) > 0 {
		return v, spec.Guard.spell(labels)
	}
	if _, found := keywordVerdict(spec, c); len(found) > 0 {
		return v, found
	}
	return v, []string{spec.Guard.stockLabel(v)}
}

// answer words a verdict as the family does.
func (f GuardFormat) answer(v verdict, labels []string, c *check) string {
	if v == verdictMalformed {
		return malformedAnswer
	}
	switch f {
	case LlamaGuard:
		if v == verdictSafe {
			return "safe"
		}
		return "unsafe\n" + strings.Join(labels, ",")
	case QwenGuard:
		return qwenAnswer(v, labels, c)
	case LlavaGuard:
		return llavaAnswer(v, labels, c)
	}
	return malformedAnswer
}

// qwenAnswer is Qwen3Guard-Gen's answer. A reply check adds whether the
// reply refused, which the model judges alongside safety.
func qwenAnswer(v verdict, labels []string, c *check) string {
	safety := "Safe"
	switch v {
	case verdictUnsafe:
		safety = "Unsafe"
	case verdictBorderline:
		safety = "Controversial"
	}
	categories := "None"
	if len(labels) > 0 {
		categories = strings.Join(labels, ", ")
	}
	out := "Safety: " + safety + "\nCategories: " + categories
	if c.reply {
		refusal := "No"
		if refuses(c.content) {
			refusal = "Yes"
		}
		out += "\nRefusal: " + refusal
	}
	return out
}

// llavaAnswer is LlavaGuard's JSON answer, laid out as the model writes
// it. LlavaGuard gives one category, so only the first label counts.
func llavaAnswer(v verdict, labels []string, c *check) string {
	rating, category := "Safe", llavaNone
	rationale := "Simulated assessment: no policy category applies to the text."
	switch {
	case c.images == 1:
		rationale += " The simulator does not look at images and rates the image safe."
	case c.images > 1:
		rationale += fmt.Sprintf(" The simulator does not look at images and rates the %d images safe.", c.images)
	}
	if v != verdictSafe {
		rating, category = "Unsafe", labels[0]
		rationale = "Simulated assessment: the content falls under " + category + "."
	}
	b := []byte("{\n    \"rating\": ")
	b = jsontext.AppendStringNoHTML(b, rating)
	b = append(b, ",\n    \"category\": "...)
	b = jsontext.AppendStringNoHTML(b, category)
	b = append(b, ",\n    \"rationale\": "...)
	b = jsontext.AppendStringNoHTML(b, rationale)
	return string(append(b, "\n}"...))
}

// refuses reports whether a reply opens with a refusal.
func refuses(reply string) bool {
	r := strings.ToLower(strings.TrimSpace(reply))
	for _, opening := range []string{"i can't", "i can’t", "i cannot", "i won't", "i'm sorry", "i am sorry", "sorry"} {
		if strings.HasPrefix(r, opening) {
			return true
		}
	}
	return false
}

// guardPlan is the reply of a guard: its answer, cut by stop sequences,
// max_tokens and the context window as any reply is.
func guardPlan(spec *ModelSpec, req *chatRequest, answer string) (*plan, *api.Result) {
	p := &plan{promptTokens: req.promptTokens(), finish: finishStop}
	if fail := contextExceeded(spec.ContextWindow, p.promptTokens); fail != nil {
		return nil, fail
	}
	pieces := answerPieces(answer)
	if cut, seq, ok := applyStop(pieces, req); ok {
		pieces, p.stopped = cut, seq
	}
	limit, ok := req.maxTokens()
	if !ok {
		limit = chat.DefaultMaxTokens
	}
	if w := spec.ContextWindow; w > 0 {
		limit = min(limit, w-p.promptTokens)
	}
	if len(pieces) > limit {
		pieces, p.finish, p.stopped = pieces[:limit], finishLength, ""
	}
	p.pieces = pieces
	return p, nil
}

// answerPieces cuts an answer into tokens before each space or line
// break, so that a guard's answer streams and truncates as text does.
func answerPieces(s string) []piece {
	var out []piece
	start := 0
	for i := 1; i < len(s); i++ {
		if (s[i] == ' ' || s[i] == '\n') && s[i-1] != ' ' && s[i-1] != '\n' {
			out = append(out, piece{pieceContent, s[start:i]})
			start = i
		}
	}
	if start < len(s) {
		out = append(out, piece{pieceContent, s[start:]})
	}
	return out
}
