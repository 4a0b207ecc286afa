// Package relay runs inference requests on the fleet's workers: it takes a
// slot, opens the request on the worker's link, moves it to another worker
// when one fails before answering, keeps a slow reply's connection alive,
// completes the answer with what the gateway owes every reply, and turns
// each request into its usage row. It knows nothing of the HTTP server in
// front of it: a unary answer comes back as bytes, a stream is written to
// an EventWriter.
package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/tracing"
	"github.com/svc-dev/svc/internal/usage"
)

const (
	// maxAttempts bounds how many workers one request is tried on.
	maxAttempts = 3
	// maxResponse bounds a non-streaming answer.
	maxResponse = 64 << 20
	// maxContent bounds the reply text kept to judge structured output.
	maxContent = 1 << 20
)

// Timing holds the relay's clocks; tests shorten them.
type Timing struct {
	// WorkerWait is how long a streaming request waits for a worker before
	// its response starts without worker headers.
	WorkerWait time.Duration
	// FirstWait is how long a streaming request with a worker waits for
	// the first output, so failures known at once stay plain HTTP errors.
	FirstWait time.Duration
	// KeepAliveAfter is when a non-streaming reply still without an answer
	// starts, to keep the connection alive.
	KeepAliveAfter time.Duration
	// KeepAliveEvery spaces keep-alive bytes and comments.
	KeepAliveEvery time.Duration
	// MaxDuration bounds one request.
	MaxDuration time.Duration
}

func (t *Timing) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&t.WorkerWait, time.Second)
	set(&t.FirstWait, time.Second)
	set(&t.KeepAliveAfter, 80*time.Second)
	set(&t.KeepAliveEvery, 15*time.Second)
	set(&t.MaxDuration, 30*time.Minute)
}

// Fleet hands out worker slots.
type Fleet interface {
	Acquire(ctx context.Context, need fleet.Need) (*fleet.Lease, error)
}

// Recorder keeps usage rows.
type Recorder interface {
	Record(orgID string, row api.UsageRow)
}

// Config is what a Relay is built from.
type Config struct {
	Fleet    Fleet
	Usage    Recorder
	InFlight *usage.Tracker
	Timing   Timing
	Logger   *slog.Logger
	// Tracer makes each request's span; nil traces nothing.
	Tracer trace.Tracer
}

// Relay runs requests on the fleet. One serves the whole gateway.
type Relay struct {
	fleet    Fleet
	usage    Recorder
	inflight *usage.Tracker
	timing   Timing
	log      *slog.Logger
	tracer   trace.Tracer

	// aborted is set once Abort ran, and tells a call cancelled by it
	// from one whose client left.
	aborted atomic.Bool
}

// New returns a relay.
func New(cfg Config) *Relay {
	cfg.Timing.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.InFlight == nil {
		cfg.InFlight = usage.NewTracker()
	}
	return &Relay{fleet: cfg.Fleet, usage: cfg.Usage, inflight: cfg.InFlight, timing: cfg.Timing, log: cfg.Logger,
		tracer: cfg.Tracer}
}

// ErrShuttingDown is what a call that Abort ended answers its client.
var ErrShuttingDown error = &api.Error{Kind: api.KindUnavailable, Code: api.CodeShuttingDown, RetryAfter: time.Second,
	Message: "The gateway shut down before the response was complete; retry"}

// Abort ends every call still running, when a server's drain ran out of
// time: each answers its client ErrShuttingDown, a stream with its error
// event, while the connection is still there to take it, stops its
// worker and writes its row. It returns how many it ended.
func (rl *Relay) Abort() int {
	rl.aborted.Store(true)
	return rl.inflight.StopAll()
}

// Timing returns the relay's clocks, defaults filled in.
func (rl *Relay) Timing() Timing { return rl.timing }

