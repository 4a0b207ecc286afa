package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// maxBodyBytes bounds request bodies; chat bodies with files stay far
// below it.
const maxBodyBytes = 32 << 20

// NewHandler returns the simulator as an OpenAI-compatible HTTP server:
// GET /v1/models, POST /v1/chat/completions (streaming and not),
// POST /v1/completions (streaming and not), POST /v1/embeddings,
// POST /v1/rerank, POST /v1/images/generations,
// POST /v1/audio/transcriptions, POST /v1/audio/translations,
// POST /v1/audio/speech and GET /health.
// It speaks the plain OpenAI protocol as vLLM and llama-server do, so the
// worker's openai adapter can be tested against it and benchmarks can hit
// it directly.
func NewHandler(cfg Config) http.Handler {
	return New(cfg).Handler()
}

// Handler is the HTTP face of e; it shares e's models and their load state.
func (e *Engine) Handler() http.Handler {
	h := &httpFace{sim: e.sim, reasoning: []string{e.sim.cfg.ReasoningField}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", h.models)
	mux.HandleFunc("POST /v1/chat/completions", h.chat)
	mux.HandleFunc("POST /v1/completions", h.completions)
	mux.HandleFunc("POST /v1/embeddings", h.embeddings)
	mux.HandleFunc("POST /v1/rerank", h.rerank)
	mux.HandleFunc("POST /v1/images/generations", h.images)
	mux.HandleFunc("POST /v1/audio/transcriptions", h.transcriptions)
	mux.HandleFunc("POST /v1/audio/translations", h.translations)
	mux.HandleFunc("POST /v1/audio/speech", h.speech)
	mux.HandleFunc("GET /health", h.health)
	mux.HandleFunc("/", h.notFound)
	return mux
}

type httpFace struct {
	sim *simulator
	// reasoning is the one field reasoning goes on, as a real engine
	// uses one name.
	reasoning []string
}

func (h *httpFace) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, object{{"status", "ok"}})
}

func (h *httpFace) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, engine.Failure(http.StatusNotFound, api.TypeNotFound,
		fmt.Sprintf("no route for %s %s on the simulated engine", r.Method, r.URL.Path)))
}

// models lists the models with both the vLLM (max_model_len) and the
// llama.cpp (meta.n_ctx_train) context-size fields, for the models that
// have a context window (the audio models have none).
func (h *httpFace) models(w http.ResponseWriter, _ *http.Request) {
	created := h.sim.cfg.Now().Unix()
	models := h.sim.models.all()
	data := make([]object, 0, len(models))
	for _, m := range models {
		o := object{
			{"id", m.spec.ID},
			{"object", "model"},
			{"created", created},
			{"owned_by", "svc-sim"},
		}
		if n := m.spec.ContextWindow; n > 0 {
			o = append(o, field{"max_model_len", n}, field{"meta", object{{"n_ctx_train", n}}})
		}
		data = append(data, o)
	}
	writeJSON(w, http.StatusOK, object{{"object", "list"}, {"data", data}})
}

func (h *httpFace) chat(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	j, fail := h.sim.prepareChat("", body, h.reasoning)
	if fail != nil {
		writeError(w, fail)
		return
	}
	if j.stream {
		h.stream(w, r, j)
	} else {
		h.complete(w, r, j, j.render.completion)
	}
}

// stream answers with server-sent events, one chunk per token, flushed
// as it is generated.
func (h *httpFace) stream(w http.ResponseWriter, r *http.Request, j *job) {
	sse := &sseWriter{w: w, rc: http.NewResponseController(w)}
	timings := h.sim.cfg.LlamaTimings
	send := func(_ context.Context, i int, final bool, st *stats) error {
		var extra []field
		if final && timings && !j.usage {
			extra = append(extra, field{"timings", j.llamaTimings(h.sim.cfg.Now().Sub(st.start))})
		}
		return j.sendStep(i, final, sse.data, extra...)
	}
	out, st := h.sim.run(r.Context(), j, send)
	switch out {
	case outcomeCancelled:
		return // the client is gone; there is no one to tell
	case outcomeFailed:
		res := directiveFailure(j.dir.failCode, st.sent > 0)
		if !sse.started {
			writeError(w, res)
			return
		}
		// Mid-stream failures arrive as an error frame, as llama-server
		// and vLLM send them, and the stream ends without [DONE].
		_ = sse.event(errorBody(res))
		return
	case outcomeCut:
		abort(sse.rc) // does not return
	}
	if j.usage {
		c := j.render.usageChunk(j.plans)
		if timings {
			c = append(c, field{"timings", j.llamaTimings(st.decode)})
		}
		if sse.event(c) != nil {
			return
		}
	}
	_ = sse.done()
}

