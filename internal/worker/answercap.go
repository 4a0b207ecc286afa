package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/usage"
)

// A chat whose client capped the answer apart from the model's thinking
// (max_tokens with a thinking budget: the spec keeps max_tokens for the
// answer alone) reaches the engine with one cap, the two together: an
// engine cannot hold them apart. Thinking that ends before its budget
// leaves the answer room past the client's cap, so the worker holds the
// answer to it: a streamed answer is cut off at the cap, the engine
// stopped, and each choice cut off ends with finish_reason length; a
// whole answer over the cap keeps the share of its text the cap allows.
//
// Tokens are counted as streams carry them, one a chunk (what engines
// send), or a chunk's length at four characters a token when it is long
// enough to hold several. A stream stopped at the cap has no usage from
// its engine, so the worker reports its own count, marked an estimate:
// the thinking and the answer it passed on, and the prompt at four
// characters a token. The gateway could only estimate a clear stream's
// from its text, and a sealed one's not at all.

// holdAnswer readies a chat whose answer the client capped at answerCap
// apart from its thinking: what the engine sends goes through the cap to
// sink, and finish settles the result once the engine is done. whole asks
// the engine for a stream the cap can stop, put together into the whole
// answer the client asked for (wholeSink), rather than for an answer the
// cap can only cut once it was made.
func holdAnswer(ereq *engine.Request, sink engine.Sink, answerCap int, whole bool) (engine.Sink, func(context.Context, *api.Result) *api.Result) {
	var w *wholeSink
	if whole {
		w = newWholeSink(sink)
		sink = w
		ereq.Stream = true
	}
	capped := newCapSink(sink, answerCap, ereq.Body)
	return capped, func(ctx context.Context, res *api.Result) *api.Result {
		res = capped.finish(ctx, res)
		if w != nil {
			res = w.finish(ctx, res)
		}
		return res
	}
}

// errAnswerCapped stops the engine once every choice reached the cap.
var errAnswerCapped = errors.New("the answer reached the client's max_tokens")

// longChunk is the length from which a chunk's content is counted as
// several tokens.
const longChunk = 16

// capSink holds a chat's answer to the client's cap.
type capSink struct {
	out engine.Sink
	cap int
	n   int // choices asked for

	head chunkHead
	// tokens counts each choice's answer so far; capped marks those cut
	// off, and ended those the engine finished.
	tokens  []int
	capped  []bool
	ended   []bool
	stopped bool // the engine was stopped at the cap
	// thinking counts the thinking passed on, of every choice.
	thinking int
	// removed is the tokens cut from a whole answer.
	removed int
	// body is the request the engine was sent, whose prompt a counted
	// usage estimates.
	body []byte
	// now reads the clock; start is when the engine was asked, first and
	// last when output passed on first and last, for the timing of a
	// stream stopped at the cap, whose engine reported none.
	now                func() time.Time
	start, first, last time.Time
}

func newCapSink(out engine.Sink, answerCap int, body []byte) *capSink {
	var req struct {
		N int `json:"n"`
	}
	_ = json.Unmarshal(body, &req)
	n := min(max(req.N, 1), chat.MaxChoices)
	return &capSink{out: out, cap: answerCap, n: n, tokens: make([]int, n), capped: make([]bool, n), ended: make([]bool, n), body: body,
		now: time.Now, start: time.Now()}
}

