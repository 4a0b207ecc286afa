package link

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// rawPeer is the far end of a session's connection, spoken by hand as a
// peer that ignores the protocol would: what it sends reaches the session
// as it is, and what the session sends is decoded for the test to see.
type rawPeer struct {
	in     chan []byte
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	got    []Frame
}

func (c *rawPeer) ReadMessage() ([]byte, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-c.closed:
		return nil, io.ErrClosedPipe
	}
}

func (c *rawPeer) WriteMessage(m []byte) error {
	select {
	case <-c.closed:
		return io.ErrClosedPipe
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return DecodeMessage(m, func(f Frame) error {
		f.Payload = bytes.Clone(f.Payload)
		c.got = append(c.got, f)
		return nil
	})
}

func (c *rawPeer) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// send hands the session one message holding frames.
func (c *rawPeer) send(frames ...Frame) {
	var msg []byte
	for i := range frames {
		msg = AppendFrame(msg, &frames[i])
	}
	c.in <- msg
}

// resets counts the resets the session sent for stream id.
func (c *rawPeer) resets(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, f := range c.got {
		if f.Type == TypeReset && f.Stream == id {
			n++
		}
	}
	return n
}

// rawSession attaches a session with opts to a rawPeer; detached counts
// the times the session lost its connection.
func rawSession(t *testing.T, opts Options) (s *Session, peer *rawPeer, detached *int) {
	t.Helper()
	detached = new(int)
	opts.Detached = func(error) { *detached++ }
	s = NewSession(opts)
	peer = &rawPeer{in: make(chan []byte, 16), closed: make(chan struct{})}
	if _, err := s.Attach(peer, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(nil) })
	return s, peer, detached
}

// unread is what waits in a stream's inbox: payload bytes and frames.
func unread(st *Stream) (n, frames int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, f := range st.inbox {
		n += len(f.Payload)
	}
	return n, len(st.inbox)
}

// liveHeap is the heap in use once the garbage is collected.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// piece is a frame a peer sends: its type and payload size.
type piece struct {
	typ Type
	n   int
}

func pieces(typ Type, count, n int) []piece {
	out := make([]piece, count)
	for i := range out {
		out[i] = piece{typ, n}
	}
	return out
}

// A worker that sends a stream more than the window holds unread, as one
// ignoring acknowledgements does while the gateway's client reads
// nothing, has that stream dropped at the frame that overruns it, with
// ErrOverrun, and never more than a window of it held; the link and its
// other streams carry on. What the sender's own window lets through (a
// window exactly, a lone frame larger than it, an END that fits) is
// taken.
func TestOverrunningPeerIsRefused(t *testing.T) {
	const window = 16 << 10
	for _, tc := range []struct {
		name    string
		frames  []piece
		refused bool
		heap    bool // also check the memory held, not only the inbox
	}{
		{name: "a window in small frames", frames: pieces(TypeData, 16, 1<<10)},
		{name: "past the window in small frames", frames: pieces(TypeData, 17, 1<<10), refused: true},
		{name: "a lone frame larger than the window", frames: []piece{{TypeData, 40 << 10}}},
		{name: "a window's frame behind one unread", frames: []piece{{TypeData, 1}, {TypeData, window}}, refused: true},
		{name: "a window, then an empty end", frames: append(pieces(TypeData, 16, 1<<10), piece{TypeEnd, 0})},
		{name: "a window, then a result", frames: append(pieces(TypeData, 16, 1<<10), piece{TypeEnd, 2}), refused: true},
		{name: "empty frames up to the bound", frames: pieces(TypeData, maxEmpties, 0)},
		{name: "empty frames past the bound", frames: pieces(TypeData, maxEmpties+1, 0), refused: true},
		{name: "megabytes, acknowledgements ignored", frames: pieces(TypeData, 512, MaxChunk), refused: true, heap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, peer, detached := rawSession(t, Options{Role: Gateway, Window: window})
				ctx := ctxT(t)
				st, err := g.Open(ctx, []byte("h"), nil)
				if err != nil {
					t.Fatal(err)
				}
				before := liveHeap()
				total, largest := 0, 0
				for i, p := range tc.frames {
					peer.send(Frame{Type: p.typ, Stream: st.ID(), Seq: uint64(i + 1), Ack: 1, Payload: bytes.Repeat([]byte{'x'}, p.n)})
					synctest.Wait()
					total, largest = total+p.n, max(largest, p.n)
					if n, _ := unread(st); n > max(window, largest) {
						t.Fatalf("after frame %d: %d bytes unread with a %d-byte window", i+1, n, window)
					}
				}
				if tc.heap {
					if grown := int64(liveHeap()) - int64(before); grown > 4<<20 {
						t.Errorf("the heap grew by %d bytes for a stream with a %d-byte window", grown, window)
					}
				}
				err = st.Err()
				if !tc.refused {
					if err != nil {
						t.Fatalf("refused a peer within the window: %v", err)
					}
					if n, frames := unread(st); n != total || frames != len(tc.frames) {
						t.Fatalf("%d bytes in %d frames unread, want %d in %d", n, frames, total, len(tc.frames))
					}
					return
				}
				if !errors.Is(err, ErrOverrun) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("the stream ended with %v, want ErrOverrun", err)
				}
				if _, err := st.Recv(ctx); !errors.Is(err, ErrOverrun) {
					t.Fatalf("Recv = %v, want ErrOverrun", err)
				}
				if n, frames := unread(st); n != 0 || frames != 0 {
					t.Fatalf("the refused stream still holds %d bytes in %d frames", n, frames)
				}
				if peer.resets(st.ID()) == 0 {
					t.Fatal("the peer was not told to drop the stream")
				}
				// Only the stream was dropped: the link still carries others.
				next, err := g.Open(ctx, []byte("h"), nil)
				if err != nil {
					t.Fatal(err)
				}
				peer.send(Frame{Type: TypeData, Stream: next.ID(), Seq: 1, Payload: []byte("ok")},
					Frame{Type: TypeEnd, Stream: next.ID(), Seq: 2, Payload: []byte("done")})
				if got, end, err := collect(ctx, next); err != nil || string(got) != "ok" || string(end) != "done" {
					t.Fatalf("the next stream: %q %q %v", got, end, err)
				}
				if *detached != 0 || g.Streams() != 0 {
					t.Fatalf("detached %d times, %d streams left", *detached, g.Streams())
				}
			})
		})
	}
}

