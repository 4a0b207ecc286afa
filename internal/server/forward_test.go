package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/cluster"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/relay"
)

// fwdHome is a replica serving forwarded requests with the test's
// handlers, behind its real replica link (websocket, handshake, streams
// served on its fasthttp server).
type fwdHome struct {
	id  string
	s   *Server
	url string
	// ran counts the requests its handlers began.
	ran atomic.Int64
}

const fwdSecret = "the cluster's secret"

func newServerForTest(id string) *Server {
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{}), watch: newClientWatch(50 * time.Millisecond),
		keepalive: link.DefaultKeepalive()}
	s.newPeers(id, fwdSecret)
	return s
}

func startHome(t testing.TB, id string, handlers map[string]fasthttp.RequestHandler) *fwdHome {
	t.Helper()
	h := &fwdHome{id: id, s: newServerForTest(id)}
	h.s.public = &listener{srv: &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == peer.Path {
				if err := h.s.connectPeer(&call{ctx: ctx}); err != nil {
					ctx.Error(err.Error(), http.StatusBadRequest)
				}
				return
			}
			fn := handlers[string(ctx.Path())]
			if fn == nil {
				ctx.Error("no such test route", http.StatusNotFound)
				return
			}
			h.ran.Add(1)
			// As dispatch does.
			id, _ := forwardedID(ctx)
			ctx.Response.Header.Set("X-Request-Id", id)
			fn(ctx)
		},
		StreamRequestBody: true, ReduceMemoryUsage: true, NoDefaultContentType: true, DisablePreParseMultipartForm: true,
		MaxRequestBodySize: maxBodySize, Logger: fasthttpLogger{h.s.log},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.url = "http://" + ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.s.public.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		h.s.peerAccept.Close()
		_ = h.s.public.srv.Shutdown()
		<-done
		h.s.peers.Close()
	})
	return h
}

// movingHomes answers Where with the first home until told to forget it.
type movingHomes struct {
	mu      sync.Mutex
	homes   []cluster.Home
	forgets int
}

func (m *movingHomes) Where(context.Context, string) (cluster.Home, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.homes[min(m.forgets, len(m.homes)-1)], nil
}
func (m *movingHomes) Lookup(string) (cluster.Home, bool) { return cluster.Home{}, false }
func (m *movingHomes) Forget(string) {
	m.mu.Lock()
	m.forgets++
	m.mu.Unlock()
}
func (m *movingHomes) ForgetUnreachable(org string) bool {
	m.Forget(org)
	return true
}
func (m *movingHomes) Count() int { return 0 }

// fwdFront is a replica forwarding every request to its organisation's
// home, as dispatch does for a key route served elsewhere.
type fwdFront struct {
	s   *Server
	url string
	// links are the connections its link dialled, to cut.
	mu    sync.Mutex
	links []link.Conn
	ids   atomic.Int64
	// rowed is each request's word, by its X-Request-Id, on whether its
	// usage row is another replica's to write (a refusal's being the
	// front's).
	rowed sync.Map
}

