package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/fleet"
)

// hangEngine serves model "m": while hung it takes every request and
// never answers; otherwise it answers probes at once and other requests
// after delay.
type hangEngine struct {
	hung   atomic.Bool
	delay  time.Duration
	probes atomic.Int64
}

func (e *hangEngine) Kind() string { return "hang" }
func (e *hangEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "m", Capabilities: []string{api.CapChat}, Engine: "hang"}}, nil
}

func (e *hangEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	wait := e.delay
	if bytes.Contains(req.Body, []byte(`"max_tokens":1`)) {
		e.probes.Add(1)
		wait = 0
	}
	if e.hung.Load() {
		<-ctx.Done()
		return engine.Cancelled()
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return engine.Cancelled()
	}
	if err := sink.Body(ctx, []byte(`{"answer":"hi"}`)); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// An engine that takes requests and never answers is found out: each
// request on it is given up after the limit and a probe that went
// unanswered too, with a retryable failure the gateway moves elsewhere;
// two in a row stall the engine, which the worker reports so that the
// gateway holds its models back; the worker refuses what still reaches
// it; and a probe answered puts the engine back in service.
func TestHungEngineIsFoundOutAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &hangEngine{}
		eng.hung.Store(true)
		r := newRig(t, eng, Config{MaxConcurrent: 2, EngineTTFB: 10 * time.Second})
		start := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				l, st := r.request(context.Background())
				defer l.Release(fleet.Neutral)
				_, res, err := readAll(context.Background(), st)
				if err != nil || res.Status != http.StatusBadGateway || !res.Retryable {
					t.Errorf("request on a hung engine: %+v %v", res, err)
				}
				if d := time.Since(start); d != 20*time.Second {
					t.Errorf("given up after %v, want the limit and the probe's, 20s", d)
				}
			})
		}
		wg.Wait()
		r.expect("unhealthy", func(w api.Worker) bool { return w.Status == api.StatusUnhealthy })
		var ae *api.Error
		if _, err := r.fleet.Acquire(context.Background(), fleet.Need{OrgID: "org", Model: "m"}); !errors.As(err, &ae) || ae.Code != api.CodeWorkersUnhealthy {
			t.Fatalf("a request for the stalled engine's model: %v", err)
		}
		refused := r.agent.watchOf(eng).Serve(context.Background(), &engine.Request{Kind: api.KindChat, Model: "m"}, &captureSink{})
		if refused.Status != http.StatusServiceUnavailable || !refused.Retryable {
			t.Fatalf("a request reaching the stalled engine: %+v", refused)
		}

		eng.hung.Store(false)
		time.Sleep(probeEvery)
		r.expect("healthy again", func(w api.Worker) bool { return w.Status == api.StatusHealthy })
		l, st := r.request(context.Background())
		body, res, err := readAll(context.Background(), st)
		if err != nil || res.Status != http.StatusOK || body != `{"answer":"hi"}` {
			t.Fatalf("after the engine answered a probe: %q %+v %v", body, res, err)
		}
		l.Release(fleet.Succeeded)
	})
}

// An engine that is slow to start an answer (a model loading, a long
// prompt, a whole answer sent only once complete) but answers a probe is
// waited for, however many limits pass.
func TestSlowEngineAnsweringProbesIsWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &hangEngine{delay: 25 * time.Second}
		r := newRig(t, eng, Config{EngineTTFB: 10 * time.Second})
		l, st := r.request(context.Background())
		body, res, err := readAll(context.Background(), st)
		if err != nil || res.Status != http.StatusOK || body != `{"answer":"hi"}` {
			t.Fatalf("slow answer: %q %+v %v", body, res, err)
		}
		l.Release(fleet.Succeeded)
		if n := eng.probes.Load(); n != 2 {
			t.Fatalf("%d probes, want one per limit passed: 2", n)
		}
		r.expect("healthy", func(w api.Worker) bool { return w.Status == api.StatusHealthy })
	})
}

// A request is not probed for while the engine produces output for
// others: it waits its turn in a busy engine.
func TestBusyEngineIsNotProbed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &streamEngine{}
		r := newRig(t, eng, Config{MaxConcurrent: 2, EngineTTFB: 10 * time.Second})
		busy, bst := r.request(context.Background())
		synctest.Wait()
		eng.first.Store(true) // later requests start only after 25 s
		l, st := r.request(context.Background())
		if _, res, err := readAll(context.Background(), st); err != nil || res.Status != http.StatusOK {
			t.Fatalf("request behind a busy one: %+v %v", res, err)
		}
		l.Release(fleet.Succeeded)
		if _, res, err := readAll(context.Background(), bst); err != nil || res.Status != http.StatusOK {
			t.Fatalf("the busy request: %+v %v", res, err)
		}
		busy.Release(fleet.Succeeded)
		if n := eng.probes.Load(); n != 0 {
			t.Fatalf("the engine was probed %d times while it streamed", n)
		}
	})
}

