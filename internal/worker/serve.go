package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/jsontext"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/speech"
)

// serve runs one request the gateway sent. ctx ends when the gateway
// resets the stream (the client went away), which stops the engine.
func (a *Agent) serve(ctx context.Context, st *link.Stream) {
	res := a.run(ctx, st)
	if ctx.Err() != nil {
		// The gateway dropped the stream; nobody is waiting for a result.
		return
	}
	if err := st.End(ctx, boundResult(res).AppendJSON(make([]byte, 0, 256))); err != nil {
		a.log.Debug("result not delivered", "stream", st.ID(), "err", err)
	}
}

// maxResultMessage bounds a result's error message. A result is one link
// frame, and an engine's error body (an HTML page, a traceback) may be
// larger: unsent, the gateway would wait for the request's end until its
// limit, holding the worker's slot.
const maxResultMessage = 8 << 10

// boundResult is res with its error message cut to maxResultMessage, on a
// character's boundary.
func boundResult(res *api.Result) *api.Result {
	if res.Error == nil || len(res.Error.Message) <= maxResultMessage {
		return res
	}
	r, e := *res, *res.Error
	e.Message = strings.ToValidUTF8(e.Message[:maxResultMessage], "") + " …"
	r.Error = &e
	return &r
}

func (a *Agent) run(ctx context.Context, st *link.Stream) (res *api.Result) {
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("request handler panicked", "panic", p)
			res = engine.Failure(http.StatusInternalServerError, api.TypeServer, fmt.Sprintf("the worker failed: %v", p))
			res.Retryable = true
		}
	}()
	hdr, body, err := st.OpenRequest(ctx)
	if err != nil {
		return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the request did not reach the worker whole: "+err.Error())
	}
	var req api.LinkRequest
	if err := api.DecodeLinkRequest(hdr, &req); err != nil {
		return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "malformed request header: "+err.Error())
	}
	ctx, span := a.startSpan(ctx, &req)
	// Ends before a panic's result is made: the span then reports none.
	defer func() { endSpan(span, res, req.Model) }()
	model := a.servedFor(req.Model)
	eng, local := model.eng, model.local
	if eng == nil {
		r := engine.Failure(http.StatusNotFound, api.TypeNotFound, "this worker does not serve model "+req.Model)
		r.Retryable = true // another worker may: our model list was out of date
		return r
	}
	eng = a.watchOf(eng)
	if a.cfg.Tracer != nil {
		eng = tracedEngine{Engine: eng, tracer: a.cfg.Tracer}
	}
	ereq := &engine.Request{Kind: req.Kind, Model: local, Stream: req.Stream}
	if req.Kind == api.KindTranscription || req.Kind == api.KindTranscriptionLive {
		// The audio is read by the engine as it arrives.
		ereq.Body, ereq.Audio = req.Params, body
	} else if ereq.Body, err = body.Bytes(); err != nil {
		return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the request did not reach the worker whole: "+err.Error())
	}

	var private *privateRequest
	if req.E2E && req.Kind == api.KindTranscriptionLive {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "live transcription is not sealed")
	}
	if req.E2E {
		var failed *api.Result
		if req.Kind == api.KindTranscription {
			// A sealed upload came whole, as the envelope's bytes.
			if ereq.Body, err = body.Bytes(); err != nil {
				return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the request did not reach the worker whole: "+err.Error())
			}
		}
		if private, failed = a.openPrivate(&req, ereq.Body); failed != nil {
			return failed
		}
		ereq.Body = private.body
		if private.audio != nil {
			ereq.Audio = private.audio
		}
	}

	if local != req.Model && req.Kind != api.KindTranscription && req.Kind != api.KindTranscriptionLive {
		// An engine knows a model offered under an alias (--model-alias
		// ID=LOCAL) by its own name only, and one over HTTP reads it from
		// the body, where the client named the alias. (An upload's name is
		// in its parameters, which the engine reads with local.)
		ereq.Body = renameModel(ereq.Body, jsontext.AppendString(nil, local))
	}

	if req.Kind == api.KindChat {
		ereq.Body = withSampling(ereq.Body, model.sampling)
	}

	if req.Kind == api.KindChat && private == nil {
		// A sealed chat's images are inline: the worker refuses URLs in
		// one as it opens it.
		var failed *api.Result
		if ereq.Body, failed = a.inlineImages(ctx, ereq.Body); failed != nil {
			return failed
		}
	}

	webTools := a.cfg.Web != nil && req.Kind == api.KindChat && private == nil
	if webTools {
		eng = a.cfg.Web.Wrap(eng)
	}

	// The gateway only sends what fits our slots; wait in case it raced a
	// slot being freed here.
	waitStart := time.Now()
	a.waiting.Add(1)
	select {
	case a.slots <- struct{}{}:
		a.waiting.Add(-1)
	case <-ctx.Done():
		a.waiting.Add(-1)
		return engine.Cancelled()
	}
	wait := time.Since(waitStart)
	a.active.Add(1)
	defer func() {
		a.active.Add(-1)
		<-a.slots
	}()

	var sink engine.Sink = streamSink{st}
	var sealing *sealingSink
	if private != nil {
		sealing = &sealingSink{out: sink, sealer: private.Sealer, render: private.render}
		sink = sealing
	}
	if local != req.Model && renamed(req.Kind) {
		// Renamed before it is sealed: the client reads the model too.
		sink = newRenamingSink(sink, req.Model)
	}
	if a.power != nil {
		a.power.Begin(req.RequestID)
		defer func() {
			if wh, ok := a.power.End(req.RequestID); ok && res != nil && res.Status == http.StatusOK {
				res.EnergyWh = &wh
			}
		}()
	}
	finishCap := func(_ context.Context, res *api.Result) *api.Result { return res }
	answerCap := req.AnswerMaxTokens
	if private != nil {
		answerCap = private.answerCap
	}
	if req.Kind == api.KindChat && answerCap > 0 {
		// Before sealing: the cap reads the answer's chunks. A filtered
		// chat's checks read a whole answer whole, and the web tools'
		// turns answer a whole request in a shape of their own (the steps
		// beside the answer, its timing from the last turn).
		sink, finishCap = holdAnswer(ereq, sink, answerCap, !req.Stream && req.ContentFilter == "" && !webTools)
	}
	switch {
	case req.Kind == api.KindSpeech:
		res = a.speak(ctx, eng, ereq, sink)
	case req.Kind == api.KindTranscriptionLive:
		res = transcribeLive(ctx, eng, local, ereq.Body, ereq.Audio, sink, a.liveWindows())
	case req.Kind == api.KindModeration:
		res = a.moderate(ctx, req.Model, ereq.Body, sink)
	case req.Kind == api.KindChat && req.ContentFilter != "":
		res = a.filterChat(ctx, eng, ereq, req.ContentFilter, sink)
	default:
		res = eng.Serve(ctx, ereq, sink)
	}
	if res == nil {
		res = engine.Failure(http.StatusInternalServerError, api.TypeServer, "the engine returned no result")
	}
	res = finishCap(ctx, res)
	if sealing != nil && res.Status == http.StatusOK {
		if err := sealing.finish(ctx, req.Stream, res.Usage); err != nil {
			return engine.Cancelled()
		}
		if private.audioFormat != "" {
			secs := private.audioSeconds
			res.AudioFormat, res.AudioSeconds = private.audioFormat, &secs
		}
		// The gateway cannot open the audio a sealed speech request made,
		// and its usage row counts its length.
		if req.Kind == api.KindSpeech {
			if secs, err := speech.Seconds(sealing.body); err == nil {
				res.AudioSeconds = &secs
			}
		}
	}
	if sealing != nil && res.Error != nil {
		a.log.Info("private request failed", "status", res.Status, "err", res.Error.Message)
		sealer := private.Sealer
		if sealing.started {
			// A stream that failed after its first event: the gateway
			// ends it with an error event of its own.
			sealer = nil
		}
		sealFailure(sealer, res, fmt.Sprintf("the encrypted request failed on the worker (%d %s)", res.Status, http.StatusText(res.Status)))
	}
	if wait > time.Millisecond {
		ms := float64(wait.Microseconds()) / 1000
		res.Timing.WorkerQueueWaitMs = &ms
	}
	return res
}

