package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// An engine that accepts requests and never answers would keep its worker
// healthy for ever, and every request sent to it would wait until the
// gateway gave up on it. So every engine is watched. A request whose
// engine has produced nothing at all, for any request, during the
// time-to-first-byte limit (Config.EngineTTFB) since it began is checked
// with a probe: the least request of its kind, the worker's own. A probe
// answered within the limit shows the engine working (a long prompt, a
// model loading, a whole answer not sent before it is complete) and the
// request waits on; otherwise the request fails as retryable, which the
// gateway moves to another worker. After stallAfter such timeouts in a
// row the engine counts as stalled: the worker names its models in its
// heartbeat, so the gateway routes them elsewhere, refuses what still
// reaches it, fails at once the requests of the engine still waiting for
// output, and probes the engine every probeEvery until it answers. When
// the model it is probed with answers no probe but another of the
// engine's models does, the engine serves again and that model alone is
// held back (stuck) until it answers.
//
// An answer that has begun is watched too: one that then pauses the whole
// limit is checked the same way, and ends with what the client has (a 502
// that says the engine stopped mid-answer) when the probe is not answered
// either, or when it has paused maxPauses limits while the engine answers
// others or the probe. A stream paused that long is stuck (a hung GPU, a
// request the engine lost), and would otherwise hold its slot until the
// client or the 30-minute cap gave up. So is a whole answer whose bytes
// began to come (engine.Receiver) and stopped: an engine sends one only
// once it is complete.

// DefaultEngineTTFB is how long an engine may produce nothing before it
// is probed, and how long the probe may take: generous enough for a cold
// model load or a long prompt, which the probe tells from a hang.
const DefaultEngineTTFB = 60 * time.Second

const (
	// stallAfter timeouts in a row, without output from the engine
	// between them, stall it.
	stallAfter = 2
	// maxPauses bounds, in limits, how long an answer that has begun may
	// pause while its engine works: five minutes at the default limit,
	// past any preemption or queue of a working engine.
	maxPauses = 5
	// probeEvery spaces the probes of a stalled engine.
	probeEvery = 5 * time.Second
)

// watch is an engine and what the worker knows of its answering. It is
// the engine the worker serves requests with.
type watch struct {
	engine.Engine
	ttfb time.Duration
	log  *slog.Logger
	// changed is called, without locks held, when the engine stalls or
	// answers again.
	changed func()

	epoch time.Time
	// lastOutput is when the engine last produced output for any
	// request, as time since epoch.
	lastOutput atomic.Int64
	// stalledNow mirrors stalled for readers that take no lock.
	stalledNow atomic.Bool
	// want wakes the prober.
	want chan struct{}

	mu       sync.Mutex
	timeouts int // in a row, without output between them
	stalled  bool
	// refusing says the stall is the engine's refusal to connect, which a
	// listing of its models ends as well as a probe.
	refusing bool
	// waiting are the requests being served, which a stall gives up on
	// unless their output has begun.
	waiting map[*watched]struct{}
	// round is the probe asked for or running, shared by every request
	// that waits for its verdict.
	round *probeRound
	// sample is what the engine is probed with: the kind and model of the
	// last request that waited for a verdict.
	sample probeSample
	// stuck are the models, by the engine's name, that answered no probe
	// while another of the engine's did: the engine serves the rest, and
	// these are held back until they answer. anyStuck mirrors its size.
	stuck    map[string]probeSample
	anyStuck atomic.Bool
}

// probeRound is one probe and its verdict: alive is set before done is
// closed.
type probeRound struct {
	done  chan struct{}
	alive bool
}

// probeSample is what a probe asks: the kind and model of a request, and
// for speech the voice it asked for, which a model may need.
type probeSample struct{ kind, model, voice string }

func newWatch(e engine.Engine, ttfb time.Duration, log *slog.Logger, changed func()) *watch {
	return &watch{Engine: e, ttfb: ttfb, log: log, changed: changed, epoch: time.Now(),
		want: make(chan struct{}, 1), waiting: map[*watched]struct{}{}, stuck: map[string]probeSample{}}
}

// watchOf is the watched engine for e.
func (a *Agent) watchOf(e engine.Engine) engine.Engine {
	if w := a.watches[e]; w != nil {
		return w
	}
	return e
}

