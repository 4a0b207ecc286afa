package link

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// linkServer accepts websocket links into gateway sessions the way the
// gateway does: bufs nil is the websocket's own 64 KiB buffers per link;
// otherwise a small read buffer, and writes, reads and batches borrowed
// from bufs.
type linkServer struct {
	tb    testing.TB
	addr  string
	srv   *fasthttp.Server
	sess  chan *Session
	links sync.WaitGroup
	// workers lend the workers' ends their buffers, alike whatever the
	// gateway's end does.
	workers Buffers
}

func newLinkServer(tb testing.TB, bufs *Buffers) *linkServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &linkServer{tb: tb, addr: ln.Addr().String(), sess: make(chan *Session, 1)}
	up := websocket.FastHTTPUpgrader{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	if bufs != nil {
		up = websocket.FastHTTPUpgrader{ReadBufferSize: 1 << 10, WriteBufferSize: 4 << 10, WriteBufferPool: bufs.WritePool()}
	}
	// fasthttp's read buffer, which a hijacked connection keeps, as the
	// gateway's.
	s.srv = &fasthttp.Server{ReadBufferSize: 16 << 10, StreamRequestBody: true, Handler: func(ctx *fasthttp.RequestCtx) {
		s.links.Add(1)
		err := up.Upgrade(ctx, func(ws *websocket.Conn) {
			defer s.links.Done()
			conn := WebSocket(ws, DefaultKeepalive())
			if bufs != nil {
				conn = bufs.WebSocket(ws, DefaultKeepalive())
			}
			g := NewSession(Options{Role: Gateway, Buffers: bufs})
			done, err := g.Attach(conn, nil)
			if err != nil {
				tb.Error(err)
				return
			}
			s.sess <- g
			<-done
		})
		if err != nil {
			s.links.Done()
		}
	}}
	go func() { _ = s.srv.Serve(ln) }()
	tb.Cleanup(func() {
		_ = s.srv.Shutdown()
		s.links.Wait()
	})
	return s
}

// dial opens a link whose worker end answers with accept, and returns
// both ends.
func (s *linkServer) dial(accept func(ctx context.Context, st *Stream)) (g, w *Session) {
	s.tb.Helper()
	d := websocket.Dialer{ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10, WriteBufferPool: s.workers.WritePool()}
	ws, _, err := d.Dial("ws://"+s.addr+"/", nil)
	if err != nil {
		s.tb.Fatal(err)
	}
	w = NewSession(Options{Role: Worker, Accept: accept, Buffers: &s.workers})
	if _, err := w.Attach(s.workers.WebSocket(ws, DefaultKeepalive()), nil); err != nil {
		s.tb.Fatal(err)
	}
	g = <-s.sess
	s.tb.Cleanup(func() {
		g.Close(nil)
		w.Close(nil)
	})
	return g, w
}

// mirror answers a request with its body, in pieces of 64 KiB, and ends
// with its header.
func mirror(ctx context.Context, st *Stream) {
	header, body, err := st.ReadRequest(ctx)
	if err != nil {
		return
	}
	for len(body) > 0 {
		n := min(len(body), 64<<10)
		if st.Send(ctx, body[:n]) != nil {
			return
		}
		body = body[n:]
	}
	_ = st.End(ctx, header)
}

// Links that borrow their buffers carry every message exactly: a buffer
// taken back after one message and lent for the next leaves nothing of
// it in a message still being read, across links and sizes.
func TestBorrowedBuffersCarryMessagesExactly(t *testing.T) {
	var bufs Buffers
	s := newLinkServer(t, &bufs)
	var gs []*Session
	for range 4 {
		g, _ := s.dial(mirror)
		gs = append(gs, g)
	}
	ctx := ctxT(t)
	sizes := []int{0, 1, 100, 4 << 10, 70 << 10, MaxPayload, 3 * MaxPayload / 2}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			g := gs[i%len(gs)]
			n := sizes[i%len(sizes)]
			body := bytes.Repeat([]byte{byte('a' + i%26)}, n)
			header := fmt.Appendf(nil, `{"stream":%d}`, i)
			st, err := g.Open(ctx, header, body)
			if err != nil {
				t.Error(err)
				return
			}
			gotBody, gotHeader, err := collect(ctx, st)
			if err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(gotHeader, header) || !bytes.Equal(gotBody, body) {
				t.Errorf("stream %d of %d bytes came back as %d bytes %q..., header %q", i, n, len(gotBody), gotBody[:min(len(gotBody), 8)], gotHeader)
			}
		})
	}
	wg.Wait()
}

// BenchmarkIdleLinkMemory opens links that have each carried one request
// and reply and are now idle, and reports the heap and stacks each holds,
// both ends together: the gateway's end with the websocket's own buffers
// and with borrowed ones (the worker's end is the same in both).
func BenchmarkIdleLinkMemory(b *testing.B) {
	const n = 200
	body := bytes.Repeat([]byte("x"), 16<<10)
	for _, c := range []struct {
		name string
		bufs *Buffers
	}{{"own-64KiB-buffers", nil}, {"borrowed-buffers", &Buffers{}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				s := newLinkServer(b, c.bufs)
				// Pools keep what they hold through one collection.
				runtime.GC()
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				for range n {
					g, _ := s.dial(echo)
					st, err := g.Open(context.Background(), []byte(`{}`), body)
					if err != nil {
						b.Fatal(err)
					}
					if _, _, err := collect(context.Background(), st); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/link")
				b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-bytes/link")
			}
		})
	}
}
