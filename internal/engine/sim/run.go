package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// simulator is what both faces share: the configuration and the models
// with their load state. It holds no per-request state.
type simulator struct {
	cfg    Config
	models *catalog
}

func newSimulator(cfg Config) *simulator {
	cfg = cfg.withDefaults()
	specs := slices.Clone(cfg.Models)
	for i := range specs {
		if slices.Contains(cfg.Incomplete, specs[i].ID) {
			specs[i].Incomplete = &api.Incomplete{Missing: []string{missingFile(&specs[i])}}
		}
	}
	return &simulator{cfg: cfg, models: newCatalog(specs)}
}

// missingFile is the file a model listed as not fully installed lacks:
// what such a model most often lacks on a real engine.
func missingFile(spec *ModelSpec) string {
	if spec.Has(api.CapImageGeneration) {
		return "vae/diffusion_pytorch_model.safetensors"
	}
	return "mmproj.gguf"
}

// job is one chat request, planned and ready to run.
type job struct {
	model *model
	plan  *plan // the first choice's: the one a request for one gets
	// plans are every choice's, in index order, plans[0] == plan.
	plans    []*plan
	dir      directives
	seed     seed
	render   renderer
	stream   bool
	usage    bool          // stream_options.include_usage
	ttft     time.Duration // simulated prompt processing
	tps      float64       // reported rate; 0 when unpaced
	interval time.Duration // time between tokens; 0 when unpaced
}

// prepareChat checks and plans a chat request. reasoningNames are the
// fields reasoning goes on in this face.
func (s *simulator) prepareChat(modelID string, body []byte, reasoningNames []string) (*job, *api.Result) {
	req, err := parseChatRequest(body)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	return s.prepare(modelID, req, reasoningNames)
}

// prepare plans a checked request on its model: a guard's verdict, or
// generated text steered by the directives of the last user message.
func (s *simulator) prepare(modelID string, req *chatRequest, reasoningNames []string) (*job, *api.Result) {
	if modelID == "" {
		modelID = req.Model
	}
	m, fail := s.lookup(modelID, api.CapChat)
	if fail != nil {
		return nil, fail
	}
	sd := newSeed(m.spec.ID, req.messagesJSON, req.Seed)
	var (
		dir directives
		p   *plan
	)
	if m.spec.Guard != NotGuard {
		dir, p, fail = guardReply(&m.spec, req)
	} else {
		var err error
		if dir, err = parseDirectives(req.lastUserText()); err != nil {
			return nil, badRequest(err.Error())
		}
		p, fail = buildPlan(&m.spec, req, &dir, sd)
	}
	if fail != nil {
		return nil, fail
	}
	plans := []*plan{p}
	for i := 1; i < req.choices(); i++ {
		if m.spec.Guard != NotGuard {
			plans = append(plans, p) // a verdict is the same each time
			continue
		}
		q, fail := buildPlan(&m.spec, req, &dir, sd.choice(i))
		if fail != nil {
			return nil, fail
		}
		plans = append(plans, q)
	}
	j := &job{
		model: m,
		plan:  p,
		plans: plans,
		dir:   dir,
		seed:  sd,
		render: renderer{
			id:             s.cfg.ID(),
			created:        s.cfg.Now().Unix(),
			model:          m.spec.ID,
			reasoningNames: reasoningNames,
		},
		stream: req.Stream,
		usage:  req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		ttft:   s.cfg.TTFT,
	}
	if dir.ttft != nil {
		j.ttft = *dir.ttft
	}
	j.tps, j.interval = dir.effectiveRate(s.cfg.TokensPerSecond)
	return j, nil
}

// completionID is a fresh random completion id (Config.ID).
func completionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// lookup finds a model that can do capability.
func (s *simulator) lookup(id, capability string) (*model, *api.Result) {
	if id == "" {
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "model: a model is required")
	}
	m, ok := s.models.lookup(id)
	if !ok {
		r := engine.Failure(http.StatusNotFound, api.TypeNotFound, fmt.Sprintf("The model %q does not exist on this simulated engine.", id))
		r.Error.Code = "model_not_found"
		return nil, r
	}
	if !m.spec.Has(capability) {
		return nil, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest,
			fmt.Sprintf("The model %q does not support %s; use %s", id, capability, endpointOf(&m.spec)))
	}
	return m, nil
}

// endpointOf is the endpoint for what a model does, to point a request
// sent to the wrong one at the right one.
func endpointOf(spec *ModelSpec) string {
	switch {
	case spec.Has(api.CapEmbeddings):
		return "/v1/embeddings"
	case spec.Has(api.CapTranscription):
		return "/v1/audio/transcriptions"
	case spec.Has(api.CapSpeech):
		return "/v1/audio/speech"
	case spec.Has(api.CapRerank):
		return "/v1/rerank"
	case spec.Has(api.CapImageGeneration):
		return "/v1/images/generations"
	}
	return "/v1/chat/completions"
}

// outcome is how a run ended.
type outcome int

const (
	outcomeDone      outcome = iota
	outcomeCancelled         // the client went away or the sink failed
	outcomeFailed            // a fail=STATUS directive
	outcomeCut               // a fail=cut directive
)

// stats are what a run measured.
type stats struct {
	loadWait time.Duration
	cold     bool
	start    time.Time // when the first token was due
	decode   time.Duration
	sent     int // chunks emitted
}

// sendFunc emits chunk i of a streamed reply; final marks the chunk that
// carries the finish reason.
type sendFunc func(ctx context.Context, i int, final bool, st *stats) error