// Frames that wait unread keep their own bytes, not the websocket message
// each came in: otherwise a byte a frame, each in a large message, would
// hold megabytes within the window.
func TestUnreadFramesHoldOnlyTheirBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window, frames = 16 << 10, 64
		g, peer, _ := rawSession(t, Options{Role: Gateway, Window: window})
		st, err := g.Open(ctxT(t), []byte("h"), nil)
		if err != nil {
			t.Fatal(err)
		}
		before := liveHeap()
		junk := bytes.Repeat([]byte{'j'}, 256<<10)
		for i := range frames {
			// A byte of the stream, and a frame already received again,
			// which is dropped but came in the same message.
			peer.send(Frame{Type: TypeData, Stream: st.ID(), Seq: uint64(i + 1), Payload: []byte{'a'}},
				Frame{Type: TypeData, Stream: st.ID(), Seq: 1, Payload: junk})
		}
		synctest.Wait()
		if n, f := unread(st); n != frames || f != frames || st.Err() != nil {
			t.Fatalf("%d bytes in %d frames unread, err %v", n, f, st.Err())
		}
		// The first frame may hold its message: one, not all of them.
		if grown := int64(liveHeap()) - int64(before); grown > 2<<20 {
			t.Errorf("%d one-byte frames unread hold %d bytes", frames, grown)
		}
	})
}

