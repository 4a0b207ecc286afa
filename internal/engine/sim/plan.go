package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
)

// defaultReasoningTokens is the medium-effort thinking length of a
// reasoning model whose spec does not say.
const defaultReasoningTokens = 24

// Finish reasons.
const (
	finishStop      = "stop"
	finishLength    = "length"
	finishToolCalls = "tool_calls"
)

// pieceKind says what a generated token is part of.
type pieceKind uint8

const (
	pieceReasoning pieceKind = iota
	pieceContent
	pieceToolCall // opens the tool call: id, type and name
	pieceToolArgs // a fragment of the call's arguments
)

// piece is one generated token, streamed as one chunk.
type piece struct {
	kind pieceKind
	text string
}

// plan is a whole reply, decided before anything is sent. Deciding up
// front keeps streaming and non-streaming replies identical and makes the
// caps and notices easy to reason about; only the pacing happens live.
type plan struct {
	pieces          []piece
	promptTokens    int
	reasoningTokens int
	finish          string
	// stopped is the stop sequence the answer ended at, which vLLM
	// reports as the choice's stop_reason; "" when none did.
	stopped  string
	notice   *api.Notice
	toolID   string
	toolName string
}

// completionTokens counts every generated token, thinking included.
func (p *plan) completionTokens() int { return len(p.pieces) }

// usage is the reply's token usage.
func (p *plan) usage() *api.Usage {
	u := &api.Usage{
		PromptTokens:     p.promptTokens,
		CompletionTokens: p.completionTokens(),
		TotalTokens:      p.promptTokens + p.completionTokens(),
	}
	if p.reasoningTokens > 0 {
		n := p.reasoningTokens
		u.ReasoningTokens = &n
	}
	return u
}

// usageOf is the usage of a reply of the choices ps: the prompt once, the
// tokens of every choice together.
func usageOf(ps []*plan) *api.Usage {
	u := ps[0].usage()
	for _, p := range ps[1:] {
		v := p.usage()
		u.CompletionTokens += v.CompletionTokens
		u.TotalTokens += v.CompletionTokens
		if v.ReasoningTokens != nil {
			u.ReasoningTokens = new(*v.ReasoningTokens + deref(u.ReasoningTokens))
		}
	}
	return u
}

func deref(n *int) int {
	if n == nil {
		return 0
	}
	return *n
}

// text concatenates the pieces of one kind.
func (p *plan) text(kinds ...pieceKind) string {
	var b strings.Builder
	for _, pc := range p.pieces {
		for _, k := range kinds {
			if pc.kind == k {
				b.WriteString(pc.text)
			}
		}
	}
	return b.String()
}

// hasToolCall reports whether the tool call made it into the reply.
func (p *plan) hasToolCall() bool {
	for _, pc := range p.pieces {
		if pc.kind == pieceToolCall {
			return true
		}
	}
	return false
}