// Request is one inference request, checked and ready to run.
type Request struct {
	ID    string // the request id, X-Request-Id
	OrgID string
	KeyID string
	// Kind is the link kind: api.KindChat, KindEmbeddings, ...
	Kind   string
	Model  string
	Stream bool
	// Params are the settings of a kind whose body is not JSON.
	Params json.RawMessage
	// Pin restricts the request to one worker (X-Svc-Worker-Id).
	Pin string
	// Affinity names the conversation; see Affinity.
	Affinity string
	// ContentFilter names the moderation model the request is checked with
	// on its worker; only a worker with both models may take it.
	ContentFilter string
	// Feature is a protocol feature the worker must have.
	Feature string
	// E2E relays a sealed request: the worker's output is passed on as it
	// is, counted by the chunk, and nothing is estimated from it.
	E2E bool
	// Traceparent and Tracestate are the client's W3C trace context: the
	// request's span continues its trace. Read only when tracing is on.
	Traceparent string
	Tracestate  string
	// Started is when the request began, for a refusal's row (Refuse):
	// an upload refused once it was read began before the refusal. Zero
	// is the moment of the refusal.
	Started time.Time
	// Departed, when set, is asked why a client that is no longer there
	// went: nil when it left (499), else the failure to record instead.
	// A forwarded request's front may have lost its link to this replica
	// and answered its client itself.
	Departed func() error

	// Body is sent to the worker; Upload, when set, streams it instead
	// (an audio file), opened afresh for each worker tried.
	Body   []byte
	Upload func() (io.Reader, error)

	// Chat is the parsed chat request (nil for other kinds): its prompt
	// size for estimates, its response format for notices.
	Chat *chat.Request
	// PromptChars is the prompt's size, in characters, of a request that
	// is not chat (a text completion): what a cut-short stream's prompt
	// tokens are estimated from.
	PromptChars int
	// ModelInfo is the requested model's metadata, when known.
	ModelInfo *api.Model
	// AudioSeconds and AudioFormat describe an uploaded audio file.
	AudioSeconds float64
	AudioFormat  string

	// Render turns the worker's answer into the reply; nil completes the
	// JSON of a chat or embeddings answer.
	Render func(Answer) (Output, error)
	// Translate, when set, puts the completed JSON answer into the shape
	// of the client's API (Anthropic's messages, the responses API). An
	// answer it cannot translate is the worker's bad reply, and is
	// recorded as what the client is answered.
	Translate func([]byte) ([]byte, error)
	// NoKeepAlive holds a reply that may not begin before the answer (raw
	// audio, subtitles) from starting early to keep the connection alive.
	NoKeepAlive bool
	// Shape turns a failure into the answer the endpoint gives for it
	// (moderation's own codes); nil keeps it.
	Shape func(error) error
}

// Answer is a worker's complete non-streaming answer, for a Render.
type Answer struct {
	Body   []byte
	Worker fleet.WorkerInfo
	// Svc is the reply's svc object: the worker and the request id.
	Svc json.RawMessage
}

// Output is a rendered reply and what it tells the usage row.
type Output struct {
	ContentType string
	Body        []byte
	// Verdicts are a moderation check's results.
	Verdicts []api.ModerationResult
	// Images is how many images an image generation made.
	Images int
	// SpeechSeconds is the length of the audio a speech request made.
	SpeechSeconds float64
}

// BadReply is the 502 for a worker answer the gateway cannot use.
func BadReply(w fleet.WorkerInfo, want string, err error) error {
	return &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply, Err: err,
		Message: "worker " + w.Name + " did not answer with " + want}
}