func startFront(t testing.TB, homes ...*fwdHome) *fwdFront {
	t.Helper()
	f := &fwdFront{s: newServerForTest("front")}
	mh := &movingHomes{}
	for _, h := range homes {
		mh.homes = append(mh.homes, cluster.Home{OrgID: "org", ReplicaID: h.id, AdvertiseURL: h.url, Alive: true})
	}
	f.s.cluster = &Cluster{ReplicaID: "front", Homes: mh, Lease: leaseAt{}}
	f.s.peers.Close()
	f.s.peers = peer.NewPool(peer.PoolOptions{Me: "front", Secret: []byte(fwdSecret), Logger: f.s.log,
		Dial: func(ctx context.Context, base string) (link.Conn, error) {
			conn, err := f.s.dialPeer(ctx, base)
			if err == nil {
				f.mu.Lock()
				f.links = append(f.links, conn)
				f.mu.Unlock()
			}
			return conn, err
		}})
	f.s.public = &listener{srv: &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			c := &call{ctx: ctx, requestID: "req-" + strconv.FormatInt(f.ids.Add(1), 10),
				route:     &route{streamed: strings.HasPrefix(string(ctx.Path()), "/upload"), compatible: true},
				principal: auth.Principal{OrgID: "org"}}
			ctx.Response.Header.Set("X-Request-Id", c.requestID)
			var err error
			if !c.route.streamed {
				err = readBody(ctx, maxBodySize, nil, &c.bodyHeld)
			}
			if err == nil {
				var to target
				if to, err = f.s.serveAt(c); err == nil {
					err = f.s.forwardOrServe(c, to)
				}
			}
			if finishBody(ctx, maxBodySize) && err == nil {
				err = errOverLimit
			}
			f.rowed.Store(c.requestID, c.rowed)
			if err != nil {
				f.s.writeError(c, err)
			}
		},
		StreamRequestBody: true, ReduceMemoryUsage: true, NoDefaultContentType: true, DisablePreParseMultipartForm: true,
		MaxRequestBodySize: maxBodySize, Logger: fasthttpLogger{f.s.log},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.url = "http://" + ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.s.public.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = f.s.public.srv.Shutdown()
		<-done
		f.s.peers.Close()
		f.s.peerAccept.Close()
	})
	return f
}

// cut breaks the front's links to its peers, and waits until one is
// dialled again.
func (f *fwdFront) cut(t *testing.T) int {
	t.Helper()
	f.mu.Lock()
	for _, c := range f.links {
		_ = c.Close()
	}
	n := len(f.links)
	f.links = nil
	f.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		again := len(f.links) > 0
		f.mu.Unlock()
		if again {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("the front did not dial its peer again after a cut")
		}
		time.Sleep(time.Millisecond)
	}
}

// echo answers what the home saw of the request.
func echoRequest(ctx *fasthttp.RequestCtx) {
	id, _ := forwardedID(ctx)
	out := map[string]any{"id": id, "method": string(ctx.Method()), "uri": string(ctx.RequestURI()),
		"body": string(ctx.PostBody()), "remote_ip": ctx.RemoteIP().String(), "custom": string(ctx.Request.Header.Peek("X-Custom")),
		"expect": string(ctx.Request.Header.Peek("Expect"))}
	writeJSON(ctx, http.StatusOK, out)
}

var testClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// A request forwarded over the link reaches the home as the client sent
// it, under the front's request id and the client's address, and its
// answer comes back as the home made it: status, headers and body,
// small or large.
func TestForwardUnary(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 200_000) // 3.2 MB, over wholeAnswer
	home := startHome(t, "home", map[string]fasthttp.RequestHandler{
		"/echo": echoRequest,
		"/busy": func(ctx *fasthttp.RequestCtx) {
			ctx.Response.Header.Set("Retry-After", "3")
			ctx.SetStatusCode(http.StatusTooManyRequests)
			ctx.SetBodyString(`{"error":"busy"}`)
		},
		"/big":   func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(big) },
		"/empty": func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(http.StatusNoContent) },
	})
	front := startFront(t, home)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		check                    func(t *testing.T, resp *http.Response, body []byte)
	}{
		{name: "post", method: "POST", path: "/echo?x=1", body: `{"model":"m"}`, status: 200, check: func(t *testing.T, resp *http.Response, body []byte) {
			var got map[string]string
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"id": resp.Header.Get("X-Request-Id"), "method": "POST", "uri": "/echo?x=1",
				"body": `{"model":"m"}`, "remote_ip": "127.0.0.1", "custom": "kept", "expect": ""}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("the home saw %s %q, want %q", k, got[k], v)
				}
			}
			if !strings.HasPrefix(got["id"], "req-") {
				t.Errorf("the home served the request under %q, not the front's id", got["id"])
			}
		}},
		{name: "get", method: "GET", path: "/echo", status: 200},
		{name: "429 and its Retry-After", method: "POST", path: "/busy", body: "{}", status: 429, check: func(t *testing.T, resp *http.Response, body []byte) {
			if resp.Header.Get("Retry-After") != "3" || string(body) != `{"error":"busy"}` {
				t.Errorf("answered %v %s", resp.Header, body)
			}
		}},
		{name: "larger than read whole", method: "GET", path: "/big", status: 200, check: func(t *testing.T, _ *http.Response, body []byte) {
			if string(body) != big {
				t.Errorf("a body of %d bytes, want %d", len(body), len(big))
			}
		}},
		{name: "no content", method: "GET", path: "/empty", status: 204},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, front.url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("X-Custom", "kept")
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("%d %v: %s", resp.StatusCode, err, body)
			}
			if h := resp.Header.Values("Date"); len(h) > 1 {
				t.Errorf("Date %q", h)
			}
			if tc.check != nil {
				tc.check(t, resp, body)
			}
		})
	}
}

