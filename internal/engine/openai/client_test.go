package openai

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// TestKeptAliveConnectionClosed checks requests on a connection the
// engine closed after its last answer, as servers do on their own idle
// timeout: a JSON request goes again on a new connection, and an upload,
// which cannot be sent twice, always goes on a new one.
func TestKeptAliveConnectionClosed(t *testing.T) {
	for _, say := range []bool{false, true} {
		name := map[bool]string{false: "without saying", true: "saying so"}[say]
		t.Run(name, func(t *testing.T) {
			var handled atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				handled.Add(1)
				body := vllmPlainCompletion
				switch r.URL.Path {
				case embeddingsPath:
					body = embeddingsBody
				case transcriptionsPath:
					body = openaiVerbose
				}
				nc, bw, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer nc.Close()
				head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
				if say {
					head += "Connection: close\r\n"
				}
				fmt.Fprintf(bw, "%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
				bw.Flush()
			}))
			defer srv.Close()
			e := newEngine(t, srv.URL)
			ctx := t.Context()
			for i := range 3 {
				wantStatus(t, e.Serve(ctx, chatReq(false, chatRequest), &sink{}), 200)
				wantStatus(t, e.Serve(ctx, &engine.Request{Kind: api.KindEmbeddings, Body: []byte(`{"input":"x"}`)}, &sink{}), 200)
				r := e.Serve(ctx, transcriptionReq(t, api.TranscriptionParams{Bytes: 4}, strings.NewReader("RIFF")), &sink{})
				wantStatus(t, r, 200)
				if got := handled.Load(); got != int64(3*(i+1)) {
					t.Fatalf("the server handled %d requests, want %d", got, 3*(i+1))
				}
			}
		})
	}
}

// TestCancelClosesTheConnection checks that a request cancelled at any
// point of the answer reaches the engine as a closed connection.
func TestCancelClosesTheConnection(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
		// head is what the server sends before it waits: nothing, the
		// header, or part of the body.
		head string
	}{
		{name: "before the answer", head: ""},
		{name: "before the answer, streaming", stream: true, head: ""},
		{name: "after the header", head: "header"},
		{name: "mid-body", head: "body"},
		{name: "mid-body, streaming", stream: true, head: "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent, serverSaw := make(chan struct{}), make(chan struct{})
			f := newFake(t, map[string]http.HandlerFunc{
				chatPath: func(w http.ResponseWriter, r *http.Request) {
					switch tt.head {
					case "header":
						w.Header().Set("Content-Length", "1000")
						w.WriteHeader(200)
						w.(http.Flusher).Flush()
					case "body":
						sseHandler(0, frames(vllmContent1)...)(w, r)
					}
					close(sent)
					select {
					case <-r.Context().Done():
						close(serverSaw)
					case <-time.After(10 * time.Second):
					}
				},
			})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() {
				<-sent
				if tt.stream && tt.head == "body" {
					return // the sink cancels, once it has the event
				}
				cancel()
			}()
			s := &sink{onEvent: func(int) error { cancel(); return nil }}
			wantStatus(t, newEngine(t, f.URL).Serve(ctx, chatReq(tt.stream, chatRequest), s), 499)
			select {
			case <-serverSaw:
			case <-time.After(5 * time.Second):
				t.Fatal("the engine did not see the request cancelled")
			}
		})
	}
}

// TestIdleConnections checks that a connection is kept for the next
// request, and closed once idle for idleTimeout.
func TestIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMemFake(t, map[string]http.HandlerFunc{chatPath: jsonHandler(200, vllmPlainCompletion)})
		var opened, closed atomic.Int64
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := f.dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			opened.Add(1)
			return &closeCounter{Conn: c, n: &closed}, nil
		}
		e := newEngineWith(t, f.URL, dial)
		for range 3 {
			wantStatus(t, e.Serve(t.Context(), chatReq(false, chatRequest), &sink{}), 200)
			time.Sleep(idleTimeout / 2)
		}
		if opened.Load() != 1 || closed.Load() != 0 {
			t.Fatalf("%d connections opened and %d closed for 3 requests in turn", opened.Load(), closed.Load())
		}
		time.Sleep(idleTimeout/2 - time.Second)
		synctest.Wait()
		if closed.Load() != 0 {
			t.Fatal("closed before its idle timeout")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if closed.Load() != 1 {
			t.Fatal("not closed after its idle timeout")
		}
	})
}

type closeCounter struct {
	net.Conn
	once sync.Once
	n    *atomic.Int64
}

func (c *closeCounter) Close() error {
	c.once.Do(func() { c.n.Add(1) })
	return c.Conn.Close()
}

// TestShortUpload checks that an upload ending before the length it was
// sent with fails the request, instead of leaving the engine waiting for
// the rest.
func TestShortUpload(t *testing.T) {
	var srv transcriptionServer
	f := newStreamServer(t, srv.handler(200, "application/json", openaiVerbose))
	r := newEngine(t, f.URL).Serve(t.Context(), transcriptionReq(t, api.TranscriptionParams{Bytes: 1000}, strings.NewReader("RIFF")), &sink{})
	wantStatus(t, r, http.StatusBadGateway)
	if !strings.Contains(errMsg(r), "short") {
		t.Fatalf("got %+v", r.Error)
	}
}

