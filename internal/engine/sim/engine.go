package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

const engineKind = "sim"

// inProcessReasoning are the reasoning fields of the in-process engine:
// the engine contract wants reasoning_content mirrored on reasoning.
var inProcessReasoning = []string{"reasoning_content", "reasoning"}

// Engine is the simulator as an in-process engine.Engine. It is safe for
// concurrent use; build it with New.
type Engine struct {
	sim *simulator
}

var (
	_ engine.Engine = (*Engine)(nil)
	_ engine.Info   = (*Engine)(nil)
)

// New returns a simulator engine. Zero rates and durations in cfg mean no
// delay; start from DefaultConfig or ParseOptions for realistic pacing.
func New(cfg Config) *Engine {
	return &Engine{sim: newSimulator(cfg)}
}

// Kind is "sim".
func (e *Engine) Kind() string { return engineKind }

// Info labels the engine as a simulator wherever it shows.
func (e *Engine) Info() api.EngineInfo {
	return api.EngineInfo{Kind: engineKind, Simulated: true}
}

// Models lists the simulated models and whether each is loaded.
func (e *Engine) Models(ctx context.Context) ([]api.Model, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list sim models: %w", err)
	}
	now := e.sim.cfg.Now()
	models := e.sim.models.all()
	out := make([]api.Model, 0, len(models))
	for _, m := range models {
		out = append(out, m.listing(now))
	}
	return out, nil
}

// Serve answers a chat, completion, embeddings, rerank, image
// generation, transcription or speech request.
func (e *Engine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	switch req.Kind {
	case api.KindChat:
		return e.serveChat(ctx, req, sink)
	case api.KindCompletion:
		return e.serveCompletion(ctx, req, sink)
	case api.KindEmbeddings:
		return e.serveEmbeddings(ctx, req, sink)
	case api.KindRerank:
		reply, fail := e.sim.rerank(ctx, req.Model, req.Body)
		if fail != nil {
			return fail
		}
		return sendBody(ctx, sink, reply.body, reply.result)
	case api.KindImages:
		reply, fail := e.sim.generateImages(ctx, req.Model, req.Body)
		if fail != nil {
			return fail
		}
		return sendBody(ctx, sink, reply.body, reply.result)
	case api.KindTranscription:
		return e.serveTranscription(ctx, req, sink)
	case api.KindSpeech:
		return e.serveSpeech(ctx, req, sink)
	}
	return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest,
		fmt.Sprintf("the simulated engine does not serve %q requests", req.Kind))
}

func (e *Engine) serveChat(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	j, fail := e.sim.prepareChat(req.Model, req.Body, inProcessReasoning)
	if fail != nil {
		return fail
	}
	return e.serveJob(ctx, j, req.Stream, sink, j.render.completion)
}

// serveJob runs a planned chat or text completion: streamed as the
// renderer's chunks, or answered whole as render makes the reply.
func (e *Engine) serveJob(ctx context.Context, j *job, stream bool, sink engine.Sink, render func([]*plan) object) *api.Result {
	var send sendFunc
	if stream {
		send = func(ctx context.Context, i int, final bool, _ *stats) error {
			return j.sendStep(i, final, func(data []byte) error { return sink.Event(ctx, data) })
		}
	}
	out, st := e.sim.run(ctx, j, send)
	switch out {
	case outcomeCancelled:
		return engine.Cancelled()
	case outcomeFailed:
		return directiveFailure(j.dir.failCode, stream && st.sent > 0)
	case outcomeCut:
		return engine.CutOff(nil)
	}
	if !stream {
		data, err := json.Marshal(render(j.plans))
		if err != nil {
			return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode completion: "+err.Error())
		}
		if err := sink.Body(ctx, data); err != nil {
			return engine.Cancelled()
		}
	}
	return j.result(&st)
}

func (e *Engine) serveEmbeddings(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	reply, fail := e.sim.embed(ctx, req.Model, req.Body)
	if fail != nil {
		return fail
	}
	data, err := json.Marshal(reply.body)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode embeddings: "+err.Error())
	}
	if err := sink.Body(ctx, data); err != nil {
		return engine.Cancelled()
	}
	return reply.result
}

// sendBody answers with v as JSON and reports res.
func sendBody(ctx context.Context, sink engine.Sink, v any, res *api.Result) *api.Result {
	data, err := json.Marshal(v)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode answer: "+err.Error())
	}
	if err := sink.Body(ctx, data); err != nil {
		return engine.Cancelled()
	}
	return res
}