// sseHandler serves n events, each after the first written and flushed
// once the test lets it (next), so that a client reading event i before
// allowing i+1 proves the front passes each on as it comes. (fasthttp
// sends a stream's head with its first chunk.)
func sseHandler(n int, next <-chan struct{}, ended chan<- bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		left := make(chan struct{})
		stop := (&Server{}).watchClient(ctx.Conn(), func() { close(left) })
		end := func(whole bool) {
			if ended != nil {
				ended <- whole
			}
		}
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer stop()
			for i := range n {
				if next != nil && i > 0 {
					select {
					case <-next:
					case <-left:
						end(false)
						return
					case <-time.After(10 * time.Second):
						return // the test gave up
					}
				}
				fmt.Fprintf(w, "data: {\"i\":%d,\"pad\":%q}\n\n", i, strings.Repeat("x", i%300))
				if err := w.Flush(); err != nil {
					end(false)
					return
				}
			}
			_, _ = w.WriteString("data: [DONE]\n\n")
			select {
			case <-left:
				end(false)
			default:
				end(true)
			}
		})
	}
}

func postSSE(t *testing.T, url string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := testClient.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp, bufio.NewReader(resp.Body)
}

func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		_, _ = br.ReadString('\n')
		done <- strings.TrimSpace(line)
	}()
	select {
	case l := <-done:
		return l
	case <-time.After(5 * time.Second):
		t.Fatal("the next event did not arrive: the front holds the stream back")
		return ""
	}
}

// Each event of a forwarded stream reaches the client as the home sends
// it, before the next is made.
func TestForwardSSEIsIncremental(t *testing.T) {
	next := make(chan struct{})
	home := startHome(t, "home", map[string]fasthttp.RequestHandler{"/sse": sseHandler(20, next, nil)})
	front := startFront(t, home)
	_, br := postSSE(t, front.url+"/sse")
	for i := range 20 {
		if i > 0 {
			next <- struct{}{}
		}
		if got := readEvent(t, br); !strings.HasPrefix(got, fmt.Sprintf(`data: {"i":%d,`, i)) {
			t.Fatalf("event %d: %q", i, got)
		}
	}
	if got := readEvent(t, br); got != "data: [DONE]" {
		t.Fatalf("the end: %q", got)
	}
}

