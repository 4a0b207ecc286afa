package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With --max-connections reached, a new client is answered with the API's
// 503, not fasthttp's plain text, and the clients already connected go on.
func TestConnectionCapAnswersInTheAPIShape(t *testing.T) {
	s := startServer(t, "", "--max-connections", "2")
	key := s.adminKey()
	addr := strings.TrimPrefix(s.URL, "http://")
	get := func(c net.Conn) *http.Response {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+key+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp := get(c); resp.StatusCode != 200 {
			t.Fatalf("within the cap: %d", resp.StatusCode)
		}
		held = append(held, c)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	resp := get(over)
	var body struct {
		Detail string `json:"detail"`
		Error  struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("over the cap: %v", err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || body.Error.Type != "service_unavailable" ||
		!strings.HasPrefix(body.Error.Message, "Service temporarily unavailable, please retry") {
		t.Fatalf("over the cap: %d %v %+v", resp.StatusCode, resp.Header, body)
	}
	// The connected clients are still served on their connections.
	for _, c := range held {
		if resp := get(c); resp.StatusCode != 200 {
			t.Fatalf("a held connection after the refusal: %d", resp.StatusCode)
		}
	}
	// The operator sees the refusals: counted, and said in the log.
	_ = held[0].SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(held[0], "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(held[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(m), "svc_connections_refused_total 1\n") {
		t.Fatalf("metrics lack the refusal:\n%s", m)
	}
	s.waitLog("connections refused", 5*time.Second)
}