// streamEngine streams a token a second for 40 s to its first request;
// once first is set, the requests after it wait 25 s before their first
// token.
type streamEngine struct {
	first  atomic.Bool
	probes atomic.Int64
}

func (e *streamEngine) Kind() string { return "stream" }
func (e *streamEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "m", Capabilities: []string{api.CapChat}, Engine: "stream"}}, nil
}

func (e *streamEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if bytes.Contains(req.Body, []byte(`"max_tokens":1`)) {
		e.probes.Add(1)
		return engine.OK()
	}
	tokens, wait := 40, time.Duration(0)
	if e.first.Load() {
		tokens, wait = 1, 25*time.Second
	}
	time.Sleep(wait)
	for range tokens {
		if err := sink.Event(ctx, []byte(`{"choices":[]}`)); err != nil {
			return engine.Cancelled()
		}
		time.Sleep(time.Second)
	}
	return engine.OK()
}

// When the engine stalls, a request still waiting for its first output
// fails at once, without waiting out its own limit and probe.
func TestStallFailsTheWaitingAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &hangEngine{}
		eng.hung.Store(true)
		r := newRig(t, eng, Config{MaxConcurrent: 3, EngineTTFB: 10 * time.Second})
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				if i == 2 {
					// After the probe round began: it waits for none.
					time.Sleep(12 * time.Second)
				}
				l, st := r.request(context.Background())
				defer l.Release(fleet.Neutral)
				_, res, err := readAll(context.Background(), st)
				if err != nil || res.Status != http.StatusBadGateway || !res.Retryable {
					t.Errorf("request %d on a hung engine: %+v %v", i, res, err)
				}
				// The first two are given up after the limit and the
				// probe's; that stalls the engine, which fails the third
				// before its own limit.
				if d := time.Since(start); d != 20*time.Second {
					t.Errorf("request %d given up after %v, want 20s", i, d)
				}
			})
		}
		wg.Wait()
		if n := eng.probes.Load(); n != 1 {
			t.Errorf("%d probes before the stall, want the one the first two shared", n)
		}
	})
}

// clockEngine streams output for "busy" requests and answers others, with
// no output, exactly when the limit passes: the engine returning races the
// limit's callback, which finds the engine working on other requests.
type clockEngine struct{ limit time.Duration }

func (e clockEngine) Kind() string                                { return "clock" }
func (e clockEngine) Models(context.Context) ([]api.Model, error) { return nil, nil }
func (e clockEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Model == "busy" {
		for ctx.Err() == nil {
			if err := sink.Event(ctx, []byte(`{}`)); err != nil {
				return engine.Cancelled()
			}
			time.Sleep(time.Second)
		}
		return engine.Cancelled()
	}
	time.Sleep(e.limit)
	return engine.OK()
}

// A request whose engine returns as its limit passes is answered, however
// the two interleave: the limit's callback either waits the limit anew
// before serve stops the timer, or ends without doing so.
func TestEngineReturningAsTheLimitPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 10 * time.Second
		w := newWatch(clockEngine{limit: limit}, limit, slog.New(slog.DiscardHandler), func() {})
		ctx, cancel := context.WithCancel(context.Background())
		busy := make(chan struct{})
		go func() {
			defer close(busy)
			w.Serve(ctx, &engine.Request{Kind: api.KindChat, Model: "busy"}, &captureSink{})
		}()
		for i := range 300 {
			got := make(chan *api.Result, 1)
			go func() {
				got <- w.Serve(context.Background(), &engine.Request{Kind: api.KindChat, Model: "quiet"}, &captureSink{})
			}()
			select {
			case res := <-got:
				if res.Status != http.StatusOK {
					t.Fatalf("request %d: %+v", i, res)
				}
			case <-time.After(3 * limit):
				t.Fatalf("request %d: no answer 3 limits after its engine returned", i)
			}
		}
		cancel()
		<-busy
	})
}

// pauseEngine streams a token a second, `tokens` of them, and then sends
// nothing until the request ends; its probes hang too when hangProbes is
// set, else they are answered at once. With whole set the tokens are the
// bytes of an answer sent whole, which an HTTP engine reads as they come
// (engine.Receiver) and never ends.
type pauseEngine struct {
	tokens     int
	hangProbes bool
	whole      bool
	probes     atomic.Int64
}