// Affinity names a conversation by its model and opening messages, which
// later turns repeat: they then prefer the worker that may hold the prefix
// in its cache.
func Affinity(model string, messages []json.RawMessage) string {
	if len(messages) == 0 {
		return ""
	}
	h := fnv.New64a()
	h.Write([]byte(model))
	for _, m := range messages[:min(2, len(messages))] {
		h.Write([]byte{0})
		h.Write(m)
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// Call is one request on its way through a worker: where it is, what came
// back, and what it cost.
type Call struct {
	rl     *Relay
	req    Request
	need   fleet.Need
	header []byte

	// ctx ends when the client goes away, the request runs out of time,
	// or it is over. A call outlives the handler that started it (a
	// stream's body is written after the handler returns), so it keeps
	// its own context rather than borrowing one.
	ctx     context.Context
	cancel  context.CancelFunc
	entry   *usage.Entry
	started time.Time

	// span is the request's span, nil when tracing is off; it ends with
	// the usage row, which knows everything it reports.
	span trace.Span

	endMu    sync.Mutex
	finished bool
	onEnd    []func()

	lease     *fleet.Lease
	current   atomic.Pointer[fleet.WorkerInfo] // read by the transport while a goroutine relays
	st        *link.Stream
	late      <-chan struct{} // the lease's Late; nil once the request no longer moves for it
	wait      *time.Timer     // bounds readMessage's waits; made by the first that needs it
	attempts  int
	lastErr   error
	queueWait time.Duration
	openedAt  time.Time

	out Output // what Render made of the answer

	// What came back.
	res      *api.Result
	outChars int // characters of text relayed, for estimates
	// received is the text, in characters, that the client of a stream
	// it left received (cutShort): what its estimate is made from.
	received   int
	cutShort   bool
	firstToken time.Time
	// sealedFinal: a sealed stream's final chunk went to the client,
	// which then has the whole answer and reads nothing after it.
	sealedFinal bool
	// first is how the answer's first choice went, and others how the
	// rest did when the request asked for several (n), made at once
	// for all of them the first time one is seen.
	first   choiceOutcome
	others  []choiceOutcome
	notice  *api.Notice
	chunkID string
	// chunkCreated is the created of the engine's chunks, which the
	// chunks the gateway adds repeat; 0 until one came.
	chunkCreated int64
	chunks       chunkScan // reads each chunk, reused
	batch        [][]byte  // a stream's chunks written together, reused
	batchChars   []int     // outChars after each of them, reused
}

// choiceOutcome is how one choice of an answer went: what its notice is
// judged on.
type choiceOutcome struct {
	finish string
	// content is the choice's text, kept only when the request asked for
	// JSON, the one case it is judged.
	content          strings.Builder
	contentTruncated bool
	// hadContent is whether the choice had text other than white space,
	// which content, kept only for structured output, cannot tell.
	hadContent   bool
	hadReasoning bool
	toolCalls    bool
}

// choices is how many the request asked for.
func (c *Call) choices() int {
	if c.req.Chat == nil || c.req.Chat.Choices < 1 {
		return 1
	}
	return c.req.Chat.Choices
}

// choice is the outcome of the answer's choice of index i. An index the
// request did not ask for counts as the first's, as every choice did while
// one was all a request could ask for.
func (c *Call) choice(i int) *choiceOutcome {
	n := c.choices()
	if i <= 0 || i >= n {
		return &c.first
	}
	if c.others == nil {
		c.others = make([]choiceOutcome, n-1)
	}
	return &c.others[i-1]
}

// eachChoice calls f with the outcome of each choice, in index order.
func (c *Call) eachChoice(f func(*choiceOutcome)) {
	f(&c.first)
	for i := range c.others {
		f(&c.others[i])
	}
}

// Start puts a request on the in-flight list and readies it to run with
// Unary or Stream.
func (rl *Relay) Start(req Request) *Call {
	c := &Call{rl: rl, req: req, started: time.Now(), need: NeedOf(req)}
	c.startSpan()
	c.header = c.headerOf()
	c.ctx, c.cancel = context.WithTimeout(context.Background(), rl.timing.MaxDuration)
	c.entry = rl.inflight.Start(req.OrgID, req.ID, req.Model, rowKind(req.Kind), req.Stream, c.started, c.cancel)
	if req.Pin != "" {
		// Waiting for its one worker, it is that worker's: listed under
		// it (inflight?worker_id=), as counted in its queue_depth.
		c.entry.Wait(req.Pin)
	}
	if req.AudioSeconds > 0 {
		c.entry.SetAudioSeconds(req.AudioSeconds)
	}
	return c
}

// Refuse records a request turned away before it ran (a prompt too long
// for the model, say): it gets its usage row like any other.
func (rl *Relay) Refuse(req Request, err error) {
	started := req.Started
	if started.IsZero() {
		started = time.Now()
	}
	c := &Call{rl: rl, req: req, started: started, need: NeedOf(req)}
	c.startSpan()
	rl.record(c, err)
}

// NeedOf is what req needs from a worker.
func NeedOf(req Request) fleet.Need {
	n := fleet.Need{OrgID: req.OrgID, Model: req.Model, Capability: capabilityOf(req.Kind),
		Pin: req.Pin, Affinity: req.Affinity, Feature: req.Feature,
		Whole: req.Kind == api.KindImages || req.Chat != nil && req.Chat.Images > 0}
	if req.ContentFilter != "" {
		n.Moderator, n.Feature = req.ContentFilter, api.FeatureModeration
	}
	// Five characters a token underestimates nearly any text: a worker
	// is passed over only when the prompt surely does not fit it.
	switch {
	case req.Chat != nil:
		n.PromptTokens = req.Chat.PromptChars / 5
	case req.Kind == api.KindCompletion:
		n.PromptTokens, n.PromptField = req.PromptChars/5, "prompt"
	}
	return n
}

func (c *Call) headerOf() []byte {
	req := &c.req
	h := api.LinkRequest{RequestID: req.ID, Kind: req.Kind, Model: req.Model, Stream: req.Stream,
		Params: req.Params, ContentFilter: req.ContentFilter, E2E: req.E2E}
	if req.Chat != nil {
		h.AnswerMaxTokens = req.Chat.AnswerCap()
	}
	if c.span != nil {
		h.Traceparent, h.Tracestate = tracing.Context(c.span.SpanContext())
	}
	return h.AppendJSON(make([]byte, 0, 128))
}

// Cancel abandons the call: the client went away. The worker is stopped
// and the request ends as a 499.
func (c *Call) Cancel() { c.cancel() }

// OnEnd runs f when the call ends, after its usage row is queued.
func (c *Call) OnEnd(f func()) {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	if c.finished {
		f()
		return
	}
	c.onEnd = append(c.onEnd, f)
}

// Worker is the worker now serving the call, nil while it waits for one.
func (c *Call) Worker() *fleet.WorkerInfo { return c.current.Load() }

// LastWorker is the worker the call ran on last, nil if none took it: the
// worker its usage row names, and whose failure a failed call answers
// with. It is read once the call has ended.
func (c *Call) LastWorker() *fleet.WorkerInfo {
	if c.lease == nil {
		return nil
	}
	w := c.lease.Worker
	return &w
}

func capabilityOf(kind string) string {
	switch kind {
	case api.KindEmbeddings:
		return api.CapEmbeddings
	case api.KindTranscription, api.KindTranscriptionLive:
		return api.CapTranscription
	case api.KindSpeech:
		return api.CapSpeech
	case api.KindModeration:
		return api.CapModeration
	case api.KindRerank:
		return api.CapRerank
	case api.KindImages:
		return api.CapImageGeneration
	}
	return api.CapChat
}

func rowKind(kind string) string {
	switch kind {
	case api.KindEmbeddings:
		return api.RequestEmbeddings
	case api.KindTranscription, api.KindTranscriptionLive:
		return api.RequestAudio
	case api.KindSpeech:
		return api.RequestSpeech
	case api.KindModeration:
		return api.RequestModeration
	case api.KindRerank:
		return api.RequestRerank
	case api.KindImages:
		return api.RequestImages
	case api.KindCompletion:
		return api.RequestCompletion
	}
	return api.RequestChat
}

// done ends the request: off the in-flight list, into the usage log.
// failure is what the client was answered with, nil on success.
func (c *Call) done(failure error) {
	c.endMu.Lock()
	if c.finished {
		c.endMu.Unlock()
		return
	}
	c.finished = true
	hooks := c.onEnd
	c.onEnd = nil
	c.endMu.Unlock()
	if failure != nil && c.req.Departed != nil && api.ErrorOf(failure).Kind == api.KindClientGone {
		if why := c.req.Departed(); why != nil {
			failure = why
		}
	}
	c.cancel()
	c.rl.inflight.Finish(c.entry)
	c.rl.record(c, failure)
	for _, f := range hooks {
		f()
	}
}

// acquire gets a slot on a worker not yet tried.
func (c *Call) acquire() error {
	start := time.Now()
	l, err := c.rl.fleet.Acquire(c.ctx, c.need)
	if err != nil {
		// Refused after the hold, the request waited all the same.
		c.queueWait += time.Since(start)
		if c.ctx.Err() != nil {
			return c.ctxError()
		}
		// On a retry the failure the client is owed is the one that
		// happened, naming its worker: that no other worker can take
		// the request (none left, none online, all busy) is why it is
		// not retried, not why it failed.
		if c.lastErr != nil {
			return c.lastErr
		}
		return err
	}
	c.take(l)
	return nil
}

// take makes l the call's lease.
func (c *Call) take(l *fleet.Lease) {
	c.attempts++
	c.lease = l
	c.st = nil
	c.late = l.Late()
	c.queueWait += l.QueueWait
	c.current.Store(&l.Worker)
	c.entry.Assign(l.Worker.ID, l.Worker.Name)
}

// moveLate moves a request that has had no output off a worker whose
// heartbeats went late (its process may be frozen) when another worker
// takes it now, within the queue hold. Otherwise the request stays and
// waits as it would on any worker, until the link's own timers decide:
// a worker that is only slow to report still serves it. The error is the
// failure to answer with.
func (c *Call) moveLate() error {
	c.late = nil
	if c.attempts >= maxAttempts {
		return nil
	}
	need := c.need
	need.Exclude = append(slices.Clone(c.need.Exclude), c.lease.Worker.ID)
	l, err := c.rl.fleet.Acquire(c.ctx, need)
	if err != nil {
		if c.ctx.Err() != nil {
			c.clientGone()
			return c.ctxError()
		}
		return nil
	}
	c.rl.log.Info("request moved off a worker whose heartbeats are late", "request_id", c.req.ID,
		"from", c.lease.Worker.Name, "to", l.Worker.Name)
	c.st.Reset()
	// Late heartbeats already keep the worker out of the choice while they
	// last; the move is no failure of its own to hold it back for after.
	c.failed(fleet.Neutral, &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost, RetryAfter: time.Second,
		Message: "Worker " + c.lease.Worker.Name + " (" + c.lease.Worker.ID + ") stopped reporting before it answered; retry"})
	c.take(l)
	return c.openOrMove()
}

// open starts the request on the leased worker.
func (c *Call) open() error {
	var st *link.Stream
	var err error
	if c.req.Upload != nil {
		var body io.Reader
		if body, err = c.req.Upload(); err != nil {
			return err
		}
		st, err = c.lease.OpenReader(c.ctx, c.header, body)
	} else {
		st, err = c.lease.Open(c.ctx, c.header, c.req.Body)
	}
	if err != nil {
		return err
	}
	c.st = st
	c.openedAt = time.Now()
	return nil
}

// failed releases the lease after a failure with cause and reports
// whether another worker may be tried.
func (c *Call) failed(o fleet.Outcome, cause error) bool {
	c.lastErr = cause
	c.lease.Release(o)
	c.need.Exclude = append(c.need.Exclude, c.lease.Worker.ID)
	// Waiting again: a keep-alive reply starting now names no worker.
	c.current.Store(nil)
	c.entry.Wait(c.req.Pin)
	return c.attempts < maxAttempts && c.ctx.Err() == nil
}

// ErrClientGone is the failure of a request whose client went away.
var ErrClientGone error = &api.Error{Kind: api.KindClientGone, Message: "Client disconnected"}

// ctxError is the answer for a request whose context ended: the client
// left (499), or the request ran out of time (504).
func (c *Call) ctxError() error {
	switch {
	case errors.Is(c.ctx.Err(), context.DeadlineExceeded):
		return &api.Error{Kind: api.KindTimeout, Code: api.CodeTimeout,
			Message: "The request ran longer than " + c.rl.timing.MaxDuration.String() + "; split it or shorten it"}
	case c.rl.aborted.Load():
		return ErrShuttingDown
	}
	return ErrClientGone
}

// clientGone stops the worker for a client that left.
func (c *Call) clientGone() {
	if c.st != nil {
		c.st.Reset()
	}
	if c.lease != nil {
		c.lease.Release(fleet.Neutral)
	}
}

// lostError is the 503 for a request whose worker went away.
func (c *Call) lostError(err error) error {
	var lost *fleet.LostError
	name := c.lease.Worker.Name + " (" + c.lease.Worker.ID + ")"
	if errors.As(err, &lost) {
		return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost, RetryAfter: time.Second,
			Message: "Worker " + name + " was lost while handling the request (" + lost.Reason + "); retry"}
	}
	return &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost, RetryAfter: time.Second,
		Message: "The response from worker " + name + " could not be relayed; retry", Err: err}
}

