package link

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// wsPair joins a gateway and a worker session over a real websocket on
// loopback TCP, the transport used in production.
func wsPair(tb testing.TB, accept func(ctx context.Context, st *Stream)) (g, w *Session) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g = NewSession(Options{Role: Gateway})
	w = NewSession(Options{Role: Worker, Accept: accept})
	attached := make(chan error, 1)
	up := websocket.FastHTTPUpgrader{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		_ = up.Upgrade(ctx, func(ws *websocket.Conn) {
			done, err := g.Attach(WebSocket(ws, DefaultKeepalive()), nil)
			attached <- err
			if err == nil {
				<-done
			}
		})
	}}
	go func() { _ = srv.Serve(ln) }()
	d := websocket.Dialer{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	ws, _, err := d.Dial("ws://"+ln.Addr().String()+"/", nil)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Attach(WebSocket(ws, DefaultKeepalive()), nil); err != nil {
		tb.Fatal(err)
	}
	if err := <-attached; err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		g.Close(nil)
		w.Close(nil)
		_ = srv.Shutdown()
	})
	return g, w
}

// BenchmarkRoundTrip is one small request and its result across the link:
// the per-request cost the link adds between gateway and worker.
func BenchmarkRoundTrip(b *testing.B) {
	g, _ := wsPair(b, func(ctx context.Context, st *Stream) {
		if _, _, err := st.ReadRequest(ctx); err != nil {
			return
		}
		_ = st.Send(ctx, []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}]}`))
		_ = st.End(ctx, []byte(`{"status":200}`))
	})
	ctx := context.Background()
	header := []byte(`{"request_id":"r","kind":"chat","model":"m"}`)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st, err := g.Open(ctx, header, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := collect(ctx, st); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTripParallel is the same under concurrency, where the
// writer batches frames of many streams into one message.
func BenchmarkRoundTripParallel(b *testing.B) {
	g, _ := wsPair(b, func(ctx context.Context, st *Stream) {
		if _, _, err := st.ReadRequest(ctx); err != nil {
			return
		}
		_ = st.Send(ctx, []byte(`{"choices":[{"index":0,"message":{"content":"hello"}}]}`))
		_ = st.End(ctx, []byte(`{"status":200}`))
	})
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			st, err := g.Open(ctx, []byte(`{}`), []byte(`{"model":"m"}`))
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := collect(ctx, st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkOpenStreamMemory holds many idle open streams (each has sent
// its request and one event) and reports the heap they use, both ends
// together, and the stack of the worker goroutine serving each.
func BenchmarkOpenStreamMemory(b *testing.B) {
	const n = 10000
	release := make(chan struct{})
	var started sync.WaitGroup
	g, w := wsPair(b, func(ctx context.Context, st *Stream) {
		defer started.Done()
		if _, _, err := st.ReadRequest(ctx); err != nil {
			return
		}
		_ = st.Send(ctx, []byte(`{"choices":[{"index":0,"delta":{"content":"first token"}}]}`))
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	ctx := context.Background()
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		started.Add(n)
		streams := make([]*Stream, n)
		for i := range n {
			st, err := g.Open(ctx, []byte(`{"kind":"chat"}`), []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				b.Fatal(err)
			}
			streams[i] = st
		}
		for _, st := range streams {
			if _, err := st.Recv(ctx); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/stream")
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-bytes/stream")
		b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		for _, st := range streams {
			st.Reset()
		}
		started.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for w.Streams() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
}