// Serve runs req on the engine under the time-to-first-byte limit. The
// engine runs on the caller's goroutine; the limit is a timer, so a
// request whose engine answers in time costs no goroutine of its own and
// its answer is not handed between goroutines.
func (w *watch) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &watched{w: w, req: req, cancel: cancel, out: firstSink{w: w, out: sink}, since: time.Now()}
	w.mu.Lock()
	_, stuck := w.stuck[req.Model]
	if w.stalled || stuck {
		w.mu.Unlock()
		msg := "the inference engine stopped answering; this worker sends it nothing until it answers a probe"
		if stuck {
			msg = "the inference engine stopped answering for this model; this worker sends it nothing of the model until it answers a probe"
		}
		r := engine.Failure(http.StatusServiceUnavailable, api.TypeUpstream, msg)
		r.Retryable = true
		return r
	}
	w.waiting[g] = struct{}{}
	w.mu.Unlock()
	g.mu.Lock() // the callback reads the timer, and may run at once
	g.timer = time.AfterFunc(w.ttfb, g.limitPassed)
	g.mu.Unlock()

	res := g.serve(ctx)
	if msg, dead := g.givenUp(); msg != "" {
		if dead {
			w.timedOut()
		}
		r := engine.Failure(http.StatusBadGateway, api.TypeUpstream, msg)
		// Nothing reached the client unless the answer had begun: then
		// it ends with what it has.
		r.Retryable = !g.out.wasCut()
		return r
	}
	if res != nil && res.Error != nil && res.Error.Code == api.CodeEngineUnreachable {
		w.refused(w.sampleOf(req))
		return res
	}
	if g.out.begun() || res != nil && res.Status < http.StatusInternalServerError && res.Status != 499 {
		// An answer without output, such as a refusal, shows the engine
		// answering too.
		w.answered()
	}
	return res
}

// watched is one request under the time-to-first-byte limit.
type watched struct {
	w      *watch
	req    *engine.Request
	cancel context.CancelFunc
	out    firstSink
	timer  *time.Timer
	// since is when the request last began to wait: at its start, or when
	// other output or a probe showed the engine working. Only the timer's
	// callbacks use it after the start, one after another.
	since time.Time

	mu sync.Mutex
	// finished is closed when the engine has returned, for a callback
	// waiting on a probe's verdict; exited is closed by a callback that
	// did not set the timer again.
	finished, exited chan struct{}
	reason           string // why the request was given up on
	// dead says the engine answered no probe either: the give-up counts
	// toward a stall.
	dead bool
}

// serve runs the engine and then stops the timer, waiting for a callback
// under way, also when the engine panics.
func (g *watched) serve(ctx context.Context) *api.Result {
	defer g.stop()
	return g.w.Engine.Serve(ctx, g.req, &g.out)
}

func (g *watched) stop() {
	g.w.mu.Lock()
	delete(g.w.waiting, g)
	g.w.mu.Unlock()
	if g.timer.Stop() {
		return
	}
	// The limit passed: its callback is running or has ended.
	g.mu.Lock()
	if g.finished == nil {
		g.finished, g.exited = make(chan struct{}), make(chan struct{})
		close(g.exited) // no callback will take them: see limitPassed
	}
	close(g.finished)
	exited := g.exited
	g.mu.Unlock()
	<-exited
}

// limitPassed runs when the request has waited the whole limit: unless
// its output has begun or other requests' output shows the engine
// working, it waits for a probe's verdict, and gives the request up if
// the engine did not answer that either.
func (g *watched) limitPassed() {
	g.mu.Lock()
	if g.finished == nil {
		g.finished, g.exited = make(chan struct{}), make(chan struct{})
	}
	finished, exited := g.finished, g.exited
	g.mu.Unlock()
	select {
	case <-exited:
		// serve returned and made the channels before this callback: it
		// waits for nothing.
		return
	default:
	}
	again := false
	defer func() {
		if !again {
			close(exited)
		}
	}()
	if g.out.begun() {
		again = g.paused(finished, g.out.lastOutput(g.w.epoch), g.cutOff)
		return
	}
	if last, ok := g.out.lastReceived(g.w.epoch); ok {
		// A whole answer whose bytes began to come: nothing of it has
		// reached the client, so another worker may still serve it.
		again = g.paused(finished, last, g.expire)
		return
	}
	if g.w.outputSince(g.since) {
		// The engine works, on other requests: this one waits its turn.
		again = g.again(finished)
		return
	}
	round := g.w.ask(g.req)
	select {
	case <-finished:
		return
	case <-round.done:
	}
	select {
	case <-finished:
		// The engine returned as the verdict came: its answer stands.
		return
	default:
	}
	if round.alive {
		again = g.again(finished)
		return
	}
	g.giveUp(fmt.Sprintf("the inference engine sent nothing within %s, nor to a probe", g.w.ttfb))
}

