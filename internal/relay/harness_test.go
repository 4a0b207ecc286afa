package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/usage"
)

// The relay's tests run a real fleet with workers on in-memory links,
// inside a synctest bubble: minutes of keep-alives and grace periods pass
// in no time, and every wait ends exactly when the clock says.

const org = "org-1"

// harness is a fleet, a relay over it, and the usage rows it wrote.
type harness struct {
	t testing.TB
	// bubble is set when the harness runs in a synctest bubble, as every
	// test's does; a benchmark's runs on the real clock.
	bubble   bool
	f        *fleet.Fleet
	rl       *relay.Relay
	inflight *usage.Tracker
	rows     *rowLog
	ctx      context.Context
	conns    sync.WaitGroup
	// wrap, when set, wraps each worker's end of its link.
	wrap func(link.Conn) link.Conn
}

// rowLog is the relay's usage recorder.
type rowLog struct {
	mu   sync.Mutex
	rows []api.UsageRow
}

func (l *rowLog) Record(orgID string, row api.UsageRow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if orgID != org {
		panic("row for " + orgID)
	}
	l.rows = append(l.rows, row)
}

// only returns the one row recorded, failing the test otherwise.
func (h *harness) only() api.UsageRow {
	h.t.Helper()
	h.rows.mu.Lock()
	defer h.rows.mu.Unlock()
	if len(h.rows.rows) != 1 {
		h.t.Fatalf("%d usage rows, want 1: %+v", len(h.rows.rows), h.rows.rows)
	}
	return h.rows.rows[0]
}

func (h *harness) inFlight() int { return len(h.inflight.List(org, "", time.Now())) }

// timing is the production timing: the bubble's clock makes it free.
var timing = relay.Timing{WorkerWait: time.Second, FirstWait: time.Second,
	KeepAliveAfter: 80 * time.Second, KeepAliveEvery: 15 * time.Second, MaxDuration: 30 * time.Minute}

func newHarness(t *testing.T) *harness {
	h := newHarnessOf(t)
	h.bubble = true
	return h
}

// newHarnessOf is newHarness outside a synctest bubble, for a benchmark.
func newHarnessOf(t testing.TB) *harness {
	h := &harness{t: t, rows: &rowLog{}, inflight: usage.NewTracker()}
	h.f = fleet.New(fleet.Config{Hold: 2 * time.Second, Grace: 5 * time.Second})
	h.rl = relay.New(relay.Config{Fleet: h.f, Usage: h.rows, InFlight: h.inflight, Timing: timing})
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	t.Cleanup(func() {
		cancel()
		h.conns.Wait()
	})
	return h
}

// serveFunc is a worker's behaviour for one request.
type serveFunc func(ctx context.Context, st *link.Stream, req api.LinkRequest, body []byte)

// worker is a worker agent in miniature on an in-memory link.
type worker struct {
	h     *harness
	name  string
	id    string
	sess  *link.Session
	conn  *linktest.Conn
	serve serveFunc
}

func (h *harness) worker(name string, maxConc int, serve serveFunc, models ...api.Model) *worker {
	h.t.Helper()
	if len(models) == 0 {
		models = []api.Model{{ID: "chat-1", Capabilities: []string{api.CapChat}, Engine: "sim"}}
	}
	w := &worker{h: h, name: name, serve: serve}
	w.sess = link.NewSession(link.Options{Role: link.Worker, Accept: w.accept})
	h.t.Cleanup(func() { w.sess.Close(nil) })
	hello := api.Hello{Protocol: link.Protocol, Name: name, Version: "v1", MaxConcurrent: maxConc,
		SessionID: uuid.NewString(), Models: models, Features: []string{api.FeatureModeration}}
	gc, wc := linktest.Pipe()
	w.conn = wc
	h.conns.Go(func() { _ = h.f.Connect(h.ctx, org, hello, gc) })
	msg, err := wc.ReadMessage()
	if err != nil {
		h.t.Fatal(err)
	}
	fr, _, err := link.DecodeFrame(msg)
	if err != nil {
		h.t.Fatal(err)
	}
	var welcome api.Welcome
	if err := json.Unmarshal(fr.Payload, &welcome); err != nil || welcome.Error != "" {
		h.t.Fatalf("welcome %+v %v", welcome, err)
	}
	w.id = welcome.WorkerID
	var conn link.Conn = wc
	if h.wrap != nil {
		conn = h.wrap(wc)
	}
	if _, err := w.sess.Attach(conn, welcome.Streams); err != nil {
		h.t.Fatal(err)
	}
	if h.bubble {
		synctest.Wait()
	}
	return w
}