// settle records the worker's final result and frees its slot; it returns
// the client's error when the result is a failure.
func (c *Call) settle(res *api.Result) error {
	c.res = res
	c.lease.Release(outcome(res))
	if res.Status != http.StatusOK {
		return c.resultError(res)
	}
	if cold := res.Timing.ColdStart; cold != nil && *cold {
		c.lease.Loaded(res.Timing.ModelLoadMs)
	}
	return nil
}

// resultError is resultError for this call: a private request's failure
// that the worker sealed to the client is answered with it, and the
// gateway keeps the clear result, which tells only the kind of failure;
// also when it is the last of several tries, the one a retry that found
// no other worker answers with.
func (c *Call) resultError(res *api.Result) *api.Error {
	err := resultError(res)
	if c.req.E2E && len(res.Sealed) > 0 {
		if sealed, serr := c.sealedReply(res.Sealed); serr == nil {
			err.Sealed = sealed
		}
	}
	return err
}

// maxRetryAfter bounds the wait an engine may ask a client for: one that
// asks for more (a year, a figure that overflows) is no engine to wait on.
const maxRetryAfter = time.Hour

// resultError is the error for a worker's failed result. It keeps the
// status the worker gave (parseResult has made it one of the spec's): the
// engine chose it, and no kind of the gateway's says more than it does.
func resultError(res *api.Result) *api.Error {
	e := api.Relayed(res.Status, "", "", "the worker failed")
	if res.Error != nil {
		// Every error says something: a worker's that says nothing keeps
		// the gateway's own words.
		e.Message, e.Type, e.Code, e.Param = cmp.Or(res.Error.Message, e.Message), res.Error.Type, res.Error.Code, res.Error.Param
	}
	// A client told to slow down is told when to come back: the engine's
	// own figure when it gave one, up to maxRetryAfter, else a second.
	if st := e.HTTPStatus(); st == http.StatusServiceUnavailable || st == http.StatusTooManyRequests {
		e.RetryAfter = time.Second
		if res.Error != nil && res.Error.RetryAfter > 0 {
			e.RetryAfter = time.Duration(min(res.Error.RetryAfter, int(maxRetryAfter/time.Second))) * time.Second
		}
	}
	// The private-inference and moderation codes travel in
	// X-Svc-Error-Code too: a content-filtered chat's check may fail on
	// the worker (moderation_invalid_verdict, moderation_unavailable).
	switch e.Code {
	case api.CodeNoPrivateInferenceWorker, api.CodeModerationUnavailable, api.CodeModerationCapacity, api.CodeModerationInvalidVerdict:
		e.CodeHeader = true
	}
	return e
}

