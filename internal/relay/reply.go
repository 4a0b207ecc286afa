package relay

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsontext"
	"github.com/svc-dev/svc/internal/moderation"
	"github.com/svc-dev/svc/internal/usage"
)

// svcIdentity is the svc object that names only the worker and request.
func (c *Call) svcIdentity() json.RawMessage {
	return appendSvc(nil, svcReply{Worker: &c.lease.Worker, RequestID: c.req.ID})
}

// timing is the reply's svc.timing: the worker's measurements, the wait
// for a slot (always known), and a time to first token measured here when
// the engine gave none.
func (c *Call) timing() *api.Timing {
	// One allocation for the timing and the values it points to.
	m := new(struct {
		t          api.Timing
		wait, ttft float64
	})
	t := &m.t
	if c.res != nil {
		*t = c.res.Timing
	}
	m.wait = float64(c.queueWait.Microseconds()) / 1000
	if t.WorkerQueueWaitMs != nil {
		m.wait += *t.WorkerQueueWaitMs
	}
	t.QueueWaitMs = &m.wait
	if t.TTFTMs == nil && !c.firstToken.IsZero() && !c.openedAt.IsZero() {
		m.ttft = float64(c.firstToken.Sub(c.openedAt).Microseconds()) / 1000
		if t.WorkerQueueWaitMs != nil {
			m.ttft = max(0, m.ttft-*t.WorkerQueueWaitMs)
		}
		t.TTFTMs = &m.ttft
	}
	return t
}

// serverTiming is the Server-Timing header of a non-streaming reply:
// members only for what was measured.
func (c *Call) serverTiming() string {
	t := c.timing()
	b := make([]byte, 0, 96)
	b = appendTimingMember(b, "ttft;dur=", t.TTFTMs, "")
	b = appendTimingMember(b, `tps;desc="`, t.TokensPerSecond, `"`)
	b = appendTimingMember(b, "queue;dur=", t.QueueWaitMs, "")
	b = appendTimingMember(b, "worker_queue;dur=", t.WorkerQueueWaitMs, "")
	return string(b)
}

// appendTimingMember appends a Server-Timing member, the value to a tenth,
// after a separator when b has one already; nothing for a nil value.
func appendTimingMember(b []byte, head string, v *float64, tail string) []byte {
	if v == nil {
		return b
	}
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(b, head...)
	b = strconv.AppendFloat(b, *v, 'f', 1, 64)
	return append(b, tail...)
}

// inspect accounts for a relayed chunk: tokens so far, text for estimates
// and notices, and how the reply ended.
func (c *Call) inspect(msg []byte) bool {
	if c.req.E2E {
		// A sealed chunk is all that can be counted of it; the final one
		// carries the end marker, not a token.
		switch {
		case !bytes.HasPrefix(msg, []byte(`{"c":`)):
		case bytes.Contains(msg, []byte(`"final":true`)):
			c.sealedFinal = true
		default:
			if c.firstToken.IsZero() {
				c.firstToken = time.Now()
			}
			c.entry.AddTokens(1)
		}
		return true
	}
	s := &c.chunks
	if !s.read(msg) {
		// A chunk of the wrong shape is the client's to make sense of;
		// one that is not JSON at all is not to be passed on.
		return !s.notJSON
	}
	if c.chunkID == "" {
		c.chunkID = string(s.id)
	}
	if c.chunkCreated == 0 && len(s.created) > 0 {
		c.chunkCreated, _ = strconv.ParseInt(string(s.created), 10, 64)
	}
	produced := false
	for i := range s.choices {
		ch := &s.choices[i]
		produced = produced || len(ch.text) > 0 || len(ch.content) > 0 || len(ch.reasoning) > 0 || ch.toolCalls
		o := c.choice(ch.index)
		c.noteText(o, ch.text, nil, false)
		c.noteText(o, ch.content, ch.reasoning, ch.toolCalls)
		if ch.finished && len(ch.finish) > 0 && o.finish != string(ch.finish) {
			o.finish = string(ch.finish)
		}
	}
	if produced {
		if c.firstToken.IsZero() {
			c.firstToken = time.Now()
		}
		c.entry.AddTokens(1)
	}
	return true
}

