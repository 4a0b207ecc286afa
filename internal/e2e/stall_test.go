package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/usage"
)

// Streaming clients that never read hold every slot of their worker only
// until --stall-timeout: then each is cut off, its slot freed, the next
// request served, and its 499 row bills no more text than the client
// received, not the megabytes the engine could have queued for it.
func TestStalledClientsFreeTheirSlots(t *testing.T) {
	s := startServer(t, "", "--stall-timeout", "1s")
	key := s.adminKey()
	const slots = 3
	startWorker(t, s.URL, s.tokenFile(), "sim-box", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", fmt.Sprint(slots))
	addr := strings.TrimPrefix(s.URL, "http://")
	// Far more than socket buffers hold: a client that reads nothing can
	// never let this finish.
	body := streamBody("sim-long", "go on\nsim: tokens=30000", nil)
	// A small receive window, as a client on a slow link has: what it
	// holds is a few kilobytes, which the gateway wrote in writes of many
	// chunks each once the connection backed up, and each chunk received
	// whole is billed.
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	var conns []net.Conn
	for range slots {
		c, err := dialer.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
		conns = append(conns, c)
	}

	rows := map[string]map[string]any{}
	if !harness.Eventually(20*time.Second, func() bool {
		var log []map[string]any
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=100", "", bearer(key)).Body, &log)
		for _, r := range log {
			rows[r["id"].(string)] = r
		}
		return len(rows) == slots
	}) {
		t.Fatalf("the stalled streams were never cut off: rows %v", rows)
	}
	s.workerNamed(key, "sim-box", func(w map[string]any) bool { return w["active_tasks"].(float64) == 0 })
	if r := s.do("POST", "/v1/chat/completions", streamBody("sim-chat", "hi\nsim: tokens=5", nil), bearer(key)); r.Status != 200 ||
		!bytes.Contains(r.Body, []byte("data: [DONE]")) {
		t.Fatalf("a request after the stall: %d %s", r.Status, r.Body)
	}

	for i, c := range conns {
		id, chars := received(t, c)
		row := rows[id]
		if row == nil {
			t.Fatalf("stream %d (%s) has no row: %v", i, id, rows)
		}
		billed := int(row["completion_tokens"].(float64))
		if row["status_code"] != 499.0 || row["error_message"] != "Client disconnected" || row["tokens_estimated"] != true ||
			billed < 1 || billed > usage.EstimateTokens(chars) {
			t.Fatalf("stream %d received %d characters (%d tokens); its row %v", i, chars, usage.EstimateTokens(chars), row)
		}
	}
}

// received reads what a cut-off stream's client still holds: its request
// id and the characters of content in the chunks that arrived whole.
func received(t *testing.T, c net.Conn) (id string, chars int) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the stalled stream's response: %v", err)
	}
	raw, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("the stalled stream ended cleanly after %d bytes", len(raw))
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		d, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || json.Unmarshal(d, &chunk) != nil {
			continue
		}
		for _, ch := range chunk.Choices {
			chars += len([]rune(ch.Delta.Content))
		}
	}
	return resp.Header.Get("X-Request-Id"), chars
}