func (w *worker) accept(ctx context.Context, st *link.Stream) {
	header, body, err := st.ReadRequest(ctx)
	if err != nil {
		return
	}
	var req api.LinkRequest
	if err := json.Unmarshal(header, &req); err != nil {
		panic(err)
	}
	w.serve(ctx, st, req, body)
}

// cut breaks the worker's link for good: the worker is lost once the
// fleet's grace runs out.
func (w *worker) cut() { _ = w.conn.Close() }

// end finishes a stream with a result.
func end(ctx context.Context, st *link.Stream, res api.Result) {
	b, _ := json.Marshal(res)
	_ = st.End(ctx, b)
}

func usageOf(prompt, completion int) *api.Usage {
	return &api.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// answer is a worker that answers a chat after wait.
func answer(text string, wait time.Duration) serveFunc {
	return func(ctx context.Context, st *link.Stream, req api.LinkRequest, _ []byte) {
		if !sleep(ctx, wait) {
			return
		}
		if req.Stream {
			for _, word := range strings.Fields(text) {
				_ = st.Send(ctx, chunk(word+" ", ""))
			}
			_ = st.Send(ctx, chunk("", "stop"))
		} else {
			_ = st.Send(ctx, fmt.Appendf(nil, `{"id":"chatcmpl-w","object":"chat.completion","model":%q,`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, req.Model, text))
		}
		end(ctx, st, api.Result{Status: 200, Usage: usageOf(7, len(strings.Fields(text)))})
	}
}

// fail is a worker that answers every request with a failed result.
func fail(status int, retryable bool) serveFunc {
	return func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
		end(ctx, st, api.Result{Status: status, Retryable: retryable,
			Error: &api.ResultError{Message: fmt.Sprintf("engine said %d", status), Type: api.TypeUpstream}})
	}
}

func chunk(content, finish string) []byte {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	return fmt.Appendf(nil, `{"id":"chatcmpl-w","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`, content, fr)
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// chatRequest is a relay request for a chat on chat-1.
func chatRequest(id string, stream bool) relay.Request {
	return relay.Request{ID: id, OrgID: org, KeyID: "key-1", Kind: api.KindChat, Model: "chat-1", Stream: stream,
		Body: []byte(`{"model":"chat-1","messages":[{"role":"user","content":"hi"}]}`)}
}

// status is the HTTP status of a relay error.
func status(err error) int {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.HTTPStatus()
	}
	return 0
}

func code(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// events is a client of a stream: what it was sent, and when it stops
// reading.
type events struct {
	got []string
	// goneAfter, when above 0, makes the client leave after that many
	// writes.
	goneAfter int
	writes    int
}

var errGone = errors.New("client gone")

func (e *events) write(s string) error {
	if e.goneAfter > 0 && e.writes >= e.goneAfter {
		return errGone
	}
	e.writes++
	e.got = append(e.got, s)
	return nil
}

func (e *events) Data(evs ...[]byte) error {
	var parts []string
	for _, ev := range evs {
		parts = append(parts, string(ev))
	}
	return e.write(strings.Join(parts, "\n"))
}

func (e *events) Comment(text string) error { return e.write(": " + text) }

func (e *events) Fail(err error) error {
	return e.write(fmt.Sprintf("fail %d %s", status(err), code(err)))
}

// late is a client of a reply kept alive.
type late struct {
	keepAlives []time.Duration // when each came, since start
	start      time.Time
	answer     []byte
	failure    error
}

func (l *late) KeepAlive() error {
	l.keepAlives = append(l.keepAlives, time.Since(l.start))
	return nil
}
func (l *late) Answer(b []byte) error { l.answer = b; return nil }
func (l *late) Fail(err error) error  { l.failure = err; return nil }