// noteText accounts for text of the choice o.
func (c *Call) noteText(o *choiceOutcome, content, reasoning []byte, toolCalls bool) {
	c.outChars += utf8.RuneCount(content) + utf8.RuneCount(reasoning)
	o.hadContent = o.hadContent || len(bytes.TrimSpace(content)) > 0
	o.hadReasoning = o.hadReasoning || len(reasoning) > 0
	o.toolCalls = o.toolCalls || toolCalls
	if c.req.Chat != nil && c.req.Chat.JSONMode != "" && !o.contentTruncated {
		// The choices share what is kept of a reply.
		if o.content.Len()+len(content) > maxContent/c.choices() {
			o.contentTruncated = true
			return
		}
		o.content.Write(content)
	}
}

// present reports whether a field was sent with a value other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// reportedUsage is the worker's usage (an estimate when the worker counted
// it, Usage.Estimated), or an estimate from the text both
// ways (about four characters per token, and no more completion tokens
// than a chat's cap) when it reported none: the text relayed, or of a
// stream whose client left, the text it received; of a sealed request,
// whose text cannot be read, none.
func (c *Call) reportedUsage() (api.Usage, bool) {
	if c.res != nil && c.res.Usage != nil {
		return *c.res.Usage, c.res.Usage.Estimated
	}
	if c.req.E2E {
		// Sealed text cannot be counted: no estimate is made.
		return api.Usage{}, false
	}
	chars := c.outChars
	if c.cutShort {
		chars = c.received
	}
	u := api.Usage{CompletionTokens: usage.EstimateTokens(chars)}
	if c.req.Chat != nil {
		u.PromptTokens = usage.EstimateTokens(c.req.Chat.PromptChars)
		// The engine made no more than it was allowed to: words longer
		// than four characters must not estimate past the cap.
		if limit := c.req.Chat.EngineMaxTokens; limit > 0 {
			u.CompletionTokens = min(u.CompletionTokens, limit)
		}
	} else if c.req.PromptChars > 0 {
		u.PromptTokens = usage.EstimateTokens(c.req.PromptChars)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	// A kind with nothing to estimate from (a rerank's or an embedding's
	// input is not measured) has no estimate, not an estimate of none.
	return u, u.TotalTokens > 0
}

// produced reports whether the request made anything to count u from:
// text relayed, or tokens the worker counted as made (Usage.Estimated),
// sealed or not.
func (c *Call) produced(u api.Usage) bool {
	return c.outChars > 0 || c.res != nil && c.res.Usage != nil && u.CompletionTokens > 0
}

// replyUsage is the usage a successful reply states: what its row holds
// (usage.Row), so that an answer with nothing in it, which is not billed
// on an estimate, does not tell its client one.
func (c *Call) replyUsage() api.Usage {
	u, estimated := c.reportedUsage()
	if estimated && !c.produced(u) {
		return api.Usage{}
	}
	return u
}

// replyNotice settles the reply's one notice.
func (c *Call) replyNotice() *api.Notice {
	if c.req.Chat == nil {
		return nil
	}
	var engine *api.Notice
	if c.res != nil {
		engine = c.res.Notice
	}
	u, _ := c.reportedUsage()
	reasoning := 0
	if u.ReasoningTokens != nil {
		reasoning = *u.ReasoningTokens
	}
	// Usage counts the tokens of every choice together: each choice is
	// judged on its share. The notice is the first choice's that has one.
	n := c.choices()
	c.notice = nil
	c.eachChoice(func(o *choiceOutcome) {
		if c.notice != nil {
			return
		}
		c.notice = c.req.Chat.Notice(chat.Outcome{
			FinishReason: o.finish, Content: o.content.String(), ContentTruncated: o.contentTruncated,
			HadContent: o.hadContent, HasToolCalls: o.toolCalls, ReasoningTokens: reasoning / n, HadReasoning: o.hadReasoning,
			PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens / n,
		}, engine, c.req.ModelInfo)
	})
	return c.notice
}

// finalChunks are the chunks after the text, all with empty choices: the
// usage, the notice if any, then svc with timing, worker and request id.
func (c *Call) finalChunks() [][]byte {
	// Every chunk of a completion has the same created: the engine's,
	// else now.
	if c.chunkCreated > 0 {
		return c.finalChunksAt(c.chunkCreated)
	}
	return c.finalChunksAt(time.Now().Unix())
}

func (c *Call) finalChunksAt(created int64) [][]byte {
	if c.req.E2E {
		// Beside a sealed stream, only who served it.
		b := append([]byte(`{"svc":`), c.svcIdentity()...)
		return [][]byte{append(b, '}')}
	}
	id := c.chunkID
	// A text completion's stream is of text_completion objects, its
	// closing chunks too: clients decode every chunk as one type.
	object, prefix := `,"object":"chat.completion.chunk",`, "chatcmpl-"
	if c.req.Kind == api.KindCompletion {
		object, prefix = `,"object":"text_completion",`, "cmpl-"
	}
	if id == "" {
		id = prefix + c.req.ID
	}
	// One buffer holds them all; the members are sorted, as encoding/json
	// wrote the maps they were once built from.
	buf := make([]byte, 0, 1024)
	head := func() {
		buf = append(buf, `{"choices":[],"created":`...)
		buf = strconv.AppendInt(buf, created, 10)
		buf = append(buf, `,"id":`...)
		buf = jsontext.AppendString(buf, id)
		buf = append(buf, `,"model":`...)
		buf = jsontext.AppendString(buf, c.req.Model)
		buf = append(buf, object...)
	}
	var ends []int
	head()
	buf = append(buf, `"usage":`...)
	buf = append(c.replyUsage().AppendOpenAI(buf), '}')
	ends = append(ends, len(buf))
	if n := c.replyNotice(); n != nil {
		head()
		buf = append(buf, `"svc":`...)
		buf = append(appendSvc(buf, svcReply{Notice: n}), '}')
		ends = append(ends, len(buf))
	}
	head()
	buf = append(buf, `"svc":`...)
	buf = append(appendSvc(buf, svcReply{Worker: &c.lease.Worker, RequestID: c.req.ID, Timing: c.timing()}), '}')
	ends = append(ends, len(buf))
	out := make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		out[i] = buf[start:end:end]
		start = end
	}
	return out
}