// complete answers with one object, a chat.completion or a
// text_completion as render makes it.
func (h *httpFace) complete(w http.ResponseWriter, r *http.Request, j *job, render func([]*plan) object) {
	out, st := h.sim.run(r.Context(), j, nil)
	switch out {
	case outcomeCancelled:
		return
	case outcomeFailed:
		writeError(w, directiveFailure(j.dir.failCode, false))
		return
	}
	c := render(j.plans)
	if h.sim.cfg.LlamaTimings {
		c = append(c, field{"timings", j.llamaTimings(st.decode)})
	}
	if out == outcomeCut {
		// Send half the body, then drop the connection.
		data, err := json.Marshal(c)
		if err == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(data[:len(data)/2])
		}
		abort(http.NewResponseController(w)) // does not return
	}
	writeJSON(w, http.StatusOK, c)
}

func (h *httpFace) embeddings(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	reply, fail := h.sim.embed(r.Context(), "", body)
	if fail != nil {
		if r.Context().Err() == nil {
			writeError(w, fail)
		}
		return
	}
	writeJSON(w, http.StatusOK, reply.body)
}

// rerank serves POST /v1/rerank as vLLM and llama-server do.
func (h *httpFace) rerank(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	reply, fail := h.sim.rerank(r.Context(), "", body)
	if fail != nil {
		if r.Context().Err() == nil {
			writeError(w, fail)
		}
		return
	}
	writeJSON(w, http.StatusOK, reply.body)
}

// images serves POST /v1/images/generations, answering b64_json.
func (h *httpFace) images(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	reply, fail := h.sim.generateImages(r.Context(), "", body)
	if fail != nil {
		if r.Context().Err() == nil {
			writeError(w, fail)
		}
		return
	}
	writeJSON(w, http.StatusOK, reply.body)
}

// llamaTimings is llama-server's timings object. Speculative models add
// draft_n and draft_n_accepted, which llama-server sends only then.
func (j *job) llamaTimings(measured time.Duration) object {
	n, prompt := j.plan.completionTokens(), j.plan.promptTokens
	promptMs := ms(j.ttft)
	predMs := ms(j.decodeTime(n, measured))
	o := object{
		{"cache_n", 0},
		{"prompt_n", prompt},
		{"prompt_ms", promptMs},
		{"prompt_per_token_ms", round3(promptMs / float64(max(prompt, 1)))},
		{"prompt_per_second", perSecond(prompt, promptMs)},
		{"predicted_n", n},
		{"predicted_ms", predMs},
		{"predicted_per_token_ms", round3(predMs / float64(max(n, 1)))},
		{"predicted_per_second", perSecond(n, predMs)},
	}
	if drafted, accepted, ok := j.draft(); ok {
		o = append(o, field{"draft_n", drafted}, field{"draft_n_accepted", accepted})
	}
	return o
}

// perSecond is n per elapsed milliseconds, as a rate; 0 when unmeasurable.
func perSecond(n int, elapsedMs float64) float64 {
	if elapsedMs <= 0 {
		return 0
	}
	return round3(float64(n) / elapsedMs * 1000)
}

// sseWriter writes server-sent events, sending the headers with the
// first event so that failures before any output keep their status.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (s *sseWriter) event(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return s.data(data)
}

// data writes one data: frame.
func (s *sseWriter) data(data []byte) error {
	frame := make([]byte, 0, len(data)+8)
	frame = append(append(append(frame, "data: "...), data...), '\n', '\n')
	return s.write(frame)
}

func (s *sseWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) write(frame []byte) error {
	if !s.started {
		s.started = true
		hd := s.w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-cache")
		hd.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
	}
	if _, err := s.w.Write(frame); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}

// abort flushes what was written and drops the connection without ending
// the response, the way an engine that crashed mid-reply looks to its
// client. net/http recovers http.ErrAbortHandler silently.
func abort(rc *http.ResponseController) {
	_ = rc.Flush()
	panic(http.ErrAbortHandler)
}

// readBody reads a request body, bounded.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *api.Result) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, engine.Failure(http.StatusRequestEntityTooLarge, api.TypeInvalidRequest,
				fmt.Sprintf("request body larger than %d bytes", maxBodyBytes))
		}
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "read request body: "+err.Error())
	}
	return body, nil
}

// errorBody is the OpenAI error envelope of a failed result.
func errorBody(res *api.Result) object {
	var code any // null unless the failure has one
	if res.Error.Code != "" {
		code = res.Error.Code
	}
	return object{{"error", object{
		{"message", res.Error.Message},
		{"type", res.Error.Type},
		{"code", code},
	}}}
}

func writeError(w http.ResponseWriter, res *api.Result) {
	writeJSON(w, res.Status, errorBody(res))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"message":"encode response","type":"server_error","code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