// capChunk is what the sink reads of a streamed chunk.
type capChunk struct {
	chunkHead
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   string          `json:"content"`
			ToolCalls json.RawMessage `json:"tool_calls"`
			// Engines name thinking either way; one that sends both
			// sends the same text.
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

func (c *capSink) Event(ctx context.Context, data []byte) error {
	var chunk capChunk
	if json.Unmarshal(data, &chunk) != nil {
		return c.out.Event(ctx, data)
	}
	if c.head.ID == "" {
		c.head = chunk.chunkHead
	}
	// drop are the choices cut off before this chunk, whose deltas go no
	// further; cut are those whose content this chunk takes past the cap,
	// with what of it is left.
	var drop map[int]bool
	var cut map[int]string
	for _, ch := range chunk.Choices {
		i := ch.Index
		if i < 0 || i >= c.n {
			continue
		}
		if c.capped[i] {
			if drop == nil {
				drop = map[int]bool{}
			}
			drop[i] = true
			continue
		}
		if thought := cmp.Or(ch.Delta.ReasoningContent, ch.Delta.Reasoning); thought != "" {
			c.thinking += chunkTokens(thought)
		}
		cutHere := false
		if d := ch.Delta; d.Content != "" || len(d.ToolCalls) > 0 && string(d.ToolCalls) != "null" {
			n := chunkTokens(d.Content)
			if left := c.cap - c.tokens[i]; n > left && d.Content != "" {
				if cut == nil {
					cut = map[int]string{}
				}
				cut[i] = truncateRunes(d.Content, max(left, 1)*4)
				n, cutHere = left, true
			}
			c.tokens[i] += n
		}
		switch {
		case cutHere:
			// Also in a chunk that finishes the choice (an engine that
			// answered a stream with one whole completion): it ends at
			// the cap, with length, as any other cut off.
			c.capped[i] = true
		case ch.FinishReason != nil:
			c.ended[i] = true
		case c.tokens[i] >= c.cap:
			c.capped[i] = true
		}
	}
	if drop != nil || cut != nil {
		var ok bool
		if data, ok = rewriteChunk(data, drop, cut); !ok {
			return c.stopIfDone()
		}
	}
	if err := c.out.Event(ctx, data); err != nil {
		return err
	}
	if at := c.now(); c.first.IsZero() {
		c.first, c.last = at, at
	} else {
		c.last = at
	}
	return c.stopIfDone()
}

// chunkTokens is the tokens a chunk's content counts for.
func chunkTokens(content string) int {
	if len(content) < longChunk {
		return 1
	}
	return usage.EstimateTokens(utf8.RuneCountInString(content))
}

// stopIfDone stops the engine once every choice was cut off or ended, one
// at least cut off.
func (c *capSink) stopIfDone() error {
	cut := false
	for i := range c.n {
		if !c.capped[i] && !c.ended[i] {
			return nil
		}
		cut = cut || c.capped[i]
	}
	if !cut {
		return nil
	}
	c.stopped = true
	return errAnswerCapped
}

// rewriteChunk is the chunk without the choices of drop, and with the
// content of those of cut replaced by what cut keeps of it; false when
// nothing of it is left to send.
func rewriteChunk(data []byte, drop map[int]bool, cut map[int]string) ([]byte, bool) {
	var chunk map[string]json.RawMessage
	var choices []map[string]json.RawMessage
	if json.Unmarshal(data, &chunk) != nil || json.Unmarshal(chunk["choices"], &choices) != nil {
		return data, true
	}
	kept := choices[:0]
	for _, ch := range choices {
		var i int
		if json.Unmarshal(ch["index"], &i) != nil {
			kept = append(kept, ch)
			continue
		}
		if drop[i] {
			continue
		}
		if content, ok := cut[i]; ok {
			var delta map[string]json.RawMessage
			if json.Unmarshal(ch["delta"], &delta) == nil {
				delta["content"], _ = json.Marshal(content)
				ch["delta"], _ = json.Marshal(delta)
			}
			// The choice is closed at the cap (capSink.finish).
			ch["finish_reason"] = json.RawMessage("null")
		}
		kept = append(kept, ch)
	}
	if len(kept) == 0 {
		return nil, false
	}
	chunk["choices"], _ = json.Marshal(kept)
	out, err := json.Marshal(chunk)
	if err != nil {
		return data, true
	}
	return out, true
}

// finish settles the answer once the engine is done. Each streamed
// choice cut off closes with finish_reason length, and an engine stopped
// at the cap has answered, with the usage the worker counted unless the
// engine reported its own. A whole answer cut takes the tokens cut off
// its usage.
func (c *capSink) finish(ctx context.Context, res *api.Result) *api.Result {
	if c.removed > 0 && res.Status == http.StatusOK {
		out := *res
		out.FinishReason = "length"
		if u := res.Usage; u != nil {
			nu := *u
			nu.CompletionTokens = max(u.CompletionTokens-c.removed, 0)
			nu.TotalTokens = nu.PromptTokens + nu.CompletionTokens
			out.Usage = &nu
		}
		return &out
	}
	var cut []int
	for i := range c.n {
		if c.capped[i] {
			cut = append(cut, i)
		}
	}
	if len(cut) == 0 || !c.stopped && res.Status != http.StatusOK {
		return res
	}
	if err := c.out.Event(ctx, c.head.closing(cut, "length")); err != nil {
		return engine.Cancelled()
	}
	out := *res
	if res.Status != http.StatusOK {
		out = api.Result{Status: http.StatusOK, Timing: res.Timing}
	}
	if out.Usage == nil && c.stopped {
		out.Usage = c.counted()
		c.timing(&out.Timing, out.Usage.CompletionTokens)
	}
	out.FinishReason = "length"
	return &out
}

// timing fills what the engine did not measure of a stream stopped at the
// cap, as its adapters measure a stream: the time to its first output and
// the rate of the tokens after it, of completion counted.
func (c *capSink) timing(t *api.Timing, completion int) {
	if c.first.IsZero() {
		return
	}
	if t.TTFTMs == nil {
		ms := float64(c.first.Sub(c.start).Microseconds()) / 1000
		t.TTFTMs = &ms
	}
	if d := c.last.Sub(c.first); t.TokensPerSecond == nil && completion >= 2 && d > 0 {
		tps := float64(completion-1) / d.Seconds()
		t.TokensPerSecond = &tps
	}
}

// counted is the usage of a stream stopped at the cap, as the worker
// counted what it passed on.
func (c *capSink) counted() *api.Usage {
	completion := c.thinking
	for _, n := range c.tokens {
		completion += n
	}
	u := stoppedUsage(c.body, completion)
	if c.thinking > 0 {
		thinking := c.thinking
		u.ReasoningTokens = &thinking
	}
	return u
}

// stoppedUsage is the usage of a chat reply the worker stopped, which its
// engine reported none of: completion tokens as the worker counted them,
// the prompt's estimated from the request at four characters a token,
// marked an estimate.
func stoppedUsage(body []byte, completion int) *api.Usage {
	u := &api.Usage{CompletionTokens: completion, Estimated: true}
	if req, err := chat.Parse(body, chat.Options{}); err == nil {
		u.PromptTokens = usage.EstimateTokens(req.PromptChars)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// Body holds a whole answer to the cap: a choice whose answer is longer
// keeps the share of its text the cap allows, and finishes with length.
// The answer's tokens are the engine's count less its thinking when it
// reports both and there is one choice, else estimated from the text; the
// tokens cut are taken off the reply's usage.
func (c *capSink) Body(ctx context.Context, data []byte) error {
	if out, ok := c.capWhole(data); ok {
		data = out
	}
	return c.out.Body(ctx, data)
}

// capWhole is a whole answer held to the cap; false when it is within it
// (or not a chat completion). Each choice's answer is estimated from its
// text, and when the engine counts its thinking apart, the estimates are
// scaled to the engine's count of answer tokens (its completion less its
// thinking), exact with one choice. The tokens cut come off the usage.
func (c *capSink) capWhole(data []byte) ([]byte, bool) {
	var reply map[string]any
	if json.Unmarshal(data, &reply) != nil {
		return nil, false
	}
	choices, _ := reply["choices"].([]any)
	u, _ := reply["usage"].(map[string]any)
	completion, hasCompletion := u["completion_tokens"].(float64)
	details, _ := u["completion_tokens_details"].(map[string]any)
	reasoning, hasReasoning := details["reasoning_tokens"].(float64)

	type answer struct {
		msg     map[string]any
		ch      map[string]any
		content string
		tokens  float64
	}
	answers := make([]answer, 0, len(choices))
	estimated := 0.0
	for _, raw := range choices {
		ch, _ := raw.(map[string]any)
		msg, _ := ch["message"].(map[string]any)
		content, _ := msg["content"].(string)
		if content == "" {
			continue
		}
		n := float64(usage.EstimateTokens(utf8.RuneCountInString(content)))
		answers = append(answers, answer{msg: msg, ch: ch, content: content, tokens: n})
		estimated += n
	}
	if counted := completion - reasoning; hasCompletion && hasReasoning && counted > 0 && estimated > 0 {
		for i := range answers {
			answers[i].tokens *= counted / estimated
		}
	}
	removed := 0
	for _, a := range answers {
		tokens := int(math.Round(a.tokens))
		if tokens <= c.cap {
			continue
		}
		a.msg["content"] = truncateRunes(a.content, utf8.RuneCountInString(a.content)*c.cap/tokens)
		a.ch["finish_reason"] = "length"
		removed += tokens - c.cap
	}
	if removed == 0 {
		return nil, false
	}
	if hasCompletion {
		removed = min(removed, int(completion))
		prompt, _ := u["prompt_tokens"].(float64)
		u["completion_tokens"] = int(completion) - removed
		u["total_tokens"] = int(prompt) + int(completion) - removed
	}
	c.removed = removed
	out, err := json.Marshal(reply)
	if err != nil {
		c.removed = 0
		return nil, false
	}
	return out, true
}

// truncateRunes is s cut to its first n characters.
func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