// paused judges a request whose answer has begun when the limit has
// passed, its output last at last: one with output since the limit began
// waits anew; one paused the whole limit waits on while the engine answers
// others or a probe, up to maxPauses limits since its last output, and is
// ended by stop otherwise (dead when the engine answered no probe either).
// It reports whether the timer was set again.
func (g *watched) paused(finished <-chan struct{}, last time.Time, stop func(msg string, dead bool)) bool {
	if last.After(g.since) {
		return g.again(finished)
	}
	if paused := time.Since(last); paused >= maxPauses*g.w.ttfb {
		stop(fmt.Sprintf("the inference engine sent nothing more of its answer for %s", paused.Round(time.Second)), false)
		return false
	}
	if !g.w.outputSince(g.since) {
		round := g.w.ask(g.req)
		select {
		case <-finished:
			return false
		case <-round.done:
		}
		if !round.alive {
			stop(fmt.Sprintf("the inference engine stopped in the middle of its answer: nothing for %s, nor to a probe",
				time.Since(last).Round(time.Second)), true)
			return false
		}
	}
	// Checked again after the limit, or when the pause reaches its
	// bound, if that comes first.
	return g.againIn(finished, min(g.w.ttfb, maxPauses*g.w.ttfb-time.Since(last)))
}

// cutOff ends a request whose answer had begun: the engine is stopped,
// its later output refused, and the client keeps what it has.
func (g *watched) cutOff(msg string, dead bool) { g.end(g.out.cut, msg, dead) }

// end gives the request up for msg, and stops its engine, if take moves
// its output's state (which fails once output came or another end did).
func (g *watched) end(take func() bool, msg string, dead bool) {
	g.mu.Lock()
	taken := take()
	if taken {
		g.reason, g.dead = msg, dead
	}
	g.mu.Unlock()
	if taken {
		g.cancel()
	}
}

// again waits the limit anew and reports true, unless the engine has
// returned and serve waits for this callback to end. A callback that set
// the timer again touches the request no more: serve may be past Stop.
func (g *watched) again(finished <-chan struct{}) bool { return g.againIn(finished, g.w.ttfb) }

// againIn is again, checking in d rather than after the whole limit.
func (g *watched) againIn(finished <-chan struct{}, d time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-finished:
		return false
	default:
	}
	g.since = time.Now()
	g.finished, g.exited = nil, nil
	g.timer.Reset(d)
	return true
}

// giveUp ends a request that had no output: the engine is stopped and the
// request goes back to the gateway, which moves it to another worker. A
// request whose first output came as the limit ran out stands.
func (g *watched) giveUp(msg string) { g.expire(msg, true) }

// expire is giveUp for a request the engine did not stall for certain
// unless dead.
func (g *watched) expire(msg string, dead bool) { g.end(g.out.expire, msg, dead) }

// givenUp is why the request was given up on, "" if it was not, and
// whether the engine answered no probe either.
func (g *watched) givenUp() (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason, g.dead
}

// answered notes output from the engine: it answers.
func (w *watch) answered() {
	w.stamp()
	w.mu.Lock()
	w.timeouts = 0
	w.mu.Unlock()
}

func (w *watch) stamp() { w.lastOutput.Store(int64(time.Since(w.epoch))) }

// stampAt notes output at t, as time since epoch.
func (w *watch) stampAt(t int64) { w.lastOutput.Store(t) }

