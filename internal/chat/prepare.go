package chat

import (
	"math"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/usage"
)

// Prepare fits the request to the serving model and builds Body, the
// canonical body for the worker. m may be nil when the model's metadata is
// unknown: the model-dependent steps (thinking budget, context window) are
// then skipped and the body is still canonicalised. Prepare may be called
// again, for another model; each call starts from the parsed request.
func (r *Request) Prepare(m *api.Model) error {
	window := 0
	if m != nil {
		window = m.ContextWindow
	}
	// chars/5 underestimates tokens for nearly any text, so only a prompt
	// that cannot fit is refused here; borderline ones are the engine's call.
	if low := r.PromptChars / 5; window > 0 && low > window {
		return &api.Error{
			Kind:  api.KindInvalidRequest,
			Type:  TypeContextLengthExceeded,
			Code:  TypeContextLengthExceeded,
			Param: "messages",
			Message: "The prompt is at least about " + thousands(low) + " tokens, more than the model's context window of " +
				thousands(window) + " tokens; shorten the conversation or use a model with a larger window",
		}
	}

	budget := r.budget(m)
	switch {
	case r.UserMaxTokens > 0 && r.CapIncludesThinking:
		// The cap is the whole reply's: thinking within it, and the
		// answer in what thinking leaves.
		budget = min(budget, r.UserMaxTokens)
		r.DefaultCap = false
		r.EngineMaxTokens = r.UserMaxTokens
	case r.UserMaxTokens > 0:
		// The client's cap is for the answer alone; thinking gets its
		// budget on top.
		r.DefaultCap = false
		r.EngineMaxTokens = satAdd(r.UserMaxTokens, budget)
	default:
		r.DefaultCap = true
		r.EngineMaxTokens = DefaultMaxTokens
		// Some engines refuse a request whose prompt plus max_tokens
		// exceeds the window, so the default must leave room for the
		// prompt; 1 when the estimate says there is none left.
		if room := window - usage.EstimateTokens(r.PromptChars); window > 0 && room < r.EngineMaxTokens {
			r.EngineMaxTokens = max(room, 1)
		}
	}
	r.BudgetApplied = budget

	over := make([]member, 0, 5)
	if r.messages != nil {
		over = append(over, member{key: "messages", value: r.messages})
	}
	maxTokens := marshalInt(r.EngineMaxTokens)
	over = append(over, member{key: "max_tokens", value: maxTokens}, member{key: "max_completion_tokens", value: maxTokens})
	if budget > 0 {
		over = append(over, member{key: "reasoning", value: merge(r.top, "reasoning", "max_tokens", marshalInt(budget))})
	}
	if r.Stream {
		// Usage is always reported on streams (billing and svc.timing need it).
		over = append(over, member{key: "stream_options", value: merge(r.top, "stream_options", "include_usage", []byte("true"))})
	}
	r.Body = r.top.encodeWith(over)
	return nil
}

// AnswerCap is the cap the answer alone is held to, once Prepare ran: the
// client's max_tokens when the model thinks within a budget on top of it.
// The engine is sent one cap for the two together, so thinking that ends
// early leaves the answer room past the client's cap, and the worker ends
// it there. 0 when the engine's own cap is the answer's.
func (r *Request) AnswerCap() int {
	if r.UserMaxTokens > 0 && !r.CapIncludesThinking && r.BudgetApplied > 0 {
		return r.UserMaxTokens
	}
	return 0
}

// budget is the thinking budget in effect on m: an explicit
// reasoning.max_tokens on any model that thinks (the worker holds models
// that cannot be moved on to it by stopping them), else the default budget
// on models whose thinking can be ended early. Off switches were already
// folded into Thinking and are forwarded as sent.
func (r *Request) budget(m *api.Model) int {
	if m == nil || !m.Has(api.CapReasoning) {
		return 0 // models that do not reason never think
	}
	thinking := m.DefaultThinking != nil && *m.DefaultThinking
	if r.Thinking != nil {
		thinking = *r.Thinking
	}
	switch {
	case !thinking:
		return 0
	case r.ThinkingBudget > 0:
		return r.ThinkingBudget
	case m.Has(api.CapThinkingBudget):
		return DefaultThinkingBudget
	}
	return 0
}

// merge returns top[key] with inner set to value, keeping the object's
// other keys; a missing, null or (impossible after Parse) non-object value
// becomes a new object.
func merge(top *object, key, inner string, value []byte) []byte {
	o := &object{}
	if raw, ok := top.field(key); ok {
		if parsed, err := parseObject(raw); err == nil {
			o = parsed
		}
	}
	o.set(inner, value)
	return o.encode()
}

func satAdd(a, b int) int {
	if b > 0 && a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}