// completeBody adds to a worker's non-streaming answer what the gateway
// owes every reply: usage, and svc with the worker, request id, timing and
// notice. The engine's JSON is kept as it is; the additions are spliced in
// before its closing brace.
func (c *Call) completeBody(body []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) < 2 || trimmed[0] != '{' || trimmed[len(trimmed)-1] != '}' {
		return nil, &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply,
			Message: "worker " + c.lease.Worker.Name + " answered with something that is not a JSON object"}
	}
	var s answerScan
	if !s.read(trimmed) {
		s.stepsAt = [2]int{}
		if err := s.decode(trimmed); err != nil {
			return nil, &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply, Message: "the worker's answer is not valid JSON", Err: err}
		}
	}
	for i := range s.choices {
		ch := &s.choices[i]
		o := c.choice(ch.index)
		c.noteText(o, ch.text, nil, false)
		c.noteText(o, ch.content, ch.reasoning, ch.toolCalls)
		if len(ch.finish) > 0 {
			o.finish = string(ch.finish)
		}
	}
	reply := svcReply{Worker: &c.lease.Worker, RequestID: c.req.ID, Timing: c.timing()}
	if c.req.Kind == api.KindChat {
		reply.Notice = c.replyNotice()
		if present(s.webToolSteps) {
			// Moved, not copied: the worker's member goes into svc.
			reply.WebToolSteps = s.webToolSteps
			trimmed = s.cutSteps(trimmed)
		}
	}
	add := make([]byte, 0, 512)
	if !s.usage {
		add = c.replyUsage().AppendOpenAI(append(add, `,"usage":`...))
	}
	add = appendSvc(append(add, `,"svc":`...), reply)
	return splice(trimmed, add), nil
}

// splice puts members (starting with a comma) before the closing brace of
// obj, a JSON object.
func splice(obj, members []byte) []byte {
	inner := bytes.TrimSpace(obj[:len(obj)-1])
	out := make([]byte, 0, len(inner)+len(members)+1)
	out = append(out, inner...)
	if len(inner) == 1 { // an empty object: no comma before the additions
		out = append(out, members[1:]...)
	} else {
		out = append(out, members...)
	}
	return append(out, '}')
}

// sealedReply puts the serving worker's identity beside a sealed
// non-streaming reply, the one clear thing a client learns from the
// gateway itself.
func (c *Call) sealedReply(body []byte) ([]byte, error) {
	trimmed := bytes.TrimRight(body, " \t\r\n")
	if len(trimmed) < 2 || trimmed[len(trimmed)-1] != '}' {
		return nil, &api.Error{Kind: api.KindUpstream, Message: "The worker's sealed reply is malformed"}
	}
	out := append(append([]byte(nil), trimmed[:len(trimmed)-1]...), `,"svc":`...)
	out = append(out, c.svcIdentity()...)
	return append(out, '}'), nil
}