// outputSince reports whether the engine produced output after t.
func (w *watch) outputSince(t time.Time) bool {
	return time.Duration(w.lastOutput.Load()) > t.Sub(w.epoch)
}

// timedOut counts a request given up on, and stalls the engine after
// stallAfter in a row.
func (w *watch) timedOut() {
	w.mu.Lock()
	w.timeouts++
	stalls := !w.stalled && w.timeouts >= stallAfter
	var waiting []*watched
	if stalls {
		w.stalled = true
		w.stalledNow.Store(true)
		for g := range w.waiting {
			waiting = append(waiting, g)
		}
	}
	n := w.timeouts
	w.mu.Unlock()
	// The requests still waiting for output fail at once.
	for _, g := range waiting {
		g.giveUp("the inference engine stopped answering")
	}
	w.log.Warn("the inference engine sent nothing in time; the request goes to another worker",
		"engine", w.Kind(), "ttfb", w.ttfb.String(), "timeouts_in_a_row", n)
	if stalls {
		w.log.Error("the inference engine stopped answering: its models take no requests until it answers a probe",
			"engine", w.Kind(), "ttfb", w.ttfb.String())
		w.changed()
		signalOne(w.want)
	}
}

// ask returns the probe round whose verdict a request waiting on the
// engine may wait for, starting one if none is under way.
func (w *watch) ask(req *engine.Request) *probeRound {
	s := w.sampleOf(req)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sample = s
	if w.round == nil {
		w.round = &probeRound{done: make(chan struct{})}
		signalOne(w.want)
	}
	return w.round
}

// sampleOf is what a probe for req asks.
func (w *watch) sampleOf(req *engine.Request) probeSample {
	s := probeSample{kind: req.Kind, model: req.Model}
	if req.Kind == api.KindSpeech {
		var p api.SpeechParams
		if json.Unmarshal(req.Body, &p) == nil {
			s.voice = p.Voice
		}
	}
	return s
}

// refused stalls the engine at once when it refuses to connect (it
// crashed, or is restarting): every request sent to it fails the same
// way until it listens again, so its models go elsewhere from the first
// refusal rather than after failures enough to hold the worker back. A
// probe like s, every probeEvery, or a listing of its models takes it
// back. A zero s, from a failed listing, keeps the last probe's sample.
func (w *watch) refused(s probeSample) {
	w.mu.Lock()
	if s.kind != "" {
		w.sample = s
	}
	stalls := !w.stalled
	if stalls {
		w.stalled, w.refusing = true, true
		w.stalledNow.Store(true)
	}
	w.mu.Unlock()
	if stalls {
		w.log.Error("the inference engine refuses connections: its models take no requests until it answers",
			"engine", w.Kind())
		w.changed()
		signalOne(w.want)
	}
}

// listed notes that the engine listed its models: one stalled only by its
// refusal to connect listens again.
func (w *watch) listed() {
	w.mu.Lock()
	back := w.stalled && w.refusing
	w.mu.Unlock()
	if back {
		w.settle(true)
	}
}

// run probes the engine when a request asks for a verdict, and every
// probeEvery while it is stalled, until ctx ends.
func (w *watch) run(ctx context.Context) {
	defer func() {
		// Nobody is failed for the worker's own stop.
		w.mu.Lock()
		r := w.round
		w.round = nil
		w.mu.Unlock()
		if r != nil {
			r.alive = true
			close(r.done)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.want:
		}
		w.mu.Lock()
		asked, stalled, stuck := w.round != nil, w.stalled, len(w.stuck) > 0
		s := w.sample
		w.mu.Unlock()
		if !asked && !stalled && !stuck {
			continue
		}
		if !asked {
			// Woken by the stall, or by the last probe of a stalled
			// engine or a stuck model: the next comes after a pause.
			pause := time.NewTimer(probeEvery)
			select {
			case <-ctx.Done():
				pause.Stop()
				return
			case <-pause.C:
			}
			if !stalled {
				if w.probeStuck(ctx) {
					signalOne(w.want)
				}
				continue
			}
		}
		alive := w.probe(ctx, s)
		if !alive && !asked && w.otherAnswers(ctx, s.model) {
			// The engine answers for another model: the one that hung is
			// held back alone, and the engine serves the rest.
			w.hold(s)
			alive = true
		}
		w.settle(alive)
		w.mu.Lock()
		again := w.stalled || len(w.stuck) > 0
		w.mu.Unlock()
		if again {
			signalOne(w.want)
		}
	}
}

