package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
)

var secret = []byte("the cluster's secret")

// recorder is a connection that keeps what it sends, for a replay.
type recorder struct {
	link.Conn
	mu   sync.Mutex
	sent [][]byte
}

func (r *recorder) WriteMessage(m []byte) error {
	r.mu.Lock()
	r.sent = append(r.sent, append([]byte(nil), m...))
	r.mu.Unlock()
	return r.Conn.WriteMessage(m)
}

func (r *recorder) messages() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// handshake runs both sides on a fresh pipe.
func handshake(frontSecret, homeSecret []byte, to string) (frontErr, homeErr error) {
	fc, hc := linktest.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _, homeErr = Accept(hc, homeSecret, "home")
		if homeErr == nil {
			homeErr = SendWelcome(hc, Welcome{})
		}
		_ = hc.Close()
	})
	_, frontErr = Dial(fc, frontSecret, Hello{From: "front", To: to, SessionID: "s1"}, func() []api.StreamSeq { return nil })
	_ = fc.Close()
	wg.Wait()
	return frontErr, homeErr
}

// Each side proves it holds the cluster's secret before anything else
// crosses: a front with another secret is refused, a home with another
// secret (an impostor) gets no proof and no stream, and a hello meant for
// another replica is refused.
func TestHandshake(t *testing.T) {
	other := []byte("another secret")
	for _, tc := range []struct {
		name              string
		front, home       []byte
		to                string
		frontErr, homeErr error
	}{
		{name: "one secret", front: secret, home: secret, to: "home"},
		// Either side finds the other's proof wrong: the front checks first.
		{name: "front with another secret", front: other, home: secret, to: "home", frontErr: ErrProof, homeErr: io.ErrClosedPipe},
		{name: "home with another secret", front: secret, home: other, to: "home", frontErr: ErrProof, homeErr: io.ErrClosedPipe},
		{name: "meant for another replica", front: secret, home: secret, to: "elsewhere", frontErr: ErrRefused, homeErr: ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe, he := handshake(tc.front, tc.home, tc.to)
			if !errors.Is(fe, tc.frontErr) || (tc.frontErr == nil) != (fe == nil) {
				t.Errorf("front: %v, want %v", fe, tc.frontErr)
			}
			if !errors.Is(he, tc.homeErr) || (tc.homeErr == nil) != (he == nil) {
				t.Errorf("home: %v, want %v", he, tc.homeErr)
			}
		})
	}
}

// A proof seen on one connection is worth nothing on another: each side's
// challenge is fresh, so a recorded front's hello and proof replayed to
// the home, or a recorded home's challenge replayed to a front, is refused.
func TestHandshakeReplay(t *testing.T) {
	// One good handshake, recorded on both sides.
	fc, hc := linktest.Pipe()
	front, home := &recorder{Conn: fc}, &recorder{Conn: hc}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, _, err := Accept(home, secret, "home"); err != nil {
			t.Error(err)
		}
		_ = SendWelcome(home, Welcome{})
	})
	if _, err := Dial(front, secret, Hello{From: "front", To: "home", SessionID: "s1"}, func() []api.StreamSeq { return nil }); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	hello, proof := front.messages()[0], front.messages()[1]
	challenge := home.messages()[0]

	// A front that answers the home's challenge without knowing the
	// secret: with a proof from an earlier connection, or one made with
	// another secret.
	forged := func(t *testing.T, answer func(challenge []byte) []byte) error {
		t.Helper()
		attacker, hc := linktest.Pipe()
		defer attacker.Close()
		errc := make(chan error, 1)
		go func() {
			_, _, err := Accept(hc, secret, "home")
			errc <- err
		}()
		if err := attacker.WriteMessage(hello); err != nil {
			t.Fatal(err)
		}
		ch, err := attacker.ReadMessage() // the home's fresh challenge
		if err != nil {
			t.Fatal(err)
		}
		if err := attacker.WriteMessage(answer(ch)); err != nil {
			t.Fatal(err)
		}
		return <-errc
	}
	t.Run("the front's proof replayed to the home", func(t *testing.T) {
		if err := forged(t, func([]byte) []byte { return proof }); !errors.Is(err, ErrProof) {
			t.Fatalf("the home took a replayed proof: %v", err)
		}
	})
	t.Run("a proof made with another secret", func(t *testing.T) {
		err := forged(t, func(msg []byte) []byte {
			var h Hello
			var ch Challenge
			f, _, _ := link.DecodeFrame(hello)
			_ = json.Unmarshal(f.Payload, &h)
			f, _, _ = link.DecodeFrame(msg)
			_ = json.Unmarshal(f.Payload, &ch)
			b, _ := json.Marshal(Proof{Proof: proofMAC([]byte("another secret"), "front", &h, ch.Nonce)})
			return link.AppendFrame(nil, &link.Frame{Type: link.TypeHello, Payload: b})
		})
		if !errors.Is(err, ErrProof) {
			t.Fatalf("the home took a proof made with another secret: %v", err)
		}
	})
	t.Run("the home's challenge replayed to a front", func(t *testing.T) {
		fc, attacker := linktest.Pipe()
		defer attacker.Close()
		errc := make(chan error, 1)
		sentProof := make(chan bool, 1)
		go func() {
			_, err := Dial(fc, secret, Hello{From: "front", To: "home", SessionID: "s1"}, func() []api.StreamSeq {
				sentProof <- true
				return nil
			})
			errc <- err
		}()
		if _, err := attacker.ReadMessage(); err != nil { // the front's fresh hello
			t.Fatal(err)
		}
		if err := attacker.WriteMessage(challenge); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, ErrProof) {
			t.Fatalf("the front took a replayed challenge: %v", err)
		}
		select {
		case <-sentProof:
			t.Fatal("the front answered an impostor's challenge")
		default:
		}
	})
}

