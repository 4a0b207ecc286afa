package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/svc-dev/svc/internal/buildinfo"
)

// A request with both Content-Length and Transfer-Encoding is refused
// with 400 and its connection closed, so bytes a proxy would read as the
// next request are never answered; the same request chunked alone is
// served and its connection kept.
func TestAmbiguousFramingClosesTheConnection(t *testing.T) {
	ok := func(c *call) error {
		writeJSON(c.ctx, http.StatusOK, map[string]string{"path": string(c.ctx.Path())})
		return nil
	}
	addr := servePublic(t,
		&route{method: "POST", path: "/echo", access: accessPublic, handle: ok},
		&route{method: "GET", path: "/smuggled", access: accessPublic, handle: ok})

	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	send := func(framing string) []int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\n"+framing+"\r\n0\r\n\r\n"+smuggled); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		var statuses []int
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return statuses
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
			if resp.Close {
				return statuses
			}
		}
	}
	for _, framing := range []string{
		"Content-Length: 40\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
		"transfer-encoding: chunked\r\ncontent-length: 0\r\n",
		// fasthttp takes identity for no framing at all, and the body it
		// announces for the next request.
		"Transfer-Encoding: identity\r\n",
		"Transfer-Encoding: Identity\r\n",
	} {
		if got := send(framing); len(got) != 1 || got[0] != http.StatusBadRequest {
			t.Errorf("%q: answers %v, want one 400 and the connection closed", strings.TrimSpace(framing), got)
		}
	}
	if got := send("Transfer-Encoding: chunked\r\n"); len(got) != 2 || got[0] != 200 || got[1] != 200 {
		t.Errorf("chunked alone: answers %v, want both requests served", got)
	}
	// Connection options are in any case: one naming close closes it
	// after its answer, the request behind it unanswered.
	for _, conn := range []string{"Connection: Close\r\n", "Connection: keep-alive, CLOSE\r\n"} {
		if got := send(conn + "Transfer-Encoding: chunked\r\n"); len(got) != 1 || got[0] != 200 {
			t.Errorf("%q: answers %v, want one 200 and the connection closed", strings.TrimSpace(conn), got)
		}
	}
}

// A request line of another HTTP major version is answered 505 and its
// connection closed; HTTP/1.0, HTTP/1.1 and a later HTTP/1 minor are
// served.
func TestHTTPVersions(t *testing.T) {
	addr := servePublic(t, &route{method: "GET", path: "/ok", access: accessPublic, handle: func(c *call) error {
		writeJSON(c.ctx, http.StatusOK, map[string]string{})
		return nil
	}})
	for _, tc := range []struct {
		version string
		status  int
	}{
		{"HTTP/1.1", 200}, {"HTTP/1.0", 200}, {"HTTP/1.2", 200},
		{"HTTP/2.0", 505}, {"HTTP/9.9", 505}, {"HTTP/0.9", 505},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /ok "+tc.version+"\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.version, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != tc.status || tc.status == 505 && (!resp.Close || !strings.Contains(string(body), `"detail":"HTTP version not supported`)) {
			t.Errorf("%s: %d close=%v %s", tc.version, resp.StatusCode, resp.Close, body)
		}
	}
}

// servePublic serves routes as the public listener does, on a loopback
// port of the test's own, until the test ends; it returns the address.
func servePublic(t *testing.T, routes ...*route) string {
	t.Helper()
	return servePublicOn(t, &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{})}, routes...)
}

// servePublicOn is servePublic with the server s.
func servePublicOn(t *testing.T, s *Server, routes ...*route) string {
	t.Helper()
	l := s.newListener(newMux(routes), false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = l.srv.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// A request fasthttp cannot parse is answered in the spec's error shape,
// 400 for a malformed head and 431 for headers over the limit, and
// counted in svc_http_requests_total as a request no route matched.
func TestMalformedRequestsAreAnsweredAndCounted(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{})}
	ok := &route{method: "GET", path: "/ok", access: accessPublic, handle: func(c *call) error { c.ctx.SetStatusCode(200); return nil }}
	addr := servePublicOn(t, s, ok)
	for _, tc := range []struct {
		name, head string
		status     int
		detail     string
	}{
		{"a header without a colon", "GET /ok HTTP/1.1\r\nHost: x\r\nbroken\r\n\r\n", 400, "Malformed HTTP request"},
		{"a bad Content-Length", "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: x1\r\n\r\n", 400, "Malformed HTTP request"},
		{"headers over the limit", "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", headerLimit+1024) + "\r\n\r\n", 431, "Request headers too large"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), `"detail":"`+tc.detail) || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, body)
		}
	}
	counted := testutil.ToFloat64(s.metrics.requests.WithLabelValues("unmatched", "GET", "400")) +
		testutil.ToFloat64(s.metrics.requests.WithLabelValues("unmatched", "POST", "400")) +
		testutil.ToFloat64(s.metrics.requests.WithLabelValues("unmatched", "other", "400"))
	big := testutil.ToFloat64(s.metrics.requests.WithLabelValues("unmatched", "GET", "431")) +
		testutil.ToFloat64(s.metrics.requests.WithLabelValues("unmatched", "other", "431"))
	if counted != 2 || big != 1 {
		t.Fatalf("counted %v malformed requests and %v with headers too large, want 2 and 1", counted, big)
	}
}