func (e *pauseEngine) Kind() string { return "pause" }
func (e *pauseEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "m", Capabilities: []string{api.CapChat}, Engine: "pause"}}, nil
}

func (e *pauseEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if bytes.Contains(req.Body, []byte(`"max_tokens":1`)) {
		e.probes.Add(1)
		if e.hangProbes {
			<-ctx.Done()
			return engine.Cancelled()
		}
		return engine.OK()
	}
	for i := range e.tokens {
		if i > 0 {
			time.Sleep(time.Second)
		}
		if e.whole {
			sink.(engine.Receiver).Receiving()
		} else if err := sink.Event(ctx, []byte(`{"choices":[]}`)); err != nil {
			return engine.Cancelled()
		}
	}
	<-ctx.Done()
	return engine.Cancelled()
}

// An answer that has begun and then stops ends with what the client has:
// a 502 that says so, not retried elsewhere. On an engine that answers no
// probe either (a hung GPU) it is found out after the limit it paused
// through and the probe's, and counts toward the engine's stall; on one
// that answers probes it waits, up to maxPauses limits since its last
// output, and counts against nothing. A whole answer whose bytes stop
// coming is judged the same way, and goes to another worker: none of it
// reached the client.
func TestAnswerStoppedMidwayIsCutOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		eng       *pauseEngine
		msg       string
		after     time.Duration
		probes    int64
		timeouts  int
		retryable bool
	}{
		// Output until 2 s; the limit from 10 s passes without any at
		// 20 s, and the probe is given up at 30 s.
		{"probes unanswered", &pauseEngine{tokens: 3, hangProbes: true}, "in the middle of its answer", 30 * time.Second, 1, 1, false},
		// The last output at 1 s; checked every 10 s with a probe from
		// 20 s, and cut off at 51 s, when it has paused five limits.
		{"probes answered", &pauseEngine{tokens: 2}, "sent nothing more of its answer for 50s", 51 * time.Second, 4, 0, false},
		{"a whole answer, probes unanswered", &pauseEngine{tokens: 3, hangProbes: true, whole: true}, "in the middle of its answer", 30 * time.Second, 1, 1, true},
		{"a whole answer, probes answered", &pauseEngine{tokens: 2, whole: true}, "sent nothing more of its answer for 50s", 51 * time.Second, 4, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, tc.eng, Config{EngineTTFB: 10 * time.Second})
				start := time.Now()
				l, st := r.request(context.Background())
				defer l.Release(fleet.Neutral)
				_, res, err := readAll(context.Background(), st)
				if err != nil || res.Status != http.StatusBadGateway || res.Retryable != tc.retryable || res.Error == nil ||
					!strings.Contains(res.Error.Message, tc.msg) {
					t.Fatalf("a stream whose engine stopped: %+v %v", res, err)
				}
				if d := time.Since(start); d != tc.after {
					t.Errorf("cut off after %v, want %v", d, tc.after)
				}
				if n := tc.eng.probes.Load(); n != tc.probes {
					t.Errorf("%d probes, want %d", n, tc.probes)
				}
				w := r.agent.watches[tc.eng]
				w.mu.Lock()
				timeouts := w.timeouts
				w.mu.Unlock()
				if timeouts != tc.timeouts {
					t.Errorf("%d timeouts counted, want %d", timeouts, tc.timeouts)
				}
			})
		})
	}
}

// audioEngine serves speech and transcriptions, and while hung takes
// every one, a probe's too, and never answers; its model list answers
// all the same, as an HTTP server's does when its audio path hangs.
type audioEngine struct {
	hung   atomic.Bool
	probes atomic.Int64
	voice  atomic.Value // the voice a speech probe asked for
}

func (e *audioEngine) Kind() string { return "audio" }
func (e *audioEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "tts", Capabilities: []string{api.CapSpeech}}, {ID: "stt", Capabilities: []string{api.CapTranscription}}}, nil
}