func TestErrorAnswerLimit(t *testing.T) {
	big := strings.Repeat("x", maxErrorBody+100)
	f := newFake(t, map[string]http.HandlerFunc{chatPath: func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, big)
	}})
	r := newEngine(t, f.URL).Serve(t.Context(), chatReq(false, chatRequest), &sink{})
	wantStatus(t, r, http.StatusServiceUnavailable)
	// The body is read to the limit, and its message is its beginning,
	// cut short.
	if msg := errMsg(r); len(msg) > 600 || !strings.HasSuffix(msg, "...") || !strings.HasPrefix(big, strings.TrimSuffix(msg, "...")) {
		t.Fatalf("message of %d bytes, want the body's beginning, cut", len(msg))
	}
}

func TestBaseURLCredentials(t *testing.T) {
	tests := []struct {
		name, userinfo, key, want string
	}{
		{name: "none", want: ""},
		{name: "API key", key: "sk-1", want: "Bearer sk-1"},
		{name: "user information", userinfo: "user:pa%20ss@", want: "Basic dXNlcjpwYSBzcw=="},
		{name: "the API key first", userinfo: "user:pass@", key: "sk-1", want: "Bearer sk-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{chatPath: jsonHandler(200, vllmPlainCompletion)})
			e, err := New(Config{BaseURL: strings.Replace(f.URL, "://", "://"+tt.userinfo, 1), APIKey: tt.key})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(t.Context())
			wantStatus(t, e.Serve(t.Context(), chatReq(false, chatRequest), &sink{}), 200)
			if got := f.last(t, chatPath).Header.Get("Authorization"); got != tt.want {
				t.Fatalf("Authorization %q, want %q", got, tt.want)
			}
		})
	}
}

// TestProxy checks that a server the environment names a proxy for is
// reached through it: a plain request is sent to the proxy with the whole
// URL, an https one through a CONNECT tunnel.
func TestProxy(t *testing.T) {
	type seen struct{ method, uri, auth string }
	var mu sync.Mutex
	var got []seen
	engineTLS := httptest.NewUnstartedServer(http.NotFoundHandler())
	engineTLS.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake
	engineTLS.StartTLS()
	defer engineTLS.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, r.Header.Get("Proxy-Authorization")})
		mu.Unlock()
		if r.Method != http.MethodConnect {
			jsonHandler(200, vllmPlainCompletion)(w, r)
			return
		}
		// Every tunnel leads to the TLS server, whatever it was asked for.
		up, err := net.Dial("tcp", engineTLS.Listener.Addr().String())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
		nc, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer nc.Close()
		io.WriteString(bw, "HTTP/1.1 200 Connection established\r\n\r\n")
		bw.Flush()
		go io.Copy(up, nc)
		io.Copy(nc, up)
	}))
	defer proxy.Close()
	viaProxy := func(*url.URL) (*url.URL, error) {
		return url.Parse(strings.Replace(proxy.URL, "://", "://u:p@", 1))
	}
	const auth = "Basic dTpw"
	saw := func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}

	engineAt := func(base string) *Engine {
		e := newEngine(t, base)
		c, err := newClient(e.base, "", nil, viaProxy)
		if err != nil {
			t.Fatal(err)
		}
		e.client = c
		t.Cleanup(c.close)
		return e
	}

	r := engineAt("http://engine.invalid:8000/api").Serve(t.Context(), chatReq(false, chatRequest), &sink{})
	wantStatus(t, r, 200)
	if want := (seen{http.MethodPost, "http://engine.invalid:8000/api" + chatPath, auth}); !slices.Equal(saw(), []seen{want}) {
		t.Fatalf("the proxy saw %+v, want %+v", saw(), want)
	}

	// The TLS server's certificate is not trusted: the handshake failing
	// shows it went through the tunnel.
	r = engineAt("https://engine.invalid").Serve(t.Context(), chatReq(false, chatRequest), &sink{})
	wantStatus(t, r, http.StatusBadGateway)
	if !strings.Contains(errMsg(r), "certificate") {
		t.Fatalf("got %+v", r.Error)
	}
	if want := (seen{http.MethodConnect, "engine.invalid:443", auth}); len(saw()) != 2 || saw()[1] != want {
		t.Fatalf("the proxy saw %+v, want %+v", saw(), want)
	}
}

func TestProxyRefused(t *testing.T) {
	socks := func(*url.URL) (*url.URL, error) { return url.Parse("socks5://127.0.0.1:1080") }
	if _, err := newClient("http://10.0.0.1:8000", "", nil, socks); err == nil {
		t.Fatal("a SOCKS proxy was accepted")
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusProxyAuthRequired)
	}))
	defer proxy.Close()
	c, err := newClient("https://engine.invalid", "", nil, func(*url.URL) (*url.URL, error) { return url.Parse(proxy.URL) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if _, err := c.do(t.Context(), &request{method: http.MethodGet, path: "/v1/models"}); err == nil || !strings.Contains(err.Error(), "407") {
		t.Fatalf("err = %v", err)
	}
}