// An upload is forwarded as it arrives: the home has its first megabyte
// while the client has not sent the rest, and gets every byte, whether
// the client gave its length or sent it chunked.
func TestForwardUploadStreams(t *testing.T) {
	const size = 25 << 20
	first := make(chan struct{}, 1)
	home := startHome(t, "home", map[string]fasthttp.RequestHandler{
		"/upload": func(ctx *fasthttp.RequestCtx) {
			h := sha256.New()
			var n int64
			buf := make([]byte, 64<<10)
			told := false
			for {
				k, err := ctx.RequestBodyStream().Read(buf)
				h.Write(buf[:k])
				n += int64(k)
				if n >= 1<<20 && !told {
					told = true
					first <- struct{}{}
				}
				if err != nil {
					break
				}
			}
			ctx.SetBodyString(fmt.Sprintf("%d %s", n, hex.EncodeToString(h.Sum(nil))))
		},
	})
	front := startFront(t, home)
	data := bytes.Repeat([]byte("svc upload "), size/11+1)[:size]
	sum := sha256.Sum256(data)
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				_, _ = pw.Write(data[:2<<20])
				select {
				case <-first:
				case <-time.After(10 * time.Second):
					pw.CloseWithError(fmt.Errorf("the home had nothing of the upload while the client held the rest: the front buffers it"))
					return
				}
				_, _ = pw.Write(data[2<<20:])
				pw.Close()
			}()
			req, _ := http.NewRequest("POST", front.url+"/upload", pr)
			if !chunked {
				req.ContentLength = size
			}
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("%d %s", size, hex.EncodeToString(sum[:])); resp.StatusCode != 200 || string(body) != want {
				t.Fatalf("%d %s, want %s", resp.StatusCode, body, want)
			}
		})
	}
}

// A client that goes away ends its request at the home, where the
// handler learns it as from a client of its own (and the relay writes
// its 499 row): before the answer began, and in the middle of a stream.
func TestForwardClientGone(t *testing.T) {
	started := make(chan struct{}, 1)
	gone := make(chan struct{}, 1)
	next := make(chan struct{})
	ended := make(chan bool, 1)
	home := startHome(t, "home", map[string]fasthttp.RequestHandler{
		"/hold": func(ctx *fasthttp.RequestCtx) {
			left := make(chan struct{})
			stop := (&Server{}).watchClient(ctx.Conn(), func() { close(left) })
			defer stop()
			started <- struct{}{}
			select {
			case <-left:
				gone <- struct{}{}
			case <-time.After(10 * time.Second):
			}
		},
		"/sse": sseHandler(1000, next, ended),
	})
	front := startFront(t, home)

	t.Run("waiting for its answer", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", front.url+"/hold", strings.NewReader("{}"))
		errc := make(chan error, 1)
		go func() {
			resp, err := testClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		<-started
		cancel()
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatal("the home did not learn that the client went")
		}
		<-errc
	})
	t.Run("in the middle of a stream", func(t *testing.T) {
		resp, br := postSSE(t, front.url+"/sse")
		for i := range 3 {
			if i > 0 {
				next <- struct{}{}
			}
			readEvent(t, br)
		}
		resp.Body.Close()
		// The home's next writes fail once the front has reset the stream.
		homeStreamEnds(t, next, ended)
	})
}

// A cut of the link between the replicas mid-stream costs nothing: the
// front dials again, the session resumes, and the stream arrives byte for
// byte, run once at the home.
func TestForwardAcrossLinkCuts(t *testing.T) {
	const events = 300
	next := make(chan struct{})
	home := startHome(t, "home", map[string]fasthttp.RequestHandler{"/sse": sseHandler(events, next, nil)})
	front := startFront(t, home)
	var want bytes.Buffer
	for i := range events {
		fmt.Fprintf(&want, "data: {\"i\":%d,\"pad\":%q}\n\n", i, strings.Repeat("x", i%300))
	}
	want.WriteString("data: [DONE]\n\n")
	resp, err := testClient.Post(front.url+"/sse", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(resp.Body)
		got <- b
	}()
	cuts := 0
	for i := 1; i < events; i++ {
		if i%60 == 30 {
			cuts += front.cut(t)
		}
		next <- struct{}{}
	}
	b := <-got
	if !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the stream across %d cuts differs from what the home sent: %d bytes, want %d", cuts, len(b), want.Len())
	}
	if cuts < 3 || home.ran.Load() != 1 {
		t.Fatalf("%d cuts, the home ran the request %d times", cuts, home.ran.Load())
	}
}

