package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/usage"
)

// svcReply is the svc object of a reply.
type svcReply struct {
	Worker       *svcWorker      `json:"worker,omitempty"`
	RequestID    string          `json:"request_id,omitempty"`
	Timing       *api.Timing     `json:"timing,omitempty"`
	Notice       *api.Notice     `json:"notice,omitempty"`
	WebToolSteps json.RawMessage `json:"web_tool_steps,omitempty"`
}

type svcWorker struct {
	ID      string  `json:"id"`
	Name    *string `json:"name"`
	Version *string `json:"version"`
}

func (r *relay) svcWorker() *svcWorker {
	w := r.lease.Worker
	out := &svcWorker{ID: w.ID}
	if w.Name != "" {
		out.Name = &w.Name
	}
	if w.Version != "" {
		out.Version = &w.Version
	}
	return out
}

// timing is the reply's svc.timing: the worker's measurements, the wait
// for a slot (always known), and a time to first token measured here when
// the engine gave none.
func (r *relay) timing() *api.Timing {
	var t api.Timing
	if r.res != nil {
		t = r.res.Timing
	}
	wait := float64(r.queueWait.Microseconds()) / 1000
	if t.WorkerQueueWaitMs != nil {
		wait += *t.WorkerQueueWaitMs
	}
	t.QueueWaitMs = &wait
	if t.TTFTMs == nil && !r.firstToken.IsZero() && !r.openedAt.IsZero() {
		ms := float64(r.firstToken.Sub(r.openedAt).Microseconds()) / 1000
		if t.WorkerQueueWaitMs != nil {
			ms = max(0, ms-*t.WorkerQueueWaitMs)
		}
		t.TTFTMs = &ms
	}
	return &t
}

// serverTiming is the Server-Timing header of a non-streaming reply:
// members only for what was measured.
func (r *relay) serverTiming() string {
	t := r.timing()
	var parts []string
	if t.TTFTMs != nil {
		parts = append(parts, fmt.Sprintf("ttft;dur=%.1f", *t.TTFTMs))
	}
	if t.TokensPerSecond != nil {
		parts = append(parts, fmt.Sprintf(`tps;desc="%.1f"`, *t.TokensPerSecond))
	}
	if t.QueueWaitMs != nil {
		parts = append(parts, fmt.Sprintf("queue;dur=%.1f", *t.QueueWaitMs))
	}
	if t.WorkerQueueWaitMs != nil {
		parts = append(parts, fmt.Sprintf("worker_queue;dur=%.1f", *t.WorkerQueueWaitMs))
	}
	return strings.Join(parts, ", ")
}

// workerHeaders name the serving worker; a name that is not ASCII is
// percent-encoded with the UTF-8” prefix.
func workerHeaders(h *fasthttp.ResponseHeader, w fleet.WorkerInfo) {
	h.Set("X-Worker-Id", w.ID)
	h.Set("X-Worker-Name", headerName(w.Name))
}

func headerName(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "UTF-8''" + url.PathEscape(name)
		}
	}
	return name
}

// streamChunk is what the gateway reads of a relayed chunk.
type streamChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// inspect accounts for a relayed chunk: tokens so far, text for estimates
// and notices, and how the reply ended.
func (r *relay) inspect(msg []byte) {
	if r.e2e {
		// A sealed chunk is all that can be counted of it.
		if bytes.HasPrefix(msg, []byte(`{"c":`)) && !bytes.Contains(msg, []byte(`"final":true`)) {
			if r.firstToken.IsZero() {
				r.firstToken = time.Now()
			}
			r.entry.AddTokens(1)
		}
		return
	}
	var c streamChunk
	if json.Unmarshal(msg, &c) != nil {
		return
	}
	if r.chunkID == "" {
		r.chunkID = c.ID
	}
	produced := false
	for _, ch := range c.Choices {
		d := ch.Delta
		toolCalls := present(d.ToolCalls)
		produced = produced || d.Content != "" || d.ReasoningContent != "" || toolCalls
		r.noteText(d.Content, d.ReasoningContent, toolCalls)
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			r.finish = *ch.FinishReason
		}
	}
	if produced {
		if r.firstToken.IsZero() {
			r.firstToken = time.Now()
		}
		r.entry.AddTokens(1)
	}
}