func TestRequestHeader(t *testing.T) {
	for _, tc := range []struct {
		name     string
		b        []byte
		id, addr string
		ok       bool
	}{
		{name: "round trip", b: AppendRequest(nil, "req-1", []byte("10.0.0.1:4242")), id: "req-1", addr: "10.0.0.1:4242", ok: true},
		{name: "empty fields", b: AppendRequest(nil, "", nil), ok: true},
		{name: "unknown version", b: append([]byte{9}, AppendRequest(nil, "a", []byte("b"))[1:]...)},
		{name: "truncated", b: AppendRequest(nil, "req-1", []byte("10.0.0.1:4242"))[:8]},
		{name: "trailing bytes", b: append(AppendRequest(nil, "a", []byte("b")), 0)},
		{name: "field too long", b: AppendRequest(nil, string(make([]byte, maxField+1)), nil)},
		{name: "empty", b: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, addr, err := ParseRequest(tc.b)
			if (err == nil) != tc.ok || id != tc.id || string(addr) != tc.addr {
				t.Fatalf("ParseRequest = %q, %q, %v", id, addr, err)
			}
		})
	}
}

// rig is a front's pool and a home's acceptor joined by in-memory
// connections the test can cut, refuse, or hand to a new home.
type rig struct {
	t    *testing.T
	pool *Pool
	mu   sync.Mutex
	home *Acceptor
	// refuse, when set, is what a dial fails with.
	refuse error
	conns  []*linktest.Conn
	wg     sync.WaitGroup
}

// echo answers a stream with its request body, a few bytes at a time, then
// ends it.
func echo(ctx context.Context, st *link.Stream) {
	_, body, err := st.ReadRequest(ctx)
	if err != nil {
		return
	}
	for len(body) > 0 {
		n := min(len(body), 5)
		if st.Send(ctx, body[:n]) != nil {
			return
		}
		body = body[n:]
		time.Sleep(time.Millisecond)
	}
	_ = st.End(ctx, nil)
}

func newRig(t *testing.T, serve func(context.Context, *link.Stream)) *rig {
	n := &rig{t: t}
	n.home = NewAcceptor(AcceptorOptions{Me: "home", Secret: secret, Serve: serve})
	n.pool = NewPool(PoolOptions{Me: "front", Secret: secret, Grace: 10 * time.Second, GiveUp: time.Minute,
		Dial: func(ctx context.Context, base string) (link.Conn, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.refuse != nil {
				return nil, n.refuse
			}
			fc, hc := linktest.Pipe()
			n.conns = append(n.conns, fc)
			home := n.home
			n.wg.Go(func() { _ = home.Serve(hc) })
			return fc, nil
		}})
	t.Cleanup(func() {
		n.pool.Close()
		n.mu.Lock()
		home := n.home
		n.mu.Unlock()
		home.Close()
		n.wg.Wait()
	})
	return n
}

// cut breaks every connection so far.
func (n *rig) cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.conns {
		_ = c.Close()
	}
	n.conns = nil
}

func (n *rig) setRefuse(err error) {
	n.mu.Lock()
	n.refuse = err
	n.mu.Unlock()
}

// restartHome replaces the home with one that holds no session.
func (n *rig) restartHome(serve func(context.Context, *link.Stream)) {
	n.mu.Lock()
	old := n.home
	n.home = NewAcceptor(AcceptorOptions{Me: "home", Secret: secret, Serve: serve})
	n.mu.Unlock()
	old.Close()
}

func (n *rig) open(body string) *link.Stream {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, err := n.pool.Session(ctx, "home", "http://home")
	if err != nil {
		n.t.Fatal(err)
	}
	st, err := sess.Open(ctx, nil, []byte(body))
	if err != nil {
		n.t.Fatal(err)
	}
	return st
}

// read collects a stream's answer to its end.
func readAll(st *link.Stream) (string, error) {
	var out bytes.Buffer
	for {
		f, err := st.Recv(context.Background())
		if err != nil {
			return out.String(), err
		}
		if f.Type == link.TypeEnd {
			return out.String(), nil
		}
		out.Write(f.Payload)
	}
}

