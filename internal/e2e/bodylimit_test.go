package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// TestUnauthenticatedBodiesAreBounded: the key is checked from the
// headers, before the body is read, so a caller whose key does not
// authenticate is held to a small body: refused with its 401, by Content-Length or as a chunked
// body arrives, and the gateway's memory does not grow by what it sent.
// A valid key keeps the full limit.
func TestUnauthenticatedBodiesAreBounded(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	big := chatBody("sim-chat", strings.Repeat("x", 3<<20), false)

	// The answer comes from the headers alone: nothing of the body is sent.
	for _, c := range []struct {
		name, auth, code string
	}{
		{"no key", "", "missing_api_key"},
		{"bad key", "Authorization: Bearer svc_k_AAAAAAAAAAAA_" + strings.Repeat("x", 40) + "\r\n", "invalid_api_key"},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", c.auth, len(big))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s, 3 MB announced: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(body), c.code) || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s, 3 MB announced = %d %v %s", c.name, resp.StatusCode, resp.Header, body)
		}
	}

	// Chunked, 200 MB of it: refused once the first megabyte is in, long
	// before the rest is sent; the gateway does not hold it.
	_, before := statusKB(t, s.Pid())
	pr, pw := io.Pipe()
	go func() {
		chunk := []byte(strings.Repeat("y", 1<<20))
		for range 200 {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	pr.CloseWithError(io.ErrClosedPipe)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 && resp.StatusCode != 401 {
			t.Errorf("chunked 200 MB without a key = %d %s", resp.StatusCode, body)
		}
	}
	if _, after := statusKB(t, s.Pid()); after-before > 16<<10 {
		t.Errorf("the gateway's peak memory grew by %d kB for a refused anonymous upload", after-before)
	}

	// The same 3 MB with a valid key is read and judged on its content.
	if r := s.do("POST", "/v1/chat/completions", big, bearer(key)); r.Status == 413 || r.Status == 401 {
		t.Errorf("3 MB body with a valid key = %d %s", r.Status, r.Body)
	}
}

// statusKB reads a process's resident and peak resident memory in kB.
func statusKB(t *testing.T, pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skip("no /proc here")
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}

// TestOversizeByLengthHasItsRow: a body refused from its Content-Length,
// before a byte of it is read, is a refused request like any other and
// has its usage row.
func TestOversizeByLengthHasItsRow(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	for _, c := range []struct{ path, kind string }{
		{"/v1/chat/completions", "chat"},
		{"/v1/audio/transcriptions", "audio"},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", c.path, key, 40<<20)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s, 40 MB announced: %v", c.path, err)
		}
		_, _ = io.ReadAll(resp.Body)
		conn.Close()
		id := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != 413 || id == "" {
			t.Fatalf("%s, 40 MB announced = %d, request id %q", c.path, resp.StatusCode, id)
		}
		if row := s.usageRow(key, id); row["status_code"] != 413.0 || row["request_type"] != c.kind {
			t.Errorf("%s: row %v, want a %s row with status 413", c.path, row, c.kind)
		}
	}
}

// TestOversizeByLengthRefusesTheKeyFirst: a caller the route refuses is
// told so (403 naming the permission, or the organisation's require_e2e),
// not to shrink a body it could never send, and the refused inference
// request has its row.
func TestOversizeByLengthRefusesTheKeyFirst(t *testing.T) {
	s := startServer(t, "")
	announce := func(path, key string) (int, string, string) {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, key, 40<<20)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s, 40 MB announced: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header.Get("X-Request-Id")
	}
	reader := keyFor(t, s, "reader", "owner", "usage:read")
	for _, c := range []struct{ path, kind string }{
		{"/v1/chat/completions", "chat"},
		{"/v1/audio/transcriptions", "audio"},
	} {
		status, body, id := announce(c.path, reader)
		if status != 403 || !strings.Contains(body, "inference:write") {
			t.Errorf("%s, 40 MB announced by a key without inference:write = %d %s", c.path, status, body)
		}
		if row := s.usageRow(reader, id); row["status_code"] != 403.0 || row["request_type"] != c.kind {
			t.Errorf("%s: row %v, want a %s row with status 403", c.path, row, c.kind)
		}
	}

	// A clear request from an organisation that requires sealed ones is
	// refused for that, whatever its size.
	key := s.adminKey()
	if r := s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e": true}`); r.Status != 200 {
		t.Fatalf("require_e2e: %d %s", r.Status, r.Body)
	}
	status, body, id := announce("/v1/chat/completions", key)
	if status != 403 || !strings.Contains(body, "e2e_required") {
		t.Errorf("40 MB of clear chat under require_e2e = %d %s", status, body)
	}
	if row := s.usageRow(key, id); row["status_code"] != 403.0 {
		t.Errorf("row %v, want status 403", row)
	}
}