// streamSink writes an engine's output to the link; it blocks while the
// gateway has a full window unconsumed.
type streamSink struct{ st *link.Stream }

func (s streamSink) Event(ctx context.Context, data []byte) error { return s.st.Send(ctx, data) }
func (s streamSink) Body(ctx context.Context, data []byte) error  { return s.st.Send(ctx, data) }

// speak runs a speech request and delivers the audio in the one layout
// every reply has, whatever rate and channels the engine produced: 24 kHz,
// 16-bit, mono WAV.
func (a *Agent) speak(ctx context.Context, eng engine.Engine, req *engine.Request, out engine.Sink) *api.Result {
	var got captureSink
	res := eng.Serve(ctx, req, &got)
	if res == nil || res.Status != http.StatusOK {
		return res
	}
	wav, _, err := audio.ToSpeechWAV(got.body)
	if err != nil {
		return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the engine's audio is not usable: "+err.Error())
	}
	if err := out.Body(ctx, wav); err != nil {
		return engine.Cancelled()
	}
	return res
}

// captureSink keeps a response for the worker to finish before it is sent.
type captureSink struct{ body []byte }

func (c *captureSink) Event(_ context.Context, data []byte) error {
	c.body = append(c.body, data...)
	return nil
}

func (c *captureSink) Body(_ context.Context, data []byte) error {
	c.body = append(c.body, data...)
	return nil
}

// sealFailure readies the failure res of a private request that opened:
// its message may quote the prompt, and its type and code tell of it (a
// content filter's verdict, the field a validation names), so the failure
// goes to the client sealed by sealer, as the reply would have
// (res.Sealed), and the result the gateway reads in the clear tells only
// its status, with clear as its message. A nil sealer (a stream already
// under way, which only events can follow) seals nothing.
func sealFailure(sealer *e2ee.ResponseSealer, res *api.Result, clear string) {
	e := res.Error
	if sealer != nil {
		var code *string
		if e.Code != "" {
			code = &e.Code
		}
		typ := e.Type
		if res.Status == http.StatusInternalServerError {
			// As a clear one's: the gateway answers an engine's 500 as
			// 502, no usable response from the worker.
			typ = api.TypeUpstream
		}
		body, _ := json.Marshal(api.Body{Detail: e.Message, Error: &api.ErrorPayload{Message: e.Message, Type: typ, Code: code}})
		res.Sealed = sealer.ReplyBody(body)
	}
	res.Error = &api.ResultError{Message: clear, Type: api.TypeForStatus(res.Status), RetryAfter: e.RetryAfter}
}