// A stream on a replica link is a link stream: its answer arrives whole
// and in order, also across cuts of the connection, which the front
// redials at once and the home resumes.
func TestPoolResumesAcrossCuts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newRig(t, echo)
		want := "a long answer, cut several times on its way back"
		var sts []*link.Stream
		for range 4 {
			sts = append(sts, n.open(want))
		}
		for range 3 {
			time.Sleep(7 * time.Millisecond)
			n.cut()
		}
		for i, st := range sts {
			if got, err := readAll(st); err != nil || got != want {
				t.Fatalf("stream %d: %q, %v", i, got, err)
			}
		}
		if got, err := readAll(n.open("after")); err != nil || got != "after" {
			t.Fatalf("a stream after the cuts: %q, %v", got, err)
		}
		synctest.Wait()
		if got := n.home.Sessions(); got != 1 {
			t.Fatalf("the home holds %d sessions of one front", got)
		}
	})
}

// A session that cannot be resumed fails its streams, and only then: at
// once when nothing listens at the peer's address or it restarted (a new
// process holds no session), after the grace when it merely does not
// answer. New streams meanwhile are refused as unreachable, never queued
// for a peer known to be down.
func TestPoolFailsWhatCannotResume(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   func(n *rig)
		failsIn time.Duration
	}{
		{name: "refused", fault: func(n *rig) { n.setRefuse(fmt.Errorf("dial: %w", syscall.ECONNREFUSED)) }},
		{name: "silent", fault: func(n *rig) { n.setRefuse(context.DeadlineExceeded) }, failsIn: 10 * time.Second},
		{name: "restarted", fault: func(n *rig) { n.restartHome(echo) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				hold := make(chan struct{})
				n := newRig(t, func(ctx context.Context, st *link.Stream) {
					select {
					case <-hold:
					case <-ctx.Done():
					}
				})
				st := n.open("x")
				synctest.Wait()
				start := time.Now()
				tc.fault(n)
				n.cut()
				if _, err := readAll(st); !errors.Is(err, ErrLost) {
					t.Fatalf("the stream ended with %v, want ErrLost", err)
				}
				if took := time.Since(start); took < tc.failsIn || took > tc.failsIn+3*time.Second {
					t.Fatalf("the stream failed after %s, want %s", took, tc.failsIn)
				}
				if tc.name == "restarted" {
					close(hold)
					return
				}
				_, err := n.pool.Session(context.Background(), "home", "http://home")
				if !errors.Is(err, ErrUnreachable) {
					t.Fatalf("a new stream to a peer that is down: %v, want ErrUnreachable", err)
				}
				if got := n.pool.Unreachable(time.Now()); len(got) != 1 || got[0] != "http://home" {
					t.Fatalf("unreachable peers %v", got)
				}
				close(hold)
			})
		})
	}
}

// A front that stops coming back loses its session at the home after the
// grace: its streams' handlers are told (their context ends), as a client
// that went away.
func TestAcceptorGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ended := make(chan time.Time, 1)
		n := newRig(t, func(ctx context.Context, st *link.Stream) {
			<-ctx.Done()
			ended <- time.Now()
		})
		n.open("x")
		synctest.Wait()
		n.setRefuse(context.DeadlineExceeded)
		start := time.Now()
		n.cut()
		at := <-ended
		if took := at.Sub(start); took != DefaultGrace {
			t.Fatalf("the home ended the stream %s after the drop, want its grace %s", took, DefaultGrace)
		}
		if n.home.Sessions() != 0 {
			t.Fatal("the home still holds the session")
		}
	})
}

// A peer that is down is reported for peerMemory after the last stream
// wanted there, though its link goes on redialling it: once nothing is
// forwarded there, readiness stops naming it.
func TestUnreachableFollowsTheRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newRig(t, func(ctx context.Context, st *link.Stream) { <-ctx.Done() })
		n.open("x")
		synctest.Wait()
		n.setRefuse(fmt.Errorf("dial: %w", syscall.ECONNREFUSED))
		n.cut()
		time.Sleep(time.Second)
		if _, err := n.pool.Session(context.Background(), "home", "http://home"); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("a stream wanted at a peer that is down: %v, want ErrUnreachable", err)
		}
		if got := n.pool.Unreachable(time.Now()); !slices.Equal(got, []string{"http://home"}) {
			t.Fatalf("unreachable peers %v right after a refused stream", got)
		}
		time.Sleep(peerMemory + time.Second)
		if got := n.pool.Unreachable(time.Now()); len(got) != 0 {
			t.Fatalf("unreachable peers %v %s after the last stream wanted there", got, peerMemory+time.Second)
		}
		if _, err := n.pool.Session(context.Background(), "home", "http://home"); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("a stream wanted again: %v, want ErrUnreachable", err)
		}
		if got := n.pool.Unreachable(time.Now()); !slices.Equal(got, []string{"http://home"}) {
			t.Fatalf("unreachable peers %v after another refused stream", got)
		}
	})
}