// run plays a job out in time: load, latency, prompt processing, then one
// token per interval. send is nil for non-streaming replies, which wait
// as long but emit nothing until the end.
func (s *simulator) run(ctx context.Context, j *job, send sendFunc) (outcome, stats) {
	var st stats
	if j.dir.hang {
		<-ctx.Done()
		return outcomeCancelled, st
	}
	if j.dir.failCode != 0 && j.dir.after == 0 {
		return outcomeFailed, st // fails before anything happens
	}
	wait, cold, err := j.model.acquire(ctx, &s.cfg)
	if err != nil {
		return outcomeCancelled, st
	}
	st.loadWait, st.cold = wait, cold
	defer func() { j.model.touch(s.cfg.Now()) }()

	if err := s.cfg.Sleep(ctx, s.cfg.Latency+j.ttft); err != nil {
		return outcomeCancelled, st
	}
	n, early := j.chunkCount(), j.dir.failing()
	if early {
		n = min(j.dir.after, n)
	}
	st.start = s.cfg.Now()
	if send == nil {
		// Nothing to pace chunk by chunk: wait for the whole decode.
		if err := s.cfg.Sleep(ctx, time.Duration(max(n-1, 0))*j.interval); err != nil {
			return outcomeCancelled, st
		}
		st.sent = n
	}
	for i := 0; send != nil && i < n; i++ {
		if i > 0 && j.interval > 0 {
			// Pace against the schedule rather than sleeping a fixed
			// interval, so that timer overhead does not add up.
			due := st.start.Add(time.Duration(i) * j.interval)
			if err := s.cfg.Sleep(ctx, due.Sub(s.cfg.Now())); err != nil {
				return outcomeCancelled, st
			}
		}
		if ctx.Err() != nil {
			return outcomeCancelled, st
		}
		if err := send(ctx, i, !early && i == n-1, &st); err != nil {
			return outcomeCancelled, st
		}
		st.sent++
	}
	st.decode = s.cfg.Now().Sub(st.start)
	switch {
	case j.dir.cut:
		return outcomeCut, st
	case j.dir.failCode != 0:
		return outcomeFailed, st
	}
	return outcomeDone, st
}

// decodeTime is the decode phase of n tokens: simulated when paced,
// measured otherwise.
func (j *job) decodeTime(n int, measured time.Duration) time.Duration {
	if j.interval > 0 {
		return time.Duration(n) * j.interval
	}
	return measured
}

// rate is the reported decode rate: the configured one, else measured;
// 0 when nothing could be measured.
func (j *job) rate(st *stats) float64 {
	if j.plan.completionTokens() == 0 {
		return 0
	}
	if j.tps > 0 {
		return j.tps
	}
	if st.decode <= 0 {
		return 0
	}
	return round3(float64(j.plan.completionTokens()) / st.decode.Seconds())
}

// draft is the speculative-decoding record of a reply: draft tokens
// proposed and accepted. The acceptance rate is derived from the request,
// kept within 0.6..0.85, and is exactly accepted/drafted so that both
// faces report the same rate.
func (j *job) draft() (drafted, accepted int, ok bool) {
	if !j.model.spec.Speculative || j.plan.completionTokens() == 0 {
		return 0, 0, false
	}
	// At least four drafts, so that a whole number of accepted drafts
	// lands within the range.
	drafted = max(4, j.plan.completionTokens())
	target := 0.6 + 0.25*j.seed.unit("draft")
	lo := int(math.Ceil(0.6 * float64(drafted)))
	hi := int(math.Floor(0.85 * float64(drafted)))
	accepted = min(max(int(math.Round(target*float64(drafted))), lo), hi)
	return drafted, accepted, true
}

// result is the Result of a job that ran to the end.
func (j *job) result(st *stats) *api.Result {
	r := engine.OK()
	r.Usage = usageOf(j.plans)
	r.FinishReason = j.plan.finish
	for _, p := range j.plans {
		if p.notice != nil {
			r.Notice = p.notice
			break
		}
	}
	ttft := ms(j.ttft)
	r.Timing.TTFTMs = &ttft
	if tps := j.rate(st); tps > 0 {
		r.Timing.TokensPerSecond = &tps
	}
	if drafted, accepted, ok := j.draft(); ok {
		rate := float64(accepted) / float64(drafted)
		r.Timing.DraftAcceptanceRate = &rate
	}
	if st.cold {
		load, cold := ms(st.loadWait), true
		r.Timing.ModelLoadMs, r.Timing.ColdStart = &load, &cold
	}
	return r
}

// directiveFailure is the Result of a fail=STATUS directive. Failures
// before any output may be retried on another worker, as the engine
// contract asks of 5xx answers.
func directiveFailure(code int, outputSent bool) *api.Result {
	typ, msg := api.TypeForStatus(code), fmt.Sprintf("simulated %s (sim fail=%d)", http.StatusText(code), code)
	switch code {
	case http.StatusBadRequest:
		typ, msg = api.TypeInvalidRequest, "simulated invalid request (sim fail=400)"
	case http.StatusInternalServerError:
		typ, msg = api.TypeServer, "simulated internal server error (sim fail=500)"
	case http.StatusNotImplemented:
		typ, msg = api.TypeNotSupported, "this feature is not supported by the simulated engine (sim fail=501)"
	case http.StatusServiceUnavailable:
		typ, msg = api.TypeServiceUnavailable, "the simulated engine is temporarily unavailable (sim fail=503)"
	case http.StatusInsufficientStorage:
		typ, msg = api.TypeInsufficientMemory, "CUDA out of memory: tried to allocate 2.00 GiB (simulated by sim fail=507)"
	}
	if http.StatusText(code) == "" {
		msg = fmt.Sprintf("simulated failure with status %d (sim fail=%d)", code, code)
	}
	r := engine.Failure(code, typ, msg)
	if !outputSent {
		switch code {
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			r.Retryable = true
		}
	}
	return r
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
