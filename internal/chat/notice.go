package chat

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// Notice codes (svc.notice.code); stable, clients branch on them.
const (
	NoticeTruncatedDuringReasoning        = "truncated_during_reasoning"
	NoticeReasoningBudgetReached          = "reasoning_budget_reached"
	NoticeTruncatedAtReasoningBudget      = "truncated_at_reasoning_budget"
	NoticeTruncatedAtDefaultMaxTokens     = "truncated_at_default_max_tokens"
	NoticeTruncatedDuringStructuredOutput = "truncated_during_structured_output"
	NoticeContextWindowExhausted          = "context_window_exhausted"
	NoticeStructuredOutputNotJSON         = "structured_output_not_json"
	// NoticeStrictSchemaNotEnforced is only ever reported by engines: the
	// gateway cannot tell which parts of a schema were held to.
	NoticeStrictSchemaNotEnforced = "strict_schema_not_enforced"
)

// Outcome is what the gateway saw of a finished reply.
type Outcome struct {
	FinishReason string
	// Content is the reply's text content, possibly only its first 1 MiB
	// (ContentTruncated says so). The gateway keeps it only when the
	// request asked for JSON, the one case it is judged.
	Content          string
	ContentTruncated bool
	// HadContent is whether the reply had answer text other than white
	// space, kept or not.
	HadContent   bool
	HasToolCalls bool
	// ReasoningTokens is from usage when reported, else an estimate; 0
	// when none.
	ReasoningTokens int
	// HadReasoning is true when any reasoning text was produced.
	HadReasoning     bool
	PromptTokens     int
	CompletionTokens int
}

// answered reports an answer beside any thinking.
func (o *Outcome) answered() bool {
	return o.HadContent || strings.TrimSpace(o.Content) != ""
}

// Notice returns the single advisory for the reply, or nil. engine is the
// notice the engine itself reported; it knows more than the gateway, so it
// wins. m is the serving model, nil when unknown.
func (r *Request) Notice(o Outcome, engine *api.Notice, m *api.Model) *api.Notice {
	if engine != nil {
		return engine
	}
	switch o.FinishReason {
	case "length":
		return r.lengthNotice(o, m)
	case "stop", "tool_calls":
		return r.stopNotice(o, m)
	}
	return nil
}

// lengthNotice explains a reply cut by a token limit, most specific first;
// nil when the client's own max_tokens did it, which needs no advice.
func (r *Request) lengthNotice(o Outcome, m *api.Model) *api.Notice {
	window := 0
	if m != nil {
		window = m.ContextWindow
	}
	switch {
	case o.HadReasoning && !o.answered() && !o.HasToolCalls:
		if r.BudgetApplied > 0 && !has(m, api.CapThinkingBudget) && o.ReasoningTokens >= r.BudgetApplied {
			return notice(NoticeTruncatedAtReasoningBudget, "Thinking used its whole budget of %s tokens on a model whose thinking cannot be ended early, so the reply stopped before an answer; raise reasoning.max_tokens or turn thinking off.",
				thousands(r.BudgetApplied))
		}
		return notice(NoticeTruncatedDuringReasoning, "The model spent the whole output limit%s thinking and gave no answer; raise max_tokens, lower the reasoning effort or turn thinking off.",
			limitPhrase(r.EngineMaxTokens))
	// Content emptied by a tool call is not structured output cut short.
	case r.JSONMode != "" && !(o.HasToolCalls && o.Content == "") && (o.ContentTruncated || !isJSON(o.Content)):
		return notice(NoticeTruncatedDuringStructuredOutput, "Generation stopped at the output limit%s before the JSON requested by response_format was complete; raise max_tokens.",
			limitPhrase(r.EngineMaxTokens))
	case r.DefaultCap && o.CompletionTokens >= DefaultMaxTokens:
		return notice(NoticeTruncatedAtDefaultMaxTokens, "The reply reached the default limit of %s tokens (thinking included) that applies when no max_tokens is set; set max_tokens or max_completion_tokens for a longer reply.",
			thousands(DefaultMaxTokens))
	case window > 0 && (r.DefaultCap || o.PromptTokens+o.CompletionTokens >= window):
		return notice(NoticeContextWindowExhausted, "The prompt (%s tokens) and the reply (%s tokens) filled the model's context window of %s tokens; a larger max_tokens does not help, shorten the conversation instead.",
			thousands(o.PromptTokens), thousands(o.CompletionTokens), thousands(window))
	}
	return nil
}

// stopNotice flags a reply that finished normally but not as asked.
func (r *Request) stopNotice(o Outcome, m *api.Model) *api.Notice {
	if r.BudgetApplied > 0 && has(m, api.CapThinkingBudget) && o.ReasoningTokens >= r.BudgetApplied && o.answered() {
		return notice(NoticeReasoningBudgetReached, "Thinking reached its budget of %s tokens and was ended; the model then answered. Raise reasoning.max_tokens to let it think longer.",
			thousands(r.BudgetApplied))
	}
	// A truncated copy of the content cannot be judged, so it is not.
	if r.JSONMode != "" && !o.ContentTruncated && !o.HasToolCalls && !isJSON(o.Content) {
		switch {
		case r.Images > 0:
			return notice(NoticeStructuredOutputNotJSON, "The reply is not JSON: response_format is not applied to requests with images.")
		case o.HadReasoning && o.Content == "":
			return notice(NoticeStructuredOutputNotJSON, "The reply is not JSON: the model finished without an answer after thinking.")
		}
		return notice(NoticeStructuredOutputNotJSON, "The reply is not JSON: the model did not produce JSON although response_format asked for it.")
	}
	return nil
}

func notice(code, format string, args ...any) *api.Notice {
	return &api.Notice{Code: code, Message: fmt.Sprintf(format, args...)}
}

func has(m *api.Model, c string) bool { return m != nil && m.Has(c) }

// isJSON reports whether s is one complete JSON value.
func isJSON(s string) bool {
	return strings.TrimSpace(s) != "" && json.Valid([]byte(s))
}

// limitPhrase names the engine cap inside a sentence when it is known.
func limitPhrase(n int) string {
	if n <= 0 {
		return ""
	}
	return " (" + thousands(n) + " tokens)"
}

// thousands formats n with comma separators, as the spec writes limits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}