// A home that cannot resume the link (it stopped, or restarted) ends
// the requests forwarded to it as a lost worker's: a stream with the
// error event and [DONE] after what came, a request whose answer had not
// begun with 503; neither is sent anywhere again.
func TestForwardHomeLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		sse  bool
	}{{"stream", true}, {"unary", false}} {
		t.Run(tc.name, func(t *testing.T) {
			next := make(chan struct{})
			started := make(chan struct{}, 1)
			home := startHome(t, "home", map[string]fasthttp.RequestHandler{
				"/sse": sseHandler(10, next, nil),
				"/hold": func(ctx *fasthttp.RequestCtx) {
					left := make(chan struct{})
					defer (&Server{}).watchClient(ctx.Conn(), func() { close(left) })()
					started <- struct{}{}
					select {
					case <-left:
					case <-time.After(10 * time.Second):
					}
				},
			})
			front := startFront(t, home)
			if tc.sse {
				_, br := postSSE(t, front.url+"/sse")
				readEvent(t, br)
				home.s.peerAccept.Close()
				rest, err := io.ReadAll(br)
				if err != nil || !strings.Contains(string(rest), "worker_lost") || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
					t.Fatalf("the stream ended with %q, %v", rest, err)
				}
			} else {
				errc := make(chan *http.Response, 1)
				go func() {
					resp, err := testClient.Post(front.url+"/hold", "application/json", strings.NewReader("{}"))
					if err != nil {
						t.Error(err)
					}
					errc <- resp
				}()
				<-started
				home.s.peerAccept.Close()
				resp := <-errc
				if resp == nil {
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 503 || !strings.Contains(string(body), "worker_lost") {
					t.Fatalf("answered %d %s", resp.StatusCode, body)
				}
			}
			if n := home.ran.Load(); n != 1 {
				t.Fatalf("the home ran the request %d times", n)
			}
		})
	}
}

// A home that refuses a request before running it (not_home) gets it
// sent to the organisation's new home, body and all, also an upload the
// front was streaming.
func TestForwardNotHomeMovesOn(t *testing.T) {
	refuse := func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set(notHomeHeader, "1")
		ctx.SetStatusCode(http.StatusServiceUnavailable)
		ctx.SetBodyString(`{"error":"not_home"}`)
	}
	old := startHome(t, "old", map[string]fasthttp.RequestHandler{"/echo": refuse, "/upload": refuse})
	upload := func(ctx *fasthttp.RequestCtx) {
		b, _ := io.ReadAll(ctx.RequestBodyStream())
		sum := sha256.Sum256(b)
		ctx.SetBodyString(fmt.Sprintf("%d %x", len(b), sum))
	}
	for _, tc := range []struct {
		path string
		body []byte
	}{
		{path: "/echo", body: []byte(`{"model":"m"}`)},
		{path: "/upload", body: bytes.Repeat([]byte("audio"), 100_000)},
	} {
		t.Run(tc.path, func(t *testing.T) {
			now := startHome(t, "new", map[string]fasthttp.RequestHandler{"/echo": echoRequest, "/upload": upload})
			front := startFront(t, old, now)
			resp, err := testClient.Post(front.url+tc.path, "application/octet-stream", bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || now.ran.Load() != 1 {
				t.Fatalf("%d %s; the new home ran it %d times", resp.StatusCode, body, now.ran.Load())
			}
			if tc.path == "/upload" {
				if want := fmt.Sprintf("%d %x", len(tc.body), sha256.Sum256(tc.body)); string(body) != want {
					t.Fatalf("the new home got %s, want %s", body, want)
				}
			}
		})
	}
}

// deadHome is a home whose replica is gone: nothing listens at its URL.
func deadHome(t *testing.T) *fwdHome {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	return &fwdHome{id: "dead", url: url}
}