// otherAnswers reports whether the engine answers a probe for a model
// other than except: a few of those it lists, of kinds a probe can ask.
func (w *watch) otherAnswers(ctx context.Context, except string) bool {
	lctx, cancel := context.WithTimeout(ctx, w.ttfb)
	models, err := w.Engine.Models(lctx)
	cancel()
	if err != nil {
		return false
	}
	tried := 0
	for _, m := range models {
		kind := ""
		switch {
		case slices.Contains(m.Capabilities, api.CapChat):
			kind = api.KindChat
		case slices.Contains(m.Capabilities, api.CapEmbeddings):
			kind = api.KindEmbeddings
		}
		w.mu.Lock()
		_, stuck := w.stuck[m.ID]
		w.mu.Unlock()
		if kind == "" || m.ID == except || stuck {
			continue
		}
		if w.probe(ctx, probeSample{kind: kind, model: m.ID}) {
			return true
		}
		if tried++; tried == maxOtherProbes {
			return false
		}
	}
	return false
}

// maxOtherProbes bounds the models a stalled engine is probed with besides
// the one that hung: each unanswered probe takes the whole limit.
const maxOtherProbes = 2

// hold holds back s's model alone.
func (w *watch) hold(s probeSample) {
	w.mu.Lock()
	w.stuck[s.model] = s
	w.anyStuck.Store(true)
	w.mu.Unlock()
	w.log.Error("the inference engine stopped answering for one model and answers for others: that model takes no requests until it answers a probe",
		"engine", w.Kind(), "model", s.model, "ttfb", w.ttfb.String())
}

// probeStuck probes each stuck model, takes back those that answer, and
// reports whether any is still stuck.
func (w *watch) probeStuck(ctx context.Context) bool {
	w.mu.Lock()
	stuck := make([]probeSample, 0, len(w.stuck))
	for _, s := range w.stuck {
		stuck = append(stuck, s)
	}
	w.mu.Unlock()
	var back []string
	for _, s := range stuck {
		if w.probe(ctx, s) {
			back = append(back, s.model)
		}
	}
	w.mu.Lock()
	for _, m := range back {
		delete(w.stuck, m)
	}
	left := len(w.stuck) > 0
	w.anyStuck.Store(left)
	w.mu.Unlock()
	for _, m := range back {
		w.log.Info("the inference engine answers again for the model", "engine", w.Kind(), "model", m)
	}
	if len(back) > 0 {
		w.changed()
	}
	return left
}

// stuckModel reports whether the engine's model is held back alone.
func (w *watch) stuckModel(local string) bool {
	if !w.anyStuck.Load() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.stuck[local]
	return ok
}

// settle gives the round under way its verdict, and takes the engine
// back into service when it answered.
func (w *watch) settle(alive bool) {
	w.mu.Lock()
	r := w.round
	w.round = nil
	recovered := alive && w.stalled
	if alive {
		w.timeouts = 0
	}
	if recovered {
		w.stalled, w.refusing = false, false
		w.stalledNow.Store(false)
	}
	w.mu.Unlock()
	if alive {
		w.stamp()
	}
	if r != nil {
		r.alive = alive
		close(r.done)
	}
	if recovered {
		w.log.Info("the inference engine answers again", "engine", w.Kind())
		w.changed()
	}
}

