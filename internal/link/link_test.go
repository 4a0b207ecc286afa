package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/link/linktest"
)

// pair is a gateway and a worker session joined by an in-memory pipe.
type pair struct {
	t        *testing.T
	g, w     *Session
	detached chan string
	conn     *linktest.Conn
}

func newPair(t *testing.T, window int, accept func(ctx context.Context, st *Stream)) *pair {
	t.Helper()
	p := &pair{t: t, detached: make(chan string, 16)}
	p.g = NewSession(Options{Role: Gateway, Window: window, Detached: func(error) { p.detached <- "gateway" }})
	p.w = NewSession(Options{Role: Worker, Window: window, Accept: accept, Detached: func(error) { p.detached <- "worker" }})
	p.connect()
	t.Cleanup(func() {
		p.g.Close(nil)
		p.w.Close(nil)
	})
	return p
}

// connect joins the sessions with a fresh connection after the resume
// handshake, as the gateway and worker do.
func (p *pair) connect() {
	p.t.Helper()
	gc, wc := linktest.Pipe()
	p.conn = gc
	gState, wState := p.g.RecvState(), p.w.RecvState()
	if _, err := p.g.Attach(gc, wState); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.w.Attach(wc, gState); err != nil {
		p.t.Fatal(err)
	}
}

// drop breaks the connection and waits until both ends noticed.
func (p *pair) drop() {
	p.t.Helper()
	_ = p.conn.Close()
	for range 2 {
		select {
		case <-p.detached:
		case <-time.After(5 * time.Second):
			p.t.Fatal("sessions did not notice the dropped connection")
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// echo answers each request with its body split into events, then END.
func echo(ctx context.Context, st *Stream) {
	_, body, err := st.ReadRequest(ctx)
	if err != nil {
		return
	}
	for len(body) > 0 {
		n := min(len(body), 7)
		if st.Send(ctx, body[:n]) != nil {
			return
		}
		body = body[n:]
	}
	_ = st.End(ctx, []byte("done"))
}

// collect reads a stream to its END, returning the concatenated messages.
func collect(ctx context.Context, st *Stream) ([]byte, []byte, error) {
	var out []byte
	for {
		typ, msg, err := st.ReadMessage(ctx)
		if err != nil {
			return out, nil, err
		}
		if typ == TypeEnd {
			return out, msg, nil
		}
		out = append(out, msg...)
	}
}

// settle fails the test unless cond holds once everything in the bubble
// has run as far as it can.
func settle(t *testing.T, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf("still waiting for %s once everything settled", what)
	}
}

// waitFor polls cond on real time, for the test whose drops must land at
// any moment, not only when everything waits.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRequestResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 0, echo)
		ctx := ctxT(t)
		st, err := p.g.Open(ctx, []byte(`{"model":"m"}`), []byte("hello, worker"))
		if err != nil {
			t.Fatal(err)
		}
		got, end, err := collect(ctx, st)
		if err != nil || string(got) != "hello, worker" || string(end) != "done" {
			t.Fatalf("got %q end %q err %v", got, end, err)
		}
		settle(t, "both ends to forget the stream", func() bool { return p.g.Streams() == 0 && p.w.Streams() == 0 })
	})
}

func TestHeaderAndBodyReachTheWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := make(chan [2]string, 1)
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			h, b, err := st.ReadRequest(ctx)
			if err != nil {
				return
			}
			got <- [2]string{string(h), string(b)}
			_ = st.End(ctx, nil)
		})
		ctx := ctxT(t)
		body := bytes.Repeat([]byte("0123456789"), 30000) // 300 KB: several frames, more than a window
		st, err := p.g.Open(ctx, []byte("header"), body)
		if err != nil {
			t.Fatal(err)
		}
		if g := <-got; g[0] != "header" || g[1] != string(body) {
			t.Fatalf("header %q, body of %d bytes", g[0], len(g[1]))
		}
		if _, _, err := collect(ctx, st); err != nil {
			t.Fatal(err)
		}
	})
}

func TestManyConcurrentStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 0, echo)
		ctx := ctxT(t)
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := range 200 {
			wg.Go(func() {
				body := []byte(fmt.Sprintf("request %d %s", i, bytes.Repeat([]byte{'x'}, i*37)))
				st, err := p.g.Open(ctx, nil, body)
				if err != nil {
					errs <- err
					return
				}
				got, _, err := collect(ctx, st)
				if err != nil || !bytes.Equal(got, body) {
					errs <- fmt.Errorf("stream %d: %v (%d bytes)", i, err, len(got))
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestFlowControlBoundsTheInbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 16 << 10
		sent := make(chan int, 1)
		p := newPair(t, window, func(ctx context.Context, st *Stream) {
			if _, _, err := st.ReadRequest(ctx); err != nil {
				return
			}
			n := 0
			defer func() { sent <- n }()
			chunk := bytes.Repeat([]byte{'z'}, 1000)
			for n < 200 {
				if st.Send(ctx, chunk) != nil {
					return
				}
				n++
			}
			_ = st.End(ctx, nil)
		})
		ctx := ctxT(t)
		st, err := p.g.Open(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Nobody reads: the worker must stop at about one window.
		synctest.Wait()
		st.mu.Lock()
		queued := 0
		for _, f := range st.inbox {
			queued += len(f.Payload)
		}
		st.mu.Unlock()
		if queued > window+MaxChunk || queued == 0 {
			t.Fatalf("%d bytes queued with a %d-byte window", queued, window)
		}
		got, _, err := collect(ctx, st)
		if err != nil || len(got) != 200*1000 {
			t.Fatalf("read %d bytes: %v", len(got), err)
		}
		if n := <-sent; n != 200 {
			t.Fatalf("worker sent %d", n)
		}
	})
}

func TestResetReachesTheOtherEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stopped := make(chan error, 1)
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			if _, _, err := st.ReadRequest(ctx); err != nil {
				return
			}
			for {
				if err := st.Send(ctx, []byte("tick")); err != nil {
					stopped <- err
					return
				}
			}
		})
		ctx := ctxT(t)
		st, _ := p.g.Open(ctx, nil, nil)
		if _, err := st.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		st.Reset()
		select {
		case err := <-stopped:
			if !errors.Is(err, ErrReset) && !errors.Is(err, context.Canceled) {
				t.Fatalf("worker stopped with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("worker kept sending after reset")
		}
		settle(t, "the worker to forget the stream", func() bool { return p.w.Streams() == 0 })
		if _, err := st.Recv(ctx); !errors.Is(err, ErrReset) {
			t.Fatalf("Recv after reset = %v", err)
		}
	})
}

// A reset that says its end is stopping reaches the other end as
// ErrPeerStopping, still an ErrReset; a plain reset as ErrReset alone.
func TestResetSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reset    func(*Stream)
		stopping bool
	}{{"plain", (*Stream).Reset, false}, {"stopping", (*Stream).ResetStopping, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				failed := make(chan error, 1)
				p := newPair(t, 0, func(ctx context.Context, st *Stream) {
					if _, _, err := st.ReadRequest(ctx); err != nil {
						return
					}
					<-st.Done()
					failed <- st.Err()
				})
				ctx := ctxT(t)
				st, err := p.g.Open(ctx, []byte("req"), nil)
				if err != nil {
					t.Fatal(err)
				}
				settle(t, "the worker to take the stream", func() bool { return p.w.Streams() == 1 })
				tc.reset(st)
				err = <-failed
				if !errors.Is(err, ErrReset) || errors.Is(err, ErrPeerStopping) != tc.stopping {
					t.Fatalf("the worker's stream failed with %v", err)
				}
			})
		})
	}
}

