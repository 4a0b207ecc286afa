package server

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
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

// relay is one inference request on its way through a worker: where it is,
// what came back, and what it cost.
type relay struct {
	s         *Server
	kind      string // link kind: api.KindChat, KindEmbeddings, KindTranscription or KindSpeech
	need      fleet.Need
	header    []byte
	body      []byte
	requestID string
	keyID     string
	stream    bool
	chat      *chat.Request // nil for other kinds
	model     *api.Model    // metadata of the requested model, when known
	// e2e relays a sealed request: the worker's output is passed on as
	// it is, counted by the chunk, and nothing is estimated from it.
	e2e bool
	// finished is set by done, which the first caller runs.
	finished bool

	// upload, when set, streams the body instead (an audio file), opened
	// afresh for each worker tried.
	upload func() (io.Reader, error)
	// render turns the worker's answer into the reply and its content
	// type; nil for chat and embeddings, whose JSON is completed as is.
	render func(body []byte) (string, []byte, error)
	// noKeepAlive holds a reply that may not begin before the answer (raw
	// audio, subtitles) from starting early to keep the connection alive.
	noKeepAlive bool
	// shape turns a failure into the answer the endpoint gives for it
	// (moderation's own codes); nil keeps it.
	shape func(error) error
	// lateBody is the body of a failure after a kept-alive reply started;
	// nil is lateErrorBody.
	lateBody func(error) []byte

	// ctx ends when the client goes away, the request runs out of time, or
	// it is over.
	ctx     context.Context
	cancel  context.CancelFunc
	watch   *watchEntry
	entry   *usage.Entry
	started time.Time

	lease     *fleet.Lease
	current   atomic.Pointer[fleet.WorkerInfo] // read by the handler while a goroutine relays
	st        *link.Stream
	attempts  int
	lastErr   error
	queueWait time.Duration
	openedAt  time.Time

	// Audio: the length of the file sent or the speech made, and the
	// format read from the file's content.
	audioSeconds float64
	audioFormat  string
	// verdicts are a moderation check's results, for its usage row.
	verdicts []api.ModerationResult

	// What came back.
	res              *api.Result
	outChars         int // characters of text relayed, for estimates
	firstToken       time.Time
	content          strings.Builder
	contentTruncated bool
	hadReasoning     bool
	toolCalls        bool
	finish           string
	notice           *api.Notice
	chunkID          string
}

// newRelay starts a request's journey; params are the settings of a kind
// whose body is not JSON (nil otherwise).
func (s *Server) newRelay(c *call, kind, model string, stream bool, params json.RawMessage) *relay {
	r := &relay{
		s: s, kind: kind, requestID: c.requestID, keyID: c.principal.KeyID, stream: stream,
		started: time.Now(),
		need: fleet.Need{
			OrgID: c.principal.OrgID, Model: model, Capability: capabilityOf(kind),
			Pin: string(c.ctx.Request.Header.Peek("X-Svc-Worker-Id")),
		},
	}
	r.header, _ = json.Marshal(api.LinkRequest{RequestID: c.requestID, Kind: kind, Model: model, Stream: stream, Params: params})
	r.ctx, r.cancel = context.WithTimeout(context.Background(), s.timing.MaxDuration)
	r.watch = s.watch.add(c.ctx.Conn(), r.cancel)
	r.entry = s.inflight.Start(c.principal.OrgID, c.requestID, model, rowKind(kind), stream, r.started)
	return r
}

func capabilityOf(kind string) string {
	switch kind {
	case api.KindEmbeddings:
		return api.CapEmbeddings
	case api.KindTranscription:
		return api.CapTranscription
	case api.KindSpeech:
		return api.CapSpeech
	case api.KindModeration:
		return api.CapModeration
	}
	return api.CapChat
}

func rowKind(kind string) string {
	switch kind {
	case api.KindEmbeddings:
		return api.RequestEmbeddings
	case api.KindTranscription:
		return api.RequestAudio
	case api.KindSpeech:
		return api.RequestSpeech
	case api.KindModeration:
		return api.RequestModeration
	}
	return api.RequestChat
}

// affinity names a conversation by its model and opening messages, which
// later turns repeat: they then prefer the worker that may hold the prefix
// in its cache.
func affinity(model string, messages []json.RawMessage) string {
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

// filterWith has the request checked on its worker with the moderation
// model (content filtering): only a worker with both models and a release
// that moderates may take it.
func (r *relay) filterWith(moderator string) {
	r.need.Moderator, r.need.Feature = moderator, api.FeatureModeration
	var h api.LinkRequest
	_ = json.Unmarshal(r.header, &h)
	h.ContentFilter = moderator
	r.header, _ = json.Marshal(h)
}

// done ends the request: off the in-flight list, into the usage log.
// failure is what the client was answered with, nil on success.
func (r *relay) done(failure error) {
	if r.finished {
		return
	}
	r.finished = true
	r.s.watch.remove(r.watch)
	r.cancel()
	r.s.inflight.Finish(r.entry)
	r.s.recordUsage(r, failure)
}

// acquire gets a slot on a worker not yet tried.
func (r *relay) acquire() error {
	l, err := r.s.fleet.Acquire(r.ctx, r.need)
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctxError()
		}
		// On a retry the failure the client is owed is the one that
		// happened, naming its worker: that no other worker can take
		// the request (none left, none online, all busy) is why it is
		// not retried, not why it failed.
		if r.lastErr != nil {
			return r.lastErr
		}
		return err
	}
	r.attempts++
	r.lease = l
	r.st = nil
	r.queueWait += l.QueueWait
	r.current.Store(&l.Worker)
	r.entry.Assign(l.Worker.ID, l.Worker.Name)
	return nil
}