// A front that cannot link to the home it knows asks again where the home
// is: a request whose home died and was taken over meanwhile is served by
// the new home, upload and all; while the database still names the dead
// one, the answer is 503 with Retry-After.
func TestForwardHomeDownMovesOn(t *testing.T) {
	upload := func(ctx *fasthttp.RequestCtx) {
		b, _ := io.ReadAll(ctx.RequestBodyStream())
		ctx.SetBodyString(fmt.Sprintf("%d", len(b)))
	}
	for _, tc := range []struct {
		path string
		body []byte
		want string
	}{
		{path: "/echo", body: []byte(`{"model":"m"}`)},
		{path: "/upload", body: bytes.Repeat([]byte("audio"), 100_000), want: "500000"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			now := startHome(t, "new", map[string]fasthttp.RequestHandler{"/echo": echoRequest, "/upload": upload})
			front := startFront(t, deadHome(t), now)
			resp, err := testClient.Post(front.url+tc.path, "application/octet-stream", bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || now.ran.Load() != 1 || tc.want != "" && string(body) != tc.want {
				t.Fatalf("%d %s; the new home ran it %d times", resp.StatusCode, body, now.ran.Load())
			}
		})
	}
	t.Run("still named", func(t *testing.T) {
		front := startFront(t, deadHome(t))
		resp, err := testClient.Post(front.url+"/echo", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
		}
	})
}

// A front leaves a request's usage row to the home once the home may
// have it, served or lost on the way; one that never reached a home, or
// that every home refused as not its own, is the front's to record as
// refused (dispatch's recordRefusal).
func TestForwardLeavesTheRowToTheHome(t *testing.T) {
	refuse := func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set(notHomeHeader, "1")
		ctx.SetStatusCode(http.StatusServiceUnavailable)
	}
	lose := func(ctx *fasthttp.RequestCtx) {
		ctx.Hijack(func(c net.Conn) {})
		ctx.HijackSetNoResponse(true)
	}
	serving := func(t *testing.T) *fwdHome {
		return startHome(t, "home", map[string]fasthttp.RequestHandler{"/echo": echoRequest})
	}
	refusing := func(t *testing.T) *fwdHome {
		return startHome(t, "refusing", map[string]fasthttp.RequestHandler{"/echo": refuse})
	}
	for _, tc := range []struct {
		name   string
		homes  func(t *testing.T) []*fwdHome
		status int
		rowed  bool
	}{
		{"served by the home", func(t *testing.T) []*fwdHome { return []*fwdHome{serving(t)} }, 200, true},
		{"served by the next home", func(t *testing.T) []*fwdHome { return []*fwdHome{refusing(t), serving(t)} }, 200, true},
		{"lost at the home", func(t *testing.T) []*fwdHome {
			return []*fwdHome{startHome(t, "losing", map[string]fasthttp.RequestHandler{"/echo": lose})}
		}, 503, true},
		{"home unreachable", func(t *testing.T) []*fwdHome { return []*fwdHome{deadHome(t)} }, 503, false},
		{"refused by every home", func(t *testing.T) []*fwdHome {
			return []*fwdHome{refusing(t), startHome(t, "refusing too", map[string]fasthttp.RequestHandler{"/echo": refuse})}
		}, 503, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := startFront(t, tc.homes(t)...)
			resp, err := testClient.Post(front.url+"/echo", "application/json", strings.NewReader(`{"model":"m"}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rowed, ok := front.rowed.Load(resp.Header.Get("X-Request-Id"))
			if resp.StatusCode != tc.status || !ok || rowed != tc.rowed {
				t.Fatalf("%d %s; the home writes its row: %v (recorded %v), want %d and %v", resp.StatusCode, body, rowed, ok, tc.status, tc.rowed)
			}
		})
	}
}

// BenchmarkForwardUnary is one small request through a front to its home
// and back, against the same request sent to the home directly: the
// difference is the hop (HTTP/1.1 on a link stream, both ends).
func BenchmarkForwardUnary(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	answer := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}]}`)
	home := startHome(b, "home", map[string]fasthttp.RequestHandler{
		"/chat": func(ctx *fasthttp.RequestCtx) { ctx.SetContentType("application/json"); ctx.SetBody(answer) },
	})
	front := startFront(b, home)
	client := &fasthttp.Client{}
	for _, bc := range []struct{ name, url string }{{"direct", home.url}, {"forwarded", front.url}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for pb.Next() {
					req.SetRequestURI(bc.url + "/chat")
					req.Header.SetMethod("POST")
					req.SetBody(body)
					if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
					}
				}
			})
		})
	}
}