// AfterFail runs its callback when the stream fails, on either end and
// however it fails, and never for a stream that ended normally or whose
// callback was stopped.
func TestAfterFail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		end   func(p *pair, st *Stream)
		stop  bool
		fired bool
	}{
		{name: "reset by the other end", end: func(p *pair, st *Stream) { st.Reset() }, fired: true},
		{name: "session closed", end: func(p *pair, st *Stream) { p.w.Close(nil) }, fired: true},
		{name: "stopped before the reset", end: func(p *pair, st *Stream) { st.Reset() }, stop: true},
		{name: "ended normally", end: func(p *pair, st *Stream) {
			if _, _, err := collect(context.Background(), st); err != nil {
				p.t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var fired sync.WaitGroup
				var n int
				fired.Add(1)
				registered := make(chan struct{})
				p := newPair(t, 0, func(ctx context.Context, st *Stream) {
					defer fired.Done()
					stop := st.AfterFail(func() { n++ })
					if tc.stop && !stop() {
						t.Error("stop did not unregister the callback")
					}
					close(registered)
					_, _, _ = st.ReadRequest(ctx)
					_ = st.End(ctx, nil)
					<-ctx.Done()
				})
				st, err := p.g.Open(ctxT(t), nil, []byte("x"))
				if err != nil {
					t.Fatal(err)
				}
				<-registered
				tc.end(p, st)
				fired.Wait()
				synctest.Wait()
				if (n == 1) != tc.fired || n > 1 {
					t.Fatalf("callback ran %d times, want fired %v", n, tc.fired)
				}
			})
		})
	}
}

// With EndAckDelay, the gateway acknowledges an END with its next frame,
// or once the delay has passed when it sends none: the worker lets the
// stream go then, and not before.
func TestEndAckDelay(t *testing.T) {
	for _, tc := range []struct {
		name string
		next bool // the gateway opens another stream at once
	}{{"carried by the next stream", true}, {"sent after the delay", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t, 0, echo)
				p.g.opts.EndAckDelay = 10 * time.Millisecond
				ctx := ctxT(t)
				st, _ := p.g.Open(ctx, nil, []byte("abc"))
				if got, _, err := collect(ctx, st); err != nil || string(got) != "abc" {
					t.Fatalf("%q %v", got, err)
				}
				start := time.Now()
				synctest.Wait()
				if p.w.Streams() != 1 {
					t.Fatal("the END was acknowledged at once")
				}
				if tc.next {
					next, _ := p.g.Open(ctx, nil, []byte("d"))
					synctest.Wait()
					if n := p.w.Streams(); n != 1 {
						t.Fatalf("the worker holds %d streams once the next was opened, want the new one only", n)
					}
					_, _, _ = collect(ctx, next)
					return
				}
				time.Sleep(10*time.Millisecond - time.Since(start) - time.Nanosecond)
				settle(t, "the worker to hold the stream until the delay has passed", func() bool { return p.w.Streams() == 1 })
				time.Sleep(time.Nanosecond)
				settle(t, "the worker to let the stream go", func() bool { return p.w.Streams() == 0 })
			})
		})
	}
}

func TestWorkerEndBeforeGatewayReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 0, echo)
		ctx := ctxT(t)
		st, _ := p.g.Open(ctx, nil, []byte("abc"))
		settle(t, "the result to arrive", func() bool {
			st.mu.Lock()
			defer st.mu.Unlock()
			return len(st.inbox) > 0 && st.inbox[len(st.inbox)-1].Type == TypeEnd
		})
		// The worker holds its END until the gateway has consumed it.
		if p.w.Streams() != 1 {
			t.Fatalf("worker forgot the stream before its result was read")
		}
		if got, _, err := collect(ctx, st); err != nil || string(got) != "abc" {
			t.Fatalf("%q %v", got, err)
		}
		settle(t, "the worker to forget the stream", func() bool { return p.w.Streams() == 0 })
	})
}

func TestSessionCloseFailsStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, 0, func(ctx context.Context, st *Stream) { <-ctx.Done() })
		ctx := ctxT(t)
		st, _ := p.g.Open(ctx, nil, nil)
		lost := errors.New("worker lost")
		p.g.Close(lost)
		if _, err := st.Recv(ctx); !errors.Is(err, lost) {
			t.Fatalf("Recv = %v", err)
		}
		if _, err := p.g.Open(ctx, nil, nil); !errors.Is(err, lost) {
			t.Fatalf("Open after close = %v", err)
		}
	})
}