// A peer that keeps the window is never refused, however its reader
// stalls: the gateway reading an answer only once the worker waits on
// the window, the worker reading a body only after a pause; messages of
// one frame or many, larger than the window; an END right after a full
// window. (A window under 4/3 of a frame can stall a sender waiting for
// an acknowledgement the reader owes only after a quarter window: the
// protocol's window is four frames.)
func TestWellBehavedPeerIsNeverRefused(t *testing.T) {
	type flow struct {
		name   string
		window int
		events [][]byte // the worker's answer, one message each
		result []byte
		// body is the request's; duplex sends it with SendBody in pieces
		// of this size, otherwise Open or OpenReader sends it.
		body   []byte
		duplex int
		reader bool
	}
	events := func(count, n int) [][]byte {
		out := make([][]byte, count)
		for i := range out {
			out[i] = bytes.Repeat([]byte{byte('a' + i%26)}, n)
		}
		return out
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for _, tc := range []flow{
		{name: "small events", window: 16 << 10, events: events(2000, 100)},
		{name: "tiny events", window: 4 << 10, events: events(5000, 3)},
		{name: "empty events among others", window: 16 << 10, events: append(events(100, 0), events(100, 1<<10)...)},
		{name: "messages of several frames", window: DefaultWindow, events: events(10, 5*MaxChunk+1)},
		{name: "messages larger than the window", window: 96 << 10, events: events(10, 3*MaxChunk+17)},
		{name: "a window exactly, then an empty end", window: 16 << 10, events: events(16, 1<<10)},
		{name: "a window exactly, then a result", window: 16 << 10, events: events(16, 1<<10), result: []byte("result")},
		{name: "a request body of many windows", window: 16 << 10, body: body},
		{name: "a request body read as it is sent", window: 16 << 10, body: body, reader: true},
		{name: "a duplex body in tiny pieces", window: 4 << 10, body: body[:16<<10], duplex: 3},
		{name: "a duplex body in frames", window: 96 << 10, body: body, duplex: MaxChunk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gotBody := make(chan []byte, 1)
				p := newPair(t, tc.window, func(ctx context.Context, st *Stream) {
					_, b, err := st.OpenRequest(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					// Read the body slowly, so the gateway fills the window
					// before every read.
					var got []byte
					buf := make([]byte, 5000)
					for {
						time.Sleep(time.Millisecond)
						n, err := b.Read(buf)
						got = append(got, buf[:n]...)
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
					gotBody <- got
					for _, e := range tc.events {
						if err := st.Send(ctx, e); err != nil {
							t.Error(err)
							return
						}
					}
					if err := st.End(ctx, tc.result); err != nil {
						t.Error(err)
					}
				})
				ctx := ctxT(t)
				var st *Stream
				var err error
				switch {
				case tc.duplex > 0:
					if st, err = p.g.OpenDuplex(ctx, []byte("h")); err == nil {
						for b := tc.body; len(b) > 0 && err == nil; b = b[min(len(b), tc.duplex):] {
							err = st.SendBody(ctx, b[:min(len(b), tc.duplex)])
						}
						if err == nil {
							err = st.EndBody(ctx)
						}
					}
				case tc.reader:
					st, err = p.g.OpenReader(ctx, []byte("h"), bytes.NewReader(tc.body))
				default:
					st, err = p.g.Open(ctx, []byte("h"), tc.body)
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := <-gotBody; !bytes.Equal(got, tc.body) {
					t.Fatalf("the worker read %d bytes of a %d-byte body", len(got), len(tc.body))
				}
				// Read a message only once the worker waits on the window.
				var got [][]byte
				for {
					synctest.Wait()
					if n, _ := unread(st); n > max(tc.window, MaxChunk) {
						t.Fatalf("%d bytes unread with a %d-byte window", n, tc.window)
					}
					typ, msg, err := st.ReadMessage(ctx)
					if err != nil {
						t.Fatalf("after %d messages: %v", len(got), err)
					}
					if typ == TypeEnd {
						if !bytes.Equal(msg, tc.result) {
							t.Fatalf("result %q", msg)
						}
						break
					}
					got = append(got, msg)
				}
				if len(got) != len(tc.events) {
					t.Fatalf("read %d messages, want %d", len(got), len(tc.events))
				}
				for i := range got {
					if !bytes.Equal(got[i], tc.events[i]) {
						t.Fatalf("message %d: %d bytes, want %d", i, len(got[i]), len(tc.events[i]))
					}
				}
			})
		})
	}
}

// Across reconnects a full inbox is sent again and dropped as already
// here, and what was read while the link was down is acknowledged by the
// handshake: none of it takes the stream past its window.
func TestWellBehavedPeerIsNeverRefusedAcrossReconnects(t *testing.T) {
	for _, readWhileDown := range []int{0, 1, 5} {
		t.Run(fmt.Sprintf("%d read while down", readWhileDown), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const window, events = 16 << 10, 200
				p := newPair(t, window, func(ctx context.Context, st *Stream) {
					if _, _, err := st.ReadRequest(ctx); err != nil {
						return
					}
					for i := range events {
						msg := bytes.Repeat([]byte{byte(i)}, 1000+i%3*MaxChunk/2)
						if err := st.Send(ctx, msg); err != nil {
							return
						}
					}
					_ = st.End(ctx, []byte("done"))
				})
				ctx := ctxT(t)
				st, err := p.g.Open(ctx, []byte("h"), nil)
				if err != nil {
					t.Fatal(err)
				}
				read := 0
				check := func(typ Type, msg []byte) bool {
					if typ == TypeEnd {
						return false
					}
					if want := 1000 + read%3*MaxChunk/2; len(msg) != want || msg[0] != byte(read) {
						t.Fatalf("message %d: %d bytes of %d, want %d of %d", read, len(msg), msg[0], want, byte(read))
					}
					read++
					return true
				}
				for more := true; more; {
					synctest.Wait() // the worker waits on a full window
					p.drop()
					// While down, only what is here whole: the rest of a
					// message could not come.
					for range readWhileDown {
						f, ok := st.TryRecv()
						if !ok {
							break
						}
						if more = check(f.Type, f.Payload); !more {
							break
						}
					}
					p.connect()
					synctest.Wait()
					if more {
						typ, msg, err := st.ReadMessage(ctx)
						if err != nil {
							t.Fatalf("after %d messages: %v", read, err)
						}
						more = check(typ, msg)
					}
				}
				if read != events || st.Err() != nil {
					t.Fatalf("read %d of %d messages: %v", read, events, st.Err())
				}
			})
		})
	}
}