func (e *audioEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Kind == api.KindSpeech && bytes.Contains(req.Body, []byte(`"input":"ok"`)) ||
		req.Kind == api.KindTranscription && bytes.Contains(req.Body, []byte(`"seconds":0.5`)) {
		e.probes.Add(1)
		var p api.SpeechParams
		if json.Unmarshal(req.Body, &p) == nil {
			e.voice.Store(p.Voice)
		}
	}
	if req.Audio != nil {
		if _, err := io.Copy(io.Discard, req.Audio); err != nil {
			return engine.Cancelled()
		}
	}
	if e.hung.Load() {
		<-ctx.Done()
		return engine.Cancelled()
	}
	if err := sink.Body(ctx, []byte(`{"text":""}`)); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// A hung speech or transcription engine is found out as a hung chat
// engine is: its probe is a request of the same kind, the least one, not
// the model list, which a server whose audio path hangs still answers.
func TestHungAudioEngineIsFoundOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  engine.Request
	}{
		{"speech", engine.Request{Kind: api.KindSpeech, Model: "tts", Body: []byte(`{"input":"Hello there","voice":"v1"}`)}},
		{"transcription", engine.Request{Kind: api.KindTranscription, Model: "stt", Body: []byte(`{"format":"wav","seconds":1}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				eng := &audioEngine{}
				eng.hung.Store(true)
				w := newWatch(eng, 10*time.Second, slog.New(slog.DiscardHandler), func() {})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go w.run(ctx)
				req := tc.req
				if req.Kind == api.KindTranscription {
					req.Audio = bytes.NewReader(pcmWAV(16000, make([]byte, 32000)))
				}
				// Bounded, so that a wait for ever fails rather than
				// running the bubble's clock for ever.
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Minute)
				defer rcancel()
				start := time.Now()
				res := w.Serve(rctx, &req, &captureSink{})
				if res.Status != http.StatusBadGateway || !res.Retryable {
					t.Fatalf("a request on a hung %s engine after %v: %+v", tc.name, time.Since(start), res)
				}
				if d := time.Since(start); d != 20*time.Second {
					t.Errorf("given up after %v, want the limit and the probe's, 20s", d)
				}
				if n := eng.probes.Load(); n != 1 {
					t.Errorf("%d probes of the request's kind, want 1", n)
				}
				if v, _ := eng.voice.Load().(string); tc.req.Kind == api.KindSpeech && v != "v1" {
					t.Errorf("the speech probe asked for voice %q, want the request's", v)
				}
				eng.hung.Store(false)
				req = tc.req
				if req.Kind == api.KindTranscription {
					req.Audio = bytes.NewReader(pcmWAV(16000, make([]byte, 32000)))
				}
				if res := w.Serve(ctx, &req, &captureSink{}); res.Status != http.StatusOK {
					t.Fatalf("after the engine answered: %+v", res)
				}
			})
		})
	}
}

// twoModelEngine serves "hang" and "ok"; while hung, "hang" takes every
// request, its probes' too, and never answers, where "ok" answers at once:
// one model of an engine that serves several (llama-swap, LocalAI) stuck.
type twoModelEngine struct{ hung atomic.Bool }

func (e *twoModelEngine) Kind() string { return "two" }
func (e *twoModelEngine) Models(context.Context) ([]api.Model, error) {
	return []api.Model{{ID: "hang", Capabilities: []string{api.CapChat}}, {ID: "ok", Capabilities: []string{api.CapChat}}}, nil
}

func (e *twoModelEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Model == "hang" && e.hung.Load() {
		<-ctx.Done()
		return engine.Cancelled()
	}
	if err := sink.Body(ctx, []byte(`{"answer":"hi"}`)); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// An engine stalled by one model that answers for another serves the
// others again, and holds back that one alone until it answers a probe.
func TestOneModelStuckHoldsBackItAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &twoModelEngine{}
		eng.hung.Store(true)
		var changes atomic.Int64
		w := newWatch(eng, 10*time.Second, slog.New(slog.DiscardHandler), func() { changes.Add(1) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.run(ctx)
		serve := func(model string) *api.Result {
			return w.Serve(ctx, &engine.Request{Kind: api.KindChat, Model: model, Body: []byte(`{}`)}, &captureSink{})
		}
		for range stallAfter {
			if res := serve("hang"); res.Status != http.StatusBadGateway {
				t.Fatalf("a request of the stuck model: %+v", res)
			}
		}
		if !w.stalledNow.Load() {
			t.Fatal("the engine did not stall")
		}
		// A pause, the stuck model's probe given up, then the other's.
		time.Sleep(probeEvery + w.ttfb + time.Second)
		if w.stalledNow.Load() || !w.stuckModel("hang") || w.stuckModel("ok") {
			t.Fatalf("stalled %v, hang held %v, ok held %v; want the engine back and hang alone held",
				w.stalledNow.Load(), w.stuckModel("hang"), w.stuckModel("ok"))
		}
		if res := serve("ok"); res.Status != http.StatusOK {
			t.Fatalf("the model that answers: %+v", res)
		}
		if res := serve("hang"); res.Status != http.StatusServiceUnavailable || !res.Retryable || !strings.Contains(res.Error.Message, "for this model") {
			t.Fatalf("the model held back: %+v", res)
		}
		eng.hung.Store(false)
		time.Sleep(probeEvery + time.Second)
		if w.stuckModel("hang") || w.anyStuck.Load() {
			t.Fatal("the model that answered a probe is still held back")
		}
		if res := serve("hang"); res.Status != http.StatusOK {
			t.Fatalf("the model taken back: %+v", res)
		}
		if n := changes.Load(); n != 3 {
			t.Errorf("%d changes told, want 3: the stall, the engine back, the model back", n)
		}
	})
}

// downEngine serves model "m" until it is down; then it refuses every
// connection, as an engine whose process died does.
type downEngine struct {
	down   atomic.Bool
	served atomic.Int64
}

var errDialRefused = &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8000},
	Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func (e *downEngine) Kind() string { return "down" }
func (e *downEngine) Models(context.Context) ([]api.Model, error) {
	if e.down.Load() {
		return nil, fmt.Errorf("list models: GET /v1/models: %w", errDialRefused)
	}
	return []api.Model{{ID: "m", Capabilities: []string{api.CapChat}, Engine: "down"}}, nil
}

func (e *downEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if e.down.Load() {
		return engine.Unreachable(fmt.Errorf("POST /v1/chat/completions: %w", errDialRefused))
	}
	e.served.Add(1)
	if err := sink.Body(ctx, []byte(`{"answer":"hi"}`)); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// An engine that refuses connections has gone (it crashed, or is being
// restarted): the first request that meets the refusal holds its models
// back, so the gateway sends them elsewhere at once rather than failing
// requests until the worker is held back, and a probe answered takes the
// engine back. Without a request, the listing of its models finds it gone
// and back.
func TestEngineRefusingConnectionsIsHeldBack(t *testing.T) {
	t.Run("found by a request", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			eng := &downEngine{}
			r := newRig(t, eng, Config{EngineTTFB: 10 * time.Second, RefreshModels: time.Hour})
			eng.down.Store(true)
			l, st := r.request(context.Background())
			_, res, err := readAll(context.Background(), st)
			l.Release(fleet.Failed)
			if err != nil || res.Status != http.StatusBadGateway || !res.Retryable || res.Error.Code != api.CodeEngineUnreachable {
				t.Fatalf("a request on the engine gone: %+v %v", res, err)
			}
			if strings.Contains(res.Error.Message, "127.0.0.1") {
				t.Errorf("the client is told the engine's address: %q", res.Error.Message)
			}
			r.expect("unhealthy", func(w api.Worker) bool { return w.Status == api.StatusUnhealthy })
			var ae *api.Error
			if _, err := r.fleet.Acquire(context.Background(), fleet.Need{OrgID: "org", Model: "m"}); !errors.As(err, &ae) || ae.Code != api.CodeWorkersUnhealthy {
				t.Fatalf("a request for the model of the engine gone: %v, want it held back", err)
			}
			eng.down.Store(false)
			time.Sleep(probeEvery)
			r.expect("healthy again", func(w api.Worker) bool { return w.Status == api.StatusHealthy })
			l, st = r.request(context.Background())
			body, res, err := readAll(context.Background(), st)
			l.Release(fleet.Succeeded)
			if err != nil || res.Status != http.StatusOK || body != `{"answer":"hi"}` {
				t.Fatalf("after the engine came back: %q %+v %v", body, res, err)
			}
		})
	})
	t.Run("found by the listing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			eng := &downEngine{}
			r := newRig(t, eng, Config{EngineTTFB: 10 * time.Second, RefreshModels: 30 * time.Second})
			eng.down.Store(true)
			time.Sleep(30 * time.Second)
			w := r.expect("unhealthy", func(w api.Worker) bool { return w.Status == api.StatusUnhealthy })
			if len(w.Models) != 1 || eng.served.Load() != 0 {
				t.Fatalf("models %+v, %d served; want m kept and held back, nothing sent", w.Models, eng.served.Load())
			}
			eng.down.Store(false)
			// The listing is tried again within a second or two once it
			// failed; the probe comes every probeEvery. Either takes the
			// engine back.
			time.Sleep(2 * time.Second)
			r.expect("healthy again", func(w api.Worker) bool { return w.Status == api.StatusHealthy })
		})
	})
}