// buildPlan decides the reply to req on spec. A non-nil result is a
// failure to answer instead (a prompt too long for the context window).
func buildPlan(spec *ModelSpec, req *chatRequest, dir *directives, s seed) (*plan, *api.Result) {
	p := &plan{promptTokens: req.promptTokens(), finish: finishStop}
	window := spec.ContextWindow
	ctxLimit := math.MaxInt
	if window > 0 {
		if fail := contextExceeded(window, p.promptTokens); fail != nil {
			return nil, fail
		}
		ctxLimit = window - p.promptTokens
	}
	capLimit, explicitCap := req.maxTokens()
	if !explicitCap {
		capLimit = chat.DefaultMaxTokens
	}
	limit := min(capLimit, ctxLimit)
	// Nothing past limit+1 tokens can be sent, so nothing past it is
	// generated: a tokens=10000000 directive stays cheap.
	room := limit + 1

	// Thinking.
	var reasoningN, budget int
	budgetReached, stopAtBudget := false, false
	if spec.Has(api.CapReasoning) {
		on, effort := req.thinking(spec.DefaultThinking != nil && *spec.DefaultThinking)
		if dir.reasoning != nil && !req.explicitOff() {
			on = true
		}
		if on {
			reasoningN = reasoningLength(spec.ReasoningTokens, effort)
			if dir.reasoning != nil {
				reasoningN = *dir.reasoning
			}
			b, ok := req.thinkingBudget()
			if !ok && spec.Has(api.CapThinkingBudget) {
				b, ok = chat.DefaultThinkingBudget, true
			}
			if ok && reasoningN > b {
				reasoningN, budget = b, b
				if spec.Has(api.CapThinkingBudget) {
					budgetReached = true // thinking is ended; the answer follows
				} else {
					stopAtBudget = true // this model cannot be moved on: no answer
				}
			}
		}
	}
	var thinking []piece
	for _, w := range words(s.rng("reasoning"), min(reasoningN, room), reasoningN) {
		thinking = append(thinking, piece{pieceReasoning, w})
	}
	room -= len(thinking)

	// The answer.
	jsonWanted := req.jsonMode() != "" || dir.json != ""
	contentN := 16 + s.rng("length").IntN(49)
	if dir.tokens != nil {
		contentN = *dir.tokens
	}
	var answer []piece
	isTool := false
	if !stopAtBudget {
		if name, params, ok := req.toolToCall(dir.tool); ok {
			isTool = true
			p.finish = finishToolCalls
			p.toolName, p.toolID = name, "call_"+s.hex("call", 24)
			f := &jsonFiller{r: s.rng("tool"), words: 3, total: 3}
			args := f.object(parseSchema(params))
			if web, webArgs := req.webCall(); web == name {
				args = webArgs
			}
			answer = append(answer, piece{pieceToolCall, ""})
			for _, a := range splitBytes(args, 16) {
				answer = append(answer, piece{pieceToolArgs, a})
			}
		} else {
			answer = contentPieces(req, dir, s, contentN, max(room, 0), jsonWanted)
			if cut, seq, ok := applyStop(answer, req); ok {
				answer, p.stopped = cut, seq
			}
		}
	}

	// At most one notice: the one that best explains the reply, truncation
	// first.
	all := append(thinking, answer...)
	switch {
	case len(all) > limit:
		duringReasoning := limit <= len(thinking)
		all = all[:limit]
		p.finish, p.stopped = finishLength, ""
		switch {
		case ctxLimit < capLimit:
			p.notice = notice(chat.NoticeContextWindowExhausted,
				"the prompt (%d tokens) and the reply (%d tokens) filled the model's %d-token context window; a larger max_tokens does not help",
				p.promptTokens, limit, window)
		case !explicitCap:
			p.notice = notice(chat.NoticeTruncatedAtDefaultMaxTokens,
				"the reply reached the %d-token default output limit; set max_tokens to allow a longer reply", chat.DefaultMaxTokens)
		case duringReasoning:
			p.notice = notice(chat.NoticeTruncatedDuringReasoning,
				"thinking used the whole %d-token max_tokens budget, so there is no answer; raise max_tokens or lower the reasoning effort", capLimit)
		case jsonWanted && !isTool:
			p.notice = notice(chat.NoticeTruncatedDuringStructuredOutput,
				"generation stopped at the %d-token limit before the JSON was complete", capLimit)
		}
	case stopAtBudget:
		p.finish = finishLength
		p.notice = notice(chat.NoticeTruncatedAtReasoningBudget,
			"thinking used its %d-token budget on a model that cannot stop thinking part-way, so the reply stopped with no answer", budget)
	case jsonWanted && !isTool && !json.Valid([]byte(joinPieces(answer))):
		p.notice = notice(chat.NoticeStructuredOutputNotJSON,
			"JSON output was requested but the model finished with a reply that is not valid JSON")
	case budgetReached:
		p.notice = notice(chat.NoticeReasoningBudgetReached,
			"thinking reached its %d-token budget and was ended; the model then answered and the reply is complete", budget)
	case req.strictSchema():
		p.notice = notice(chat.NoticeStrictSchemaNotEnforced,
			"json_schema.strict was set but the simulator cannot enforce schemas, so the reply may not match the schema")
	}
	p.pieces = all
	p.reasoningTokens = p.countKind(pieceReasoning)
	if !p.hasToolCall() {
		p.toolName, p.toolID = "", ""
	}
	return p, nil
}