// TestResumeIsExact drops the connection many times while streams are in
// flight in both directions and checks every byte arrives once, in order.
// It runs on real time: in a synctest bubble a drop would land only when
// every goroutine waits, never in the middle of a transfer.
func TestResumeIsExact(t *testing.T) {
	const streams, events = 8, 400
	p := newPair(t, 8<<10, func(ctx context.Context, st *Stream) {
		_, body, err := st.ReadRequest(ctx)
		if err != nil {
			return
		}
		for i := range events {
			msg := fmt.Sprintf("%s:%04d|", body[:8], i)
			if st.Send(ctx, []byte(msg)) != nil {
				return
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		_ = st.End(ctx, []byte("ok"))
	})
	ctx := ctxT(t)
	results := make(chan error, streams)
	for i := range streams {
		go func() {
			body := append([]byte(fmt.Sprintf("stream%02d", i)), bytes.Repeat([]byte{'b'}, 20000)...)
			st, err := p.g.Open(ctx, nil, body)
			if err != nil {
				results <- err
				return
			}
			got, end, err := collect(ctx, st)
			if err != nil {
				results <- err
				return
			}
			var want bytes.Buffer
			for j := range events {
				fmt.Fprintf(&want, "stream%02d:%04d|", i, j)
			}
			if !bytes.Equal(got, want.Bytes()) || string(end) != "ok" {
				results <- fmt.Errorf("stream %d: got %d bytes, want %d", i, len(got), want.Len())
				return
			}
			results <- nil
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	done, drops := 0, 0
	for ; done < streams; drops++ {
		select {
		case err := <-results:
			if err != nil {
				t.Fatal(err)
			}
			done++
			continue
		case <-time.After(time.Duration(rng.IntN(3000)) * time.Microsecond):
		}
		p.drop()
		time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
		p.connect()
	}
	if drops < 10 {
		t.Fatalf("only %d drops happened; the test did not exercise resume", drops)
	}
	t.Logf("%d connection drops", drops)
	waitFor(t, "both ends to forget every stream", func() bool { return p.g.Streams() == 0 && p.w.Streams() == 0 })
}

func TestResumeDropsStreamsTheGatewayAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cancelled := make(chan struct{})
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			<-ctx.Done()
			close(cancelled)
		})
		ctx := ctxT(t)
		st, _ := p.g.Open(ctx, nil, nil)
		settle(t, "the worker to accept", func() bool { return p.w.Streams() == 1 })
		p.drop()
		st.Reset() // the reset cannot be sent: there is no connection
		p.connect()
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("worker kept a stream the gateway abandoned while disconnected")
		}
	})
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Type: TypeHello, Payload: []byte(`{"name":"w"}`)},
		{Type: TypeOpen, Flags: FlagMore, Stream: 1, Seq: 1, Payload: []byte("x")},
		{Type: TypeData, Stream: 1 << 40, Seq: 1 << 33, Ack: 7, Payload: bytes.Repeat([]byte{1}, MaxChunk)},
		{Type: TypeEnd, Stream: 3, Seq: 9, Ack: 2},
		{Type: TypeAck, Stream: 3, Ack: 5},
		{Type: TypeReset, Stream: 3},
	}
	var msg []byte
	for i := range frames {
		msg = AppendFrame(msg, &frames[i])
	}
	var got []Frame
	if err := DecodeMessage(msg, func(f Frame) error { got = append(got, f); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(frames) {
		t.Fatalf("decoded %d frames", len(got))
	}
	for i := range frames {
		w, g := frames[i], got[i]
		if w.Type != g.Type || w.Flags != g.Flags || w.Stream != g.Stream || w.Seq != g.Seq || w.Ack != g.Ack || !bytes.Equal(w.Payload, g.Payload) {
			t.Errorf("frame %d: got %+v want %+v", i, g, w)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"type zero", []byte{0, 0, 0, 0, 0, 0}},
		{"unknown type", []byte{99, 0, 0, 0, 0, 0}},
		{"unknown flag", []byte{byte(TypeData), 2, 1, 1, 0, 0}},
		{"data without stream", []byte{byte(TypeData), 0, 0, 1, 0, 0}},
		{"data without seq", []byte{byte(TypeData), 0, 1, 0, 0, 0}},
		{"hello with stream", []byte{byte(TypeHello), 0, 1, 0, 0, 0}},
		{"ack with seq", []byte{byte(TypeAck), 0, 1, 1, 0, 0}},
		{"end continues", []byte{byte(TypeEnd), FlagMore, 1, 1, 0, 0}},
		{"payload past end", []byte{byte(TypeData), 0, 1, 1, 0, 5, 'a'}},
		{"huge payload", append([]byte{byte(TypeData), 0, 1, 1, 0}, 0xff, 0xff, 0xff, 0x7f)},
		{"varint overflow", []byte{byte(TypeData), 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := DecodeFrame(tt.b); err == nil {
				t.Fatalf("DecodeFrame(%x) accepted", tt.b)
			}
		})
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add(AppendFrame(nil, &Frame{Type: TypeData, Stream: 1, Seq: 1, Payload: []byte("hi")}))
	f.Add(AppendFrame(AppendFrame(nil, &Frame{Type: TypeAck, Stream: 2, Ack: 3}), &Frame{Type: TypeHeartbeat, Payload: []byte("{}")}))
	f.Add([]byte{byte(TypeEnd), 0, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var out []byte
		err := DecodeMessage(msg, func(fr Frame) error {
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			out = AppendFrame(out, &fr)
			return nil
		})
		// What decodes cleanly re-encodes to a message that decodes to the
		// same frames (encodings may differ only in non-minimal varints).
		if err == nil {
			var again []byte
			if err := DecodeMessage(out, func(fr Frame) error { again = AppendFrame(again, &fr); return nil }); err != nil || !bytes.Equal(out, again) {
				t.Fatalf("re-encoded message does not round-trip: %v", err)
			}
		}
	})
}

// RecvUntil returns a frame already there even once its channel closed;
// with nothing there, the channel's closing interrupts it and leaves the
// stream as it was, and the context's end is the context's error.
func TestRecvUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			if _, _, err := st.ReadRequest(ctx); err != nil {
				return
			}
			_ = st.Send(ctx, []byte("first"))
			<-release
			_ = st.End(ctx, []byte("done"))
		})
		ctx := ctxT(t)
		st, err := p.g.Open(ctx, []byte(`{"model":"m"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		stop := make(chan struct{})
		close(stop)
		if f, err := st.RecvUntil(ctx, stop); err != nil || string(f.Payload) != "first" {
			t.Fatalf("a frame already there: %q %v", f.Payload, err)
		}
		if _, err := st.RecvUntil(ctx, stop); err != ErrInterrupted {
			t.Fatalf("nothing there, stop closed: %v, want ErrInterrupted", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := st.RecvUntil(cctx, make(chan struct{})); err != context.Canceled {
			t.Fatalf("the context ended: %v, want context.Canceled", err)
		}
		close(release)
		if f, err := st.RecvUntil(ctx, nil); err != nil || f.Type != TypeEnd || string(f.Payload) != "done" {
			t.Fatalf("after the interruptions: %v %q %v", f.Type, f.Payload, err)
		}
	})
}

// TryRecv takes what is already here and whole, and leaves a message that
// continues in later frames to ReadMessage.
func TestTryRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), MaxChunk+10)
		release := make(chan struct{})
		p := newPair(t, 0, func(ctx context.Context, st *Stream) {
			if _, _, err := st.ReadRequest(ctx); err != nil {
				return
			}
			<-release
			_ = st.Send(ctx, []byte("a"))
			_ = st.Send(ctx, big)
			_ = st.Send(ctx, []byte("b"))
			_ = st.End(ctx, []byte("done"))
		})
		ctx := ctxT(t)
		st, err := p.g.Open(ctx, []byte(`{"model":"m"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if f, ok := st.TryRecv(); ok {
			t.Fatalf("nothing sent yet, got %q", f.Payload)
		}
		close(release)
		synctest.Wait()
		if f, ok := st.TryRecv(); !ok || f.Type != TypeData || string(f.Payload) != "a" {
			t.Fatalf("first: %v %q %v", f.Type, f.Payload, ok)
		}
		if f, ok := st.TryRecv(); ok {
			t.Fatalf("took the start of a message in two frames: %d bytes", len(f.Payload))
		}
		if typ, msg, err := st.ReadMessage(ctx); err != nil || typ != TypeData || !bytes.Equal(msg, big) {
			t.Fatalf("the long message: %v %d bytes %v", typ, len(msg), err)
		}
		if f, ok := st.TryRecv(); !ok || string(f.Payload) != "b" {
			t.Fatalf("after it: %q %v", f.Payload, ok)
		}
		if f, ok := st.TryRecv(); !ok || f.Type != TypeEnd || string(f.Payload) != "done" {
			t.Fatalf("the end: %v %q %v", f.Type, f.Payload, ok)
		}
		settle(t, "the worker to forget the stream", func() bool { return p.w.Streams() == 0 })
	})
}