func (r *relay) noteText(content, reasoning string, toolCalls bool) {
	r.outChars += utf8.RuneCountInString(content) + utf8.RuneCountInString(reasoning)
	r.hadReasoning = r.hadReasoning || reasoning != ""
	r.toolCalls = r.toolCalls || toolCalls
	if r.chat != nil && r.chat.JSONMode != "" && !r.contentTruncated {
		if r.content.Len()+len(content) > maxContent {
			r.contentTruncated = true
			return
		}
		r.content.WriteString(content)
	}
}

// reportedUsage is the worker's usage, or an estimate from the text both
// ways (about four characters per token) when it reported none.
func (r *relay) reportedUsage() (api.Usage, bool) {
	if r.res != nil && r.res.Usage != nil {
		return *r.res.Usage, false
	}
	u := api.Usage{CompletionTokens: usage.EstimateTokens(r.outChars)}
	if r.chat != nil {
		u.PromptTokens = usage.EstimateTokens(r.chat.PromptChars)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u, true
}

// replyNotice settles the reply's one notice.
func (r *relay) replyNotice() *api.Notice {
	if r.chat == nil {
		return nil
	}
	var engine *api.Notice
	if r.res != nil {
		engine = r.res.Notice
	}
	u, _ := r.reportedUsage()
	reasoning := 0
	if u.ReasoningTokens != nil {
		reasoning = *u.ReasoningTokens
	}
	r.notice = r.chat.Notice(chat.Outcome{
		FinishReason: r.finish, Content: r.content.String(), ContentTruncated: r.contentTruncated,
		HasToolCalls: r.toolCalls, ReasoningTokens: reasoning, HadReasoning: r.hadReasoning,
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
	}, engine, r.model)
	return r.notice
}

// usageJSON is usage in the OpenAI shape: cached tokens only when some
// prompt tokens were reused, reasoning tokens when reported.
func usageJSON(u api.Usage) map[string]any {
	out := map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens}
	if u.CachedTokens != nil && *u.CachedTokens > 0 {
		out["prompt_tokens_details"] = map[string]any{"cached_tokens": *u.CachedTokens}
	}
	if u.ReasoningTokens != nil {
		out["completion_tokens_details"] = map[string]any{"reasoning_tokens": *u.ReasoningTokens}
	}
	return out
}