// open starts the request on the leased worker.
func (r *relay) open() error {
	var st *link.Stream
	var err error
	if r.upload != nil {
		var body io.Reader
		if body, err = r.upload(); err != nil {
			return err
		}
		st, err = r.lease.OpenReader(r.ctx, r.header, body)
	} else {
		st, err = r.lease.Open(r.ctx, r.header, r.body)
	}
	if err != nil {
		return err
	}
	r.st = st
	r.openedAt = time.Now()
	return nil
}

// failed releases the lease after a failure with cause and reports
// whether another worker may be tried.
func (r *relay) failed(o fleet.Outcome, cause error) bool {
	r.lastErr = cause
	r.lease.Release(o)
	r.need.Exclude = append(r.need.Exclude, r.lease.Worker.ID)
	// Waiting again: a keep-alive reply starting now names no worker.
	r.current.Store(nil)
	r.entry.Assign("", "")
	return r.attempts < maxAttempts && r.ctx.Err() == nil
}

// ctxError is the answer for a request whose context ended: the client
// left (499), or the request ran out of time (504).
func (r *relay) ctxError() error {
	if errors.Is(r.ctx.Err(), context.DeadlineExceeded) {
		return &api.Error{Status: http.StatusGatewayTimeout, Code: "timeout",
			Message: "The request ran longer than " + r.s.timing.MaxDuration.String() + "; split it or shorten it"}
	}
	return errClientGone
}

var errClientGone = &api.Error{Status: 499, Message: "Client disconnected"}

// clientGone stops the worker for a client that left.
func (r *relay) clientGone() {
	if r.st != nil {
		r.st.Reset()
	}
	if r.lease != nil {
		r.lease.Release(fleet.Neutral)
	}
}

// lostError is the 503 for a request whose worker went away.
func (r *relay) lostError(err error) error {
	var lost *fleet.LostError
	name := r.lease.Worker.Name + " (" + r.lease.Worker.ID + ")"
	if errors.As(err, &lost) {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "worker_lost", RetryAfter: time.Second,
			Message: "Worker " + name + " disconnected while handling the request and did not return in time; retry"}
	}
	return &api.Error{Status: http.StatusServiceUnavailable, Code: "worker_lost", RetryAfter: time.Second,
		Message: "The response from worker " + name + " could not be relayed; retry", Err: err}
}

// settle records the worker's final result and frees its slot; it returns
// the client's error when the result is a failure.
func (r *relay) settle(res *api.Result) error {
	r.res = res
	r.lease.Release(outcome(res))
	if res.Status != http.StatusOK {
		return resultError(res)
	}
	return nil
}

// resultError is the error for a worker's failed result.
func resultError(res *api.Result) error {
	e := &api.Error{Status: res.Status, Message: "the worker failed"}
	if res.Error != nil {
		e.Message, e.Type, e.Code = res.Error.Message, res.Error.Type, res.Error.Code
	}
	if e.Status < 400 || e.Status > 599 {
		e.Status = http.StatusBadGateway
	}
	if e.Status == http.StatusServiceUnavailable {
		e.RetryAfter = time.Second
	}
	// The private-inference codes travel in X-Svc-Error-Code too.
	if e.Code == api.CodeNoPrivateInferenceWorker {
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
	if err := json.Unmarshal(msg, &res); err != nil || res.Status == 0 {
		return &api.Result{Status: http.StatusBadGateway, Error: &api.ResultError{
			Message: "the worker's result was lost in transit", Type: api.TypeUpstream}}
	}
	return &res
}

var (
	errIdle     = errors.New("no output yet")
	errTooLarge = errors.New("the worker's answer is larger than the gateway relays")
)

// readMessage reads one whole message, waiting at most wait for it to
// begin (0 waits as long as ctx lives). errIdle means nothing came.
func (r *relay) readMessage(wait time.Duration) (link.Type, []byte, error) {
	ctx := r.ctx
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(r.ctx, wait)
		defer cancel()
	}
	f, err := r.st.Recv(ctx)
	if err != nil {
		if wait > 0 && errors.Is(err, context.DeadlineExceeded) && r.ctx.Err() == nil {
			return 0, nil, errIdle
		}
		return 0, nil, err
	}
	if !f.More() {
		return f.Type, f.Payload, nil
	}
	msg := append([]byte(nil), f.Payload...)
	for f.More() {
		// The rest of a started message follows at once; do not cut it.
		if f, err = r.st.Recv(r.ctx); err != nil {
			return 0, nil, err
		}
		msg = append(msg, f.Payload...)
		if len(msg) > maxResponse {
			return 0, nil, errTooLarge
		}
	}
	return f.Type, msg, nil
}