// A front whose drain runs out of time ends the streams it forwards as
// it ends its own: the client gets the shutting_down error event and
// [DONE], and the home's request ends at once.
func TestForwardEndedByTheDrain(t *testing.T) {
	next := make(chan struct{})
	ended := make(chan bool, 1)
	home := startHome(t, "home", map[string]fasthttp.RequestHandler{"/sse": sseHandler(1000, next, ended)})
	front := startFront(t, home)
	_, br := postSSE(t, front.url+"/sse")
	readEvent(t, br)
	if n := front.s.forwards.abort(); n != 1 {
		t.Fatalf("%d forwards ended, want the stream's", n)
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "shutting_down") || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream ended with %q, %v", rest, err)
	}
	homeStreamEnds(t, next, ended)
	if n := front.s.forwards.abort(); n != 0 {
		t.Fatalf("%d forwards left once the stream ended", n)
	}
}

// homeStreamEnds drives a home's sseHandler with next until it ends, which
// must be as a stream whose client went: the front reset it.
func homeStreamEnds(t *testing.T, next chan<- struct{}, ended <-chan bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case next <- struct{}{}:
			time.Sleep(5 * time.Millisecond)
		case ok := <-ended:
			if ok {
				t.Fatal("the home finished the stream as if its client were there")
			}
			return
		case <-deadline:
			t.Fatal("the home went on streaming after the front reset the stream")
		}
	}
}

// A forwarded request's home tells a client that left (its front reset
// the stream: 499) from a front that lost its link to the home for good,
// or whose drain ran out of time, and answered its client itself: the
// home's row then says why.
func TestForwardedRequestKnowsWhyItsClientWent(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(front *fwdFront, cancel func())
		want error
	}{
		{"the client left", func(_ *fwdFront, cancel func()) { cancel() }, nil},
		{"the front lost its link", func(front *fwdFront, _ func()) { front.s.peers.Close() }, errFrontLost},
		{"the front's drain ran out", func(front *fwdFront, _ func()) { front.s.forwards.abort() }, relay.ErrShuttingDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			why := make(chan error, 1)
			var home *fwdHome
			home = startHome(t, "home", map[string]fasthttp.RequestHandler{
				"/hold": func(ctx *fasthttp.RequestCtx) {
					left := make(chan struct{})
					defer home.s.watchClient(ctx.Conn(), func() { close(left) })()
					started <- struct{}{}
					select {
					case <-left:
						why <- ctx.Conn().(*peerConn).departed()
					case <-time.After(10 * time.Second):
						t.Error("the home did not learn that the request's client went")
					}
				},
			})
			// A front that does not come back is given up after the grace.
			home.s.peerAccept = peer.NewAcceptor(peer.AcceptorOptions{Me: home.id, Secret: []byte(fwdSecret),
				Serve: home.s.servePeerStream, Grace: 50 * time.Millisecond, Logger: home.s.log})
			front := startFront(t, home)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", front.url+"/hold", strings.NewReader("{}"))
			answered := make(chan int, 1)
			go func() {
				resp, err := testClient.Do(req)
				if err != nil {
					answered <- 0
					return
				}
				resp.Body.Close()
				answered <- resp.StatusCode
			}()
			<-started
			tc.end(front, cancel)
			if got := <-why; got != tc.want {
				t.Fatalf("the home's reason: %v, want %v", got, tc.want)
			}
			if status := <-answered; tc.want != nil && status != http.StatusServiceUnavailable {
				t.Fatalf("the front answered its client %d, want 503", status)
			}
		})
	}
}