// finalChunks are the chunks after the text, all with empty choices: the
// usage, the notice if any, then svc with timing, worker and request id.
func (r *relay) finalChunks() [][]byte {
	if r.e2e {
		// Beside a sealed stream, only who served it.
		b, _ := json.Marshal(map[string]any{"svc": svcReply{Worker: r.svcWorker(), RequestID: r.requestID}})
		return [][]byte{b}
	}
	created := time.Now().Unix()
	id := r.chunkID
	if id == "" {
		id = "chatcmpl-" + r.requestID
	}
	chunk := func(extra map[string]any) []byte {
		m := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": r.need.Model, "choices": []any{}}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	u, _ := r.reportedUsage()
	out := [][]byte{chunk(map[string]any{"usage": usageJSON(u)})}
	if n := r.replyNotice(); n != nil {
		out = append(out, chunk(map[string]any{"svc": svcReply{Notice: n}}))
	}
	out = append(out, chunk(map[string]any{"svc": svcReply{Worker: r.svcWorker(), RequestID: r.requestID, Timing: r.timing()}}))
	return out
}

// completionBody is what the gateway reads of a non-streaming reply.
type completionBody struct {
	Choices []struct {
		Message struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage        json.RawMessage `json:"usage"`
	WebToolSteps json.RawMessage `json:"web_tool_steps"`
}

// completeBody adds to a worker's non-streaming answer what the gateway
// owes every reply: usage, and svc with the worker, request id, timing and
// notice. The engine's JSON is kept as it is; the additions are spliced in
// before its closing brace.
func (r *relay) completeBody(body []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) < 2 || trimmed[0] != '{' || trimmed[len(trimmed)-1] != '}' {
		return nil, &api.Error{Status: http.StatusBadGateway, Code: "bad_worker_reply",
			Message: "worker " + r.lease.Worker.Name + " answered with something that is not a JSON object"}
	}
	var cb completionBody
	if err := json.Unmarshal(trimmed, &cb); err != nil {
		return nil, &api.Error{Status: http.StatusBadGateway, Code: "bad_worker_reply", Message: "the worker's answer is not valid JSON", Err: err}
	}
	for _, ch := range cb.Choices {
		m := ch.Message
		content, reasoning := "", ""
		if m.Content != nil {
			content = *m.Content
		}
		if m.ReasoningContent != nil {
			reasoning = *m.ReasoningContent
		}
		r.noteText(content, reasoning, present(m.ToolCalls))
		if ch.FinishReason != "" {
			r.finish = ch.FinishReason
		}
	}
	reply := svcReply{Worker: r.svcWorker(), RequestID: r.requestID, Timing: r.timing()}
	if r.kind == api.KindChat {
		reply.Notice = r.replyNotice()
		if present(cb.WebToolSteps) {
			reply.WebToolSteps = cb.WebToolSteps
		}
	}
	var add bytes.Buffer
	if !present(cb.Usage) {
		u, _ := r.reportedUsage()
		b, _ := json.Marshal(usageJSON(u))
		add.WriteString(`,"usage":`)
		add.Write(b)
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return nil, err
	}
	add.WriteString(`,"svc":`)
	add.Write(b)
	inner := bytes.TrimSpace(trimmed[:len(trimmed)-1])
	out := make([]byte, 0, len(inner)+add.Len()+1)
	out = append(out, inner...)
	if len(inner) == 1 { // an empty object: no comma before the additions
		out = append(out, add.Bytes()[1:]...)
	} else {
		out = append(out, add.Bytes()...)
	}
	return append(out, '}'), nil
}

// lateErrorBody is the body of a failure after a kept-alive reply started:
// a 200 whose JSON is the error object, with detail beside it.
func lateErrorBody(err error) []byte {
	ae := asAPIError(err, "")
	b, _ := json.Marshal(map[string]any{"error": lateError(ae), "detail": ae.Message})
	return b
}

// recordUsage writes the request's usage row.
func (s *Server) recordUsage(r *relay, failure error) {
	row := api.UsageRow{
		ID: r.requestID, CreatedAt: r.started.UTC(), Model: r.need.Model, RequestType: rowKind(r.kind),
		StatusCode: http.StatusOK, RequestDurationMs: time.Since(r.started).Milliseconds(),
		Stream: r.stream, Attempts: r.attempts, APIKeyID: r.keyID,
	}
	if failure != nil {
		ae := s.toAPIErrorQuiet(failure)
		row.StatusCode = ae.Status
		msg := ae.Message
		row.ErrorMessage = &msg
	}
	if r.chat != nil {
		row.Images = r.chat.Images
	}
	if r.kind == api.KindModeration {
		outcome, flagged := moderationOutcome(r.verdicts, failure)
		row.ModerationOutcome, row.ModerationCategories = &outcome, flagged
	}
	if r.audioFormat != "" && failure == nil {
		secs, format := r.audioSeconds, r.audioFormat
		row.AudioSeconds, row.AudioFormat = &secs, &format
	}
	if r.lease != nil {
		row.WorkerID, row.WorkerName = r.lease.Worker.ID, r.lease.Worker.Name
	}
	// r.res is only ever set with a lease. Audio has no tokens to count.
	if r.lease != nil && (r.kind == api.KindChat || r.kind == api.KindEmbeddings) {
		u, estimated := r.reportedUsage()
		// A request that never reached an engine has nothing to estimate.
		if !estimated || r.outChars > 0 || row.StatusCode == 499 {
			row.PromptTokens, row.CompletionTokens, row.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
			row.ReasoningTokens, row.CachedTokens = u.ReasoningTokens, u.CachedTokens
			row.TokensEstimated = estimated
		}
	}
	if r.lease != nil && row.StatusCode < 500 {
		t := r.timing()
		row.TimeToFirstTokenMs = msPtr(t.TTFTMs)
		row.TokensPerSecond = t.TokensPerSecond
		row.DraftAcceptanceRate = t.DraftAcceptanceRate
		row.QueueWaitMs = msPtr(t.QueueWaitMs)
		row.WorkerQueueWaitMs = msPtr(t.WorkerQueueWaitMs)
		row.ModelLoadMs = msPtr(t.ModelLoadMs)
		row.ColdStart = t.ColdStart != nil && *t.ColdStart
	}
	if r.notice != nil {
		code := r.notice.Code
		row.Notice = &code
	}
	if r.res != nil {
		row.EnergyWh = r.res.EnergyWh
	}
	s.usage.Record(r.need.OrgID, row)
}

func msPtr(v *float64) *int64 {
	if v == nil {
		return nil
	}
	ms := int64(*v + 0.5)
	return &ms
}