// probe asks the engine for the least of what a request like s asks: one
// token of its model, an embedding of one word, the speech of one word,
// the transcript of half a second of silence. It reports whether the
// engine answered within the limit: output, or any answer but a failure of
// its own. For other kinds the engine is asked for its models.
func (w *watch) probe(ctx context.Context, s probeSample) bool {
	ctx, cancel := context.WithTimeout(ctx, w.ttfb)
	defer cancel()
	req := &engine.Request{Kind: s.kind, Model: s.model}
	switch s.kind {
	case api.KindChat:
		req.Body = fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"ping"}],"max_tokens":1}`, s.model)
	case api.KindCompletion:
		req.Body = fmt.Appendf(nil, `{"model":%q,"prompt":"ping","max_tokens":1}`, s.model)
	case api.KindEmbeddings:
		req.Body = fmt.Appendf(nil, `{"model":%q,"input":"ping"}`, s.model)
	case api.KindSpeech:
		req.Body, _ = json.Marshal(api.SpeechParams{Input: "ok", Voice: s.voice})
	case api.KindTranscription, api.KindTranscriptionLive:
		const rate = 16000
		wav := pcmWAV(rate, make([]byte, rate)) // 16-bit: half a second
		req.Kind, req.Audio = api.KindTranscription, bytes.NewReader(wav)
		req.Body, _ = json.Marshal(api.TranscriptionParams{Format: api.AudioWAV, Seconds: 0.5, Bytes: int64(len(wav))})
	default:
		_, err := w.Engine.Models(ctx)
		return err == nil
	}
	got := &probeSink{stop: cancel}
	res := w.Engine.Serve(ctx, req, got)
	return got.output.Load() || ctx.Err() == nil && res != nil && res.Status < http.StatusInternalServerError
}

// probeSink takes a probe's first output and stops the engine there.
type probeSink struct {
	output atomic.Bool
	stop   context.CancelFunc
}

var errProbed = errors.New("the probe has its answer")

func (p *probeSink) Event(context.Context, []byte) error { return p.got() }
func (p *probeSink) Body(context.Context, []byte) error  { return p.got() }

func (p *probeSink) got() error {
	p.output.Store(true)
	p.stop()
	return errProbed
}

// firstSink passes a request's output on and notes the first of it, and
// when the last came. Once the request is given up on, output that comes
// too late is refused.
type firstSink struct {
	w     *watch
	out   engine.Sink
	state atomic.Int32
	// last is when the request last had output, as time since the
	// watch's epoch.
	last atomic.Int64
	// received is when the bytes of a whole answer last came, before
	// the answer is output whole (engine.Receiver), as time since the
	// watch's epoch plus one: 0 when none came.
	received atomic.Int64
}

const (
	waiting int32 = iota
	begun
	expired // given up before any output
	cutOff  // given up after output began
)

var errGivenUp = errors.New("the request was given up on: the engine sent nothing in time")

func (s *firstSink) Event(ctx context.Context, data []byte) error {
	if !s.output() {
		return errGivenUp
	}
	return s.out.Event(ctx, data)
}

func (s *firstSink) Body(ctx context.Context, data []byte) error {
	if !s.output() {
		return errGivenUp
	}
	return s.out.Body(ctx, data)
}

// output notes output and reports whether it may go on.
func (s *firstSink) output() bool {
	if s.state.Load() == begun {
		t := int64(time.Since(s.w.epoch))
		s.last.Store(t)
		s.w.stampAt(t)
		return true
	}
	if !s.state.CompareAndSwap(waiting, begun) {
		return false
	}
	s.last.Store(int64(time.Since(s.w.epoch)))
	s.w.answered()
	return true
}

// Receiving notes bytes of a whole answer: the engine answers, and the
// request is now watched for a pause in them.
func (s *firstSink) Receiving() {
	t := int64(time.Since(s.w.epoch))
	if s.received.Swap(t+1) == 0 {
		s.w.answered()
		return
	}
	s.w.stampAt(t)
}

// lastReceived is when bytes of a whole answer last came, if any did.
func (s *firstSink) lastReceived(epoch time.Time) (time.Time, bool) {
	t := s.received.Load()
	return epoch.Add(time.Duration(t - 1)), t > 0
}

func (s *firstSink) begun() bool { return s.state.Load() == begun }

// lastOutput is when the request last had output.
func (s *firstSink) lastOutput(epoch time.Time) time.Time {
	return epoch.Add(time.Duration(s.last.Load()))
}

// expire gives the request up unless its output has begun.
func (s *firstSink) expire() bool { return s.state.CompareAndSwap(waiting, expired) }

// cut gives up a request whose output has begun.
func (s *firstSink) cut() bool { return s.state.CompareAndSwap(begun, cutOff) }

func (s *firstSink) wasCut() bool { return s.state.Load() == cutOff }