// outcome judges a result for the worker's health: engine and worker
// failures count, the client's own mistakes and cancels do not.
func outcome(res *api.Result) fleet.Outcome {
	switch {
	case res.Status == http.StatusOK:
		return fleet.Succeeded
	case res.Final:
		return fleet.Neutral
	case res.Retryable || res.Status == http.StatusInternalServerError || res.Status == http.StatusBadGateway ||
		res.Status == http.StatusServiceUnavailable || res.Status == http.StatusGatewayTimeout:
		return fleet.Failed
	}
	return fleet.Neutral
}

// retryable reports whether a failed result may be tried on another worker.
// Nothing has reached the client, so any failure another worker may not
// share qualifies; lasting answers (4xx, 501, 507) do not.
func retryable(res *api.Result) bool {
	if res.Final {
		return false
	}
	switch res.Status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return res.Retryable
}

func parseResult(msg []byte) *api.Result {
	var res api.Result
	if err := api.DecodeResult(msg, &res); err != nil || res.Status == 0 {
		return &api.Result{Status: http.StatusBadGateway, Error: &api.ResultError{
			Message: "the worker's result was lost in transit", Type: api.TypeUpstream}}
	}
	if st := relayedStatus(res.Status); st != res.Status {
		res.Status = st
		if res.Error != nil {
			res.Error.Type = api.TypeForStatus(st)
		}
	}
	return &res
}