// contextExceeded is the failure of a prompt too long for a model's
// window, worded as vLLM words it; nil when the prompt fits.
func contextExceeded(window, promptTokens int) *api.Result {
	if window <= 0 || promptTokens <= window {
		return nil
	}
	r := engine.Failure(http.StatusBadRequest, chat.TypeContextLengthExceeded, fmt.Sprintf(
		"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
		window, promptTokens))
	r.Error.Code = chat.TypeContextLengthExceeded
	return r
}

// reasoningLength is the thinking length at an effort.
func reasoningLength(base int, effort string) int {
	if base <= 0 {
		base = defaultReasoningTokens
	}
	switch effort {
	case "low":
		return max(1, base/2)
	case "high":
		return base * 2
	}
	return base
}

// contentPieces generates the text answer: plain words, JSON or, for
// json=broken, text that is not JSON. At most room tokens are generated.
func contentPieces(req *chatRequest, dir *directives, s seed, n, room int, jsonWanted bool) []piece {
	r := s.rng("content")
	var toks []string
	switch {
	case dir.json == "broken":
		// Prose where JSON was asked for, as a model that ignores the
		// format would write.
		toks = append([]string{"Here", " is", " the", " answer:"}, prefixSpace(words(r, min(n, room), n))...)
	case jsonWanted:
		// The JSON punctuation takes about three tokens; the words fill
		// the rest of the requested length.
		total := max(1, n-3)
		f := &jsonFiller{r: r, words: max(1, min(total, room)), total: total}
		toks = splitTokens(f.object(parseSchema(req.schema())))
	default:
		toks = words(r, min(n, room), n)
	}
	out := make([]piece, len(toks))
	for i, t := range toks {
		out[i] = piece{pieceContent, t}
	}
	return out
}

// prefixSpace puts a space before the first word, which words leaves bare.
func prefixSpace(ws []string) []string {
	if len(ws) > 0 && !strings.HasPrefix(ws[0], " ") {
		ws[0] = " " + ws[0]
	}
	return ws
}

// applyStop ends the answer before the first stop sequence, as an engine
// does: the sequence itself is not sent, and is returned.
func applyStop(answer []piece, req *chatRequest) ([]piece, string, bool) {
	if len(req.stops) == 0 {
		return nil, "", false
	}
	text := joinPieces(answer)
	cut, seq := -1, ""
	for _, st := range req.stops {
		if i := strings.Index(text, st); i >= 0 && (cut < 0 || i < cut) {
			cut, seq = i, st
		}
	}
	if cut < 0 {
		return nil, "", false
	}
	out := make([]piece, 0, len(answer))
	pos := 0
	for _, pc := range answer {
		if pos >= cut {
			break
		}
		if end := pos + len(pc.text); end > cut {
			pc.text = pc.text[:cut-pos]
		}
		pos += len(pc.text)
		out = append(out, pc)
	}
	return out, seq, true
}

func joinPieces(ps []piece) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.text)
	}
	return b.String()
}

func (p *plan) countKind(k pieceKind) int {
	n := 0
	for _, pc := range p.pieces {
		if pc.kind == k {
			n++
		}
	}
	return n
}

func notice(code, format string, args ...any) *api.Notice {
	return &api.Notice{Code: code, Message: fmt.Sprintf(format, args...)}
}