// The worker refuses a request header longer than any it takes as soon
// as its length is known, rather than gathering it; one split over many
// frames, its length too, arrives whole.
func TestRequestHeaderIsBounded(t *testing.T) {
	header := []byte(strings.Repeat(`{"model":"m"}`, 30))
	withLength := func(n uint64, rest []byte) []byte { return append(binary.AppendUvarint(nil, n), rest...) }
	for _, tc := range []struct {
		name   string
		frames [][]byte // OPEN, then DATA, each flagged More but the last
		more   bool     // the last is flagged More too: more is to come
		err    bool
	}{
		{name: "claiming more than the bound", frames: [][]byte{withLength(maxRequestHeader+1, []byte("{"))}, more: true, err: true},
		{name: "claiming an absurd length", frames: [][]byte{withLength(1<<62, nil)}, more: true, err: true},
		{name: "claiming more than the stream brings", frames: [][]byte{withLength(100, []byte("{}"))}, err: true},
		{name: "in one frame", frames: [][]byte{withLength(uint64(len(header)), append(header, "body"...))}},
		{name: "a byte a frame", frames: func() [][]byte {
			var out [][]byte
			for _, b := range withLength(uint64(len(header)), append(header, "body"...)) {
				out = append(out, []byte{b})
			}
			return out
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				type result struct {
					header, body []byte
					err          error
				}
				got := make(chan result, 1)
				_, peer, _ := rawSession(t, Options{Role: Worker, Accept: func(ctx context.Context, st *Stream) {
					h, b, err := st.OpenRequest(ctx)
					var body []byte
					if err == nil {
						body, err = b.Bytes()
					}
					got <- result{h, body, err}
				}})
				for i, payload := range tc.frames {
					f := Frame{Type: TypeData, Stream: 1, Seq: uint64(i + 1), Payload: payload}
					if i == 0 {
						f.Type = TypeOpen
					}
					if i < len(tc.frames)-1 || tc.more {
						f.Flags = FlagMore
					}
					peer.send(f)
				}
				synctest.Wait()
				var r result
				select {
				case r = <-got:
				default:
					t.Fatal("the worker is still gathering the header")
				}
				if tc.err {
					if !errors.Is(r.err, ErrInvalid) {
						t.Fatalf("got header of %d bytes, err %v; want it refused", len(r.header), r.err)
					}
					return
				}
				if r.err != nil || !bytes.Equal(r.header, header) || string(r.body) != "body" {
					t.Fatalf("header %q body %q err %v", r.header, r.body, r.err)
				}
			})
		})
	}
}

// The gateway does not send a header the worker would refuse.
func TestOpenRefusesAnOversizedHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, peer, _ := rawSession(t, Options{Role: Gateway})
		ctx := ctxT(t)
		big := make([]byte, maxRequestHeader+1)
		if _, err := g.Open(ctx, big, nil); !Unsent(err) {
			t.Fatalf("Open = %v, want it refused unsent", err)
		}
		if _, err := g.OpenReader(ctx, big, bytes.NewReader(nil)); !Unsent(err) {
			t.Fatalf("OpenReader = %v, want it refused unsent", err)
		}
		synctest.Wait()
		peer.mu.Lock()
		sent := len(peer.got)
		peer.mu.Unlock()
		if sent != 0 || g.Streams() != 0 {
			t.Fatalf("%d frames sent, %d streams open", sent, g.Streams())
		}
	})
}