// TestBodiesAreUTF8: JSON is UTF-8 text, so a body with other bytes in it
// is malformed JSON, on the inference routes and the rest alike, and the
// refused inference request has its row.
func TestBodiesAreUTF8(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings", "/api/v1/compute/instances"} {
		r := s.do("POST", path, "{\"model\":\"sim-chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\xff\xfe\"}]}", bearer(key))
		if d, _ := r.JSON(t)["detail"].(string); r.Status != 400 || !strings.Contains(d, "not UTF-8") {
			t.Errorf("%s with a body that is not UTF-8 = %d %s", path, r.Status, r.Body)
		}
		if path == "/v1/chat/completions" {
			if row := s.usageRow(key, r.Header.Get("X-Request-Id")); row["status_code"] != 400.0 || row["model"] != "sim-chat" {
				t.Errorf("row %v, want a 400 row for sim-chat", row)
			}
		}
	}
	// Text in any script is UTF-8 and goes past the check (to find no
	// worker here).
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "héllo 日本語 🦊", false), bearer(key)); r.Status == 400 {
		t.Errorf("a UTF-8 body = %d %s", r.Status, r.Body)
	}
}

// A member sent under two cases, or a member the gateway reads sent in
// another case, is refused on every route that forwards what it does not
// own, before a worker could obey the spelling the gateway did not check;
// the refused request has its row.
func TestCaseTwinsAreRefused(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	for _, c := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"MAX_TOKENS":100000}`, "max_tokens"},
		{"/v1/embeddings", `{"model":"sim-embed","input":"hi","Model":"other"}`, "model"},
		{"/v1/completions", `{"model":"sim-chat","prompt":"hi","max_tokens":5,"Max_Tokens":100000}`, "max_tokens"},
		// A field read here, sent alone in another case: the gateway
		// would not see it, an engine would.
		{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"N":100}`, "n"},
		{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi","Content":"other"}]}`, "messages.0.content"},
		{"/v1/audio/speech", `{"model":"sim-tts","input":"hi","Voice":"x"}`, "voice"},
		{"/v1/rerank", `{"model":"sim-rerank","query":"q","documents":["a"],"TOP_N":5}`, "top_n"},
		{"/v1/images/generations", `{"model":"sim-image","prompt":"p","N":100}`, "n"},
	} {
		r := s.do("POST", c.path, c.body, bearer(key))
		var e struct {
			Error struct{ Code, Param string }
		}
		_ = json.Unmarshal(r.Body, &e)
		if r.Status != 400 || e.Error.Code != "ambiguous_field" || e.Error.Param != c.param {
			t.Errorf("%s with %s under two cases = %d %s", c.path, c.param, r.Status, r.Body)
			continue
		}
		if row := s.usageRow(key, r.Header.Get("X-Request-Id")); row["status_code"] != 400.0 {
			t.Errorf("%s: row %v, want a 400 row", c.path, row)
		}
	}
}

// The bodies held while they arrive hold no more memory together than
// --body-memory-mb: past it, a request whose body needs more is answered
// 503 to retry at once, the others go on, and the memory is given back
// when a request is done. A body announced large costs what has come of
// it, not its announced length.
func TestBodiesHeldWithinTheirMemory(t *testing.T) {
	s := startServer(t, "", "--body-memory-mb", "4")
	key := s.adminKey()
	big := chatBody("sim-chat", strings.Repeat("x", 3<<20), false)
	addr := strings.TrimPrefix(s.URL, "http://")
	// One client sends all of its 3 MB body but the last byte, and waits.
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fmt.Fprintf(held, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(big), big[:len(big)-1])

	// Held once the gateway counts it.
	if !harness.Eventually(10*time.Second, func() bool {
		v, ok := metricValue(s, "svc_request_body_bytes")
		return ok && v >= 3<<20
	}) {
		t.Fatal("the held body is not counted in svc_request_body_bytes")
	}
	busy := func() (reply, bool) {
		r := s.do("POST", "/v1/chat/completions", big, bearer(key))
		return r, r.Status == 503 && strings.Contains(string(r.Body), "large request bodies") && r.Header.Get("Retry-After") != ""
	}
	var r reply
	if !harness.Eventually(10*time.Second, func() bool { var ok bool; r, ok = busy(); return ok }) {
		t.Fatalf("another 3 MB body while the first is held = %d %s, want 503 to retry", r.Status, r.Body)
	}
	// Small bodies go on meanwhile.
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key)); r.Status == 503 && strings.Contains(string(r.Body), "large request bodies") {
		t.Fatalf("a small body while a large one is held = %d %s", r.Status, r.Body)
	}
	// The first ends; its memory is the next one's.
	if _, err := held.Write([]byte(big[len(big)-1:])); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(held), nil); err != nil {
		t.Fatalf("the held request's answer: %v", err)
	} else {
		resp.Body.Close()
	}
	if !harness.Eventually(10*time.Second, func() bool { _, ok := busy(); return !ok }) {
		t.Fatal("the memory of a finished request was not given back")
	}
	// A body announced at 30 MB of which nothing comes costs nothing.
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", key, 30<<20)
	}
	time.Sleep(500 * time.Millisecond)
	if _, ok := busy(); ok {
		t.Fatal("bodies announced but not sent took the memory")
	}
}

// metricValue reads an unlabelled metric from the gateway's /metrics.
func metricValue(s *server, name string) (float64, bool) {
	for line := range strings.Lines(string(s.do("GET", "/metrics", "").Body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
