package server

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

// A server that holds its socket alone answers the connections still
// queued on it when it stops, each with a 503 asking its client to retry,
// rather than closing the socket and resetting them; a connection after
// that is refused, as before.
func TestStoppingAloneAnswersTheQueue(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kl := &keptListener{TCPListener: ln.(*net.TCPListener)}
	addr := kl.Addr().String()
	if err := kl.Close(); err != nil { // the drain stops accepting
		t.Fatal(err)
	}
	requests := []string{
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n" + `{"model":"m"}` + "    ",
		"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	}
	var clients []net.Conn
	for _, req := range requests {
		c := dialAndSend(t, addr, req)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		clients = append(clients, c)
	}
	released := make(chan int, 1)
	go func() {
		n, err := kl.release(false)
		if err != nil {
			t.Errorf("release = %v", err)
		}
		released <- n
	}()
	for i, c := range clients {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("queued request %d: %v, want the 503", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		c.Close() // as a client does on Connection: close, which ends the wait for it
		if err != nil {
			t.Fatalf("queued request %d: reading the answer: %v", i, err)
		}
		var e struct {
			Error struct{ Message, Type string }
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !resp.Close ||
			json.Unmarshal(body, &e) != nil || e.Error.Type != "service_unavailable" ||
			!strings.HasPrefix(e.Error.Message, "Service temporarily unavailable, please retry") {
			t.Fatalf("queued request %d: %d, Retry-After %q, close %v, body %s", i, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close, body)
		}
	}
	if n := <-released; n != len(requests) {
		t.Fatalf("release answered %d connections, want %d", n, len(requests))
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("a connection after the release was accepted")
	}
}