// relayedStatus is the status a client is given for a worker's result of
// status: its own when the spec gives a worker's answer that status, else
// the spec's status for what it means. Clients act on the spec's codes
// (a 401 says check your key), and a worker relays whatever its engine
// answered: a hosted API's 401 or 402 is about the worker's account with
// it, not the client's key, and a status the spec does not know has no
// action a client could take.
func relayedStatus(status int) int {
	// A worker's cancelled request: the client left (nginx's 499).
	const statusClientClosed = 499
	switch status {
	case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
		http.StatusUnprocessableEntity, http.StatusTooManyRequests, statusClientClosed, http.StatusNotImplemented,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusInsufficientStorage:
		return status
	case http.StatusRequestTimeout:
		return http.StatusGatewayTimeout
	case http.StatusMethodNotAllowed:
		// The engine has no such endpoint: a lasting limitation.
		return http.StatusNotImplemented
	case http.StatusUnauthorized, http.StatusPaymentRequired, http.StatusForbidden, http.StatusProxyAuthRequired:
		return http.StatusBadGateway
	}
	if status >= 400 && status < 500 {
		return http.StatusBadRequest
	}
	// A 500 is the gateway's own fault in the spec; an engine's, or any
	// other, is no usable response from the worker.
	return http.StatusBadGateway
}