// An open on a closed session sent nothing, and says so; a failure after
// the request went out does not, whatever the session's fate: the peer
// may have it.
func TestUnsent(t *testing.T) {
	ctx := ctxT(t)
	p := newPair(t, 0, func(ctx context.Context, st *Stream) {
		_, _, _ = st.ReadRequest(ctx)
		<-ctx.Done()
	})
	st, err := p.g.Open(ctx, []byte(`{}`), []byte(`body`))
	if err != nil || Unsent(err) {
		t.Fatalf("open on a live session: %v (unsent %v)", err, Unsent(err))
	}
	gone := errors.New("the peer went")
	p.g.Close(gone)
	if _, err := st.Recv(ctx); err == nil || Unsent(err) {
		t.Fatalf("a stream whose session closed under it: %v, unsent %v", err, Unsent(err))
	}
	for name, open := range map[string]func() error{
		"Open":       func() error { _, err := p.g.Open(ctx, []byte(`{}`), []byte(`body`)); return err },
		"OpenReader": func() error { _, err := p.g.OpenReader(ctx, []byte(`{}`), strings.NewReader("body")); return err },
		"OpenDuplex": func() error { _, err := p.g.OpenDuplex(ctx, []byte(`{}`)); return err },
	} {
		err := open()
		if !Unsent(err) || !errors.Is(err, gone) || err.Error() != gone.Error() {
			t.Errorf("%s on a closed session: %v, unsent %v; want the close's reason, unsent", name, err, Unsent(err))
		}
	}
}

// Flush returns once what was queued is written: a last control frame
// sent before a close arrives, where the close alone drops it.
func TestFlushWritesWhatWasQueued(t *testing.T) {
	got := make(chan Frame, 1)
	g := NewSession(Options{Role: Gateway, Control: func(f Frame) { got <- f }})
	w := NewSession(Options{Role: Worker})
	defer g.Close(nil)
	gc, wc := linktest.Pipe()
	if _, err := g.Attach(gc, w.RecvState()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Attach(wc, g.RecvState()); err != nil {
		t.Fatal(err)
	}
	if !w.SendControl(TypeGoAway, []byte(`{"abandon":true}`)) {
		t.Fatal("not sent")
	}
	if !w.Flush(ctxT(t)) {
		t.Fatal("not flushed")
	}
	w.Close(nil)
	select {
	case f := <-got:
		if f.Type != TypeGoAway || string(f.Payload) != `{"abandon":true}` {
			t.Fatalf("got %v %s", f.Type, f.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the frame queued before the close never came")
	}
	// A session with no connection has nothing to flush to.
	if w.Flush(ctxT(t)) {
		t.Fatal("a closed session flushed")
	}
}