// record writes the request's usage row.
func (rl *Relay) record(c *Call, failure error) {
	o := usage.Outcome{
		RequestID: c.req.ID, Started: c.started, Ended: time.Now(), Model: c.req.Model,
		RequestType: rowKind(c.req.Kind), Stream: c.req.Stream, KeyID: c.req.KeyID, Attempts: c.attempts,
		Status: http.StatusOK, Notice: c.notice,
		AudioSeconds: c.req.AudioSeconds, AudioFormat: c.req.AudioFormat,
	}
	if failure != nil {
		ae := api.ErrorOf(failure)
		o.Status, o.ErrorMessage = ae.HTTPStatus(), ae.Message
	}
	if c.req.Chat != nil {
		o.Images = c.req.Chat.Images
	}
	if c.req.Kind == api.KindImages {
		o.Images = c.out.Images
	}
	if c.req.E2E && c.req.Kind == api.KindTranscription && c.res != nil {
		o.AudioSeconds, o.AudioFormat = sealedAudio(c.res)
	}
	if c.req.Kind == api.KindSpeech {
		o.SpeechSeconds = c.out.SpeechSeconds
		if c.req.E2E && c.res != nil && c.res.AudioSeconds != nil {
			o.SpeechSeconds = *c.res.AudioSeconds
		}
	}
	if c.req.Kind == api.KindModeration {
		o.ModerationOutcome, o.ModerationCategories = moderationOutcome(c.out.Verdicts, failure)
		if failure != nil {
			o.ErrorMessage = moderation.RowMessage(api.ErrorOf(failure))
		}
	}
	if c.lease != nil {
		o.Ran, o.WorkerID, o.WorkerName = true, c.lease.Worker.ID, c.lease.Worker.Name
		u, estimated := c.reportedUsage()
		o.Usage, o.Estimated, o.Produced = &u, estimated, c.produced(u)
		o.Timing = c.timing()
	} else if c.queueWait >= time.Millisecond {
		// Refused once its wait for a slot ran out: the wait is the row's
		// one timing.
		wait := float64(c.queueWait.Microseconds()) / 1000
		o.Timing = &api.Timing{QueueWaitMs: &wait}
	}
	if c.res != nil {
		o.EnergyWh = c.res.EnergyWh
	}
	if c.span != nil {
		c.endSpan(&o, failure)
	}
	if o.Status >= http.StatusInternalServerError && o.Ran {
		// A worker's failure, or its loss: what an operator looks into,
		// one line a request. Refusals before any worker (no worker
		// online, capacity) are the metrics' and the usage log's. The
		// message stays in the usage log: an engine's may quote the
		// request it refused.
		var typ, code string
		if failure != nil {
			// The type and code say what failed without quoting anyone.
			ae := api.ErrorOf(failure)
			typ, code = ae.ErrorType(), ae.Code
		}
		rl.log.Info("request failed on a worker", "request_id", o.RequestID, "model", o.Model, "worker", o.WorkerName,
			"worker_id", o.WorkerID, "status", o.Status, "type", typ, "code", code, "attempts", o.Attempts)
	}
	rl.usage.Record(c.req.OrgID, usage.Row(o))
}

// sealedAudio is what the worker that opened a sealed transcription read
// of its audio. Only the formats the gateway itself accepts are taken, so
// a worker cannot write anything else into the row.
func sealedAudio(res *api.Result) (float64, string) {
	secs := res.AudioSeconds
	switch {
	case secs == nil || math.IsNaN(*secs) || math.IsInf(*secs, 0) || *secs < 0:
		return 0, ""
	case res.AudioFormat == api.AudioWAV, res.AudioFormat == api.AudioMP3, res.AudioFormat == api.AudioFLAC:
		return *secs, res.AudioFormat
	}
	return 0, ""
}

// moderationOutcome is what a moderation row records: pass or flagged
// and the flagged categories, or error.
func moderationOutcome(results []api.ModerationResult, failure error) (string, []string) {
	if failure != nil {
		return api.ModerationError, nil
	}
	var flagged []string
	for _, r := range results {
		for _, c := range moderation.FlaggedCategories(r) {
			if !slices.Contains(flagged, c) {
				flagged = append(flagged, c)
			}
		}
	}
	if len(flagged) > 0 {
		return api.ModerationFlagged, flagged
	}
	return api.ModerationPass, nil
}