var (
	errIdle       = errors.New("no output yet")
	errLate       = errors.New("the worker's heartbeats are late")
	errTooLarge   = errors.New("the worker's answer is larger than the gateway relays")
	errUnfinished = errors.New("the worker left a message unfinished")
)

// messageRest bounds the wait for each further frame of a message begun:
// a worker sends them one after another, and while one is awaited the
// client hears nothing, keep-alives included.
const messageRest = 15 * time.Second

// readMessage reads one whole message, waiting at most wait for it to
// begin (0 waits as long as the call lives). errIdle means nothing came.
// A movable read (the request has had no output) also ends with errLate
// when the worker's heartbeats go late.
func (c *Call) readMessage(wait time.Duration, movable bool) (link.Type, []byte, error) {
	return c.readMessageIn(c.ctx, wait, movable)
}

// sealedEndWait bounds the wait for the worker's result of a sealed stream
// whose client left once it had the final chunk: the result follows that
// chunk at once.
const sealedEndWait = 2 * time.Second

// sealedEnd reads the worker's result of a sealed stream whose client left
// once it had the final chunk, which was on its way: nil when it does not
// come within sealedEndWait.
func (c *Call) sealedEnd() []byte {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), sealedEndWait)
	defer cancel()
	for {
		typ, msg, err := c.readMessageIn(ctx, 0, false)
		if err != nil {
			return nil
		}
		if typ == link.TypeEnd {
			return msg
		}
	}
}

// readMessageIn is readMessage under ctx rather than the call's context.
func (c *Call) readMessageIn(ctx context.Context, wait time.Duration, movable bool) (link.Type, []byte, error) {
	var expire <-chan time.Time
	if wait > 0 {
		// One timer for the call, reset for each wait: a stream waits for
		// each chunk, and a context per chunk cost one of its larger parts.
		if c.wait == nil {
			c.wait = time.NewTimer(wait)
		} else {
			c.wait.Reset(wait)
		}
		defer c.wait.Stop()
		expire = c.wait.C
	}
	var late <-chan struct{}
	if movable && c.late != nil {
		late = c.late
		select {
		case <-late:
			return 0, nil, errLate
		default:
		}
	}
	f, err := c.st.RecvWithin(ctx, late, expire)
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, link.ErrInterrupted):
			return 0, nil, errLate
		case errors.Is(err, link.ErrExpired):
			return 0, nil, errIdle
		}
		return 0, nil, err
	}
	if !f.More() {
		return f.Type, f.Payload, nil
	}
	msg := append([]byte(nil), f.Payload...)
	rest := time.NewTimer(messageRest)
	defer rest.Stop()
	for f.More() {
		// The rest of a started message follows at once; a wait for it is
		// not cut short by the call's own waits, only by messageRest.
		rest.Reset(messageRest)
		if f, err = c.st.RecvWithin(ctx, nil, rest.C); err != nil {
			if errors.Is(err, link.ErrExpired) {
				c.st.Reset()
				return 0, nil, errUnfinished
			}
			return 0, nil, err
		}
		msg = append(msg, f.Payload...)
		if len(msg) > maxResponse {
			return 0, nil, errTooLarge
		}
	}
	return f.Type, msg, nil
}
