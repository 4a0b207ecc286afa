package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestDecodeErrorShapes(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		headers map[string]string
		body    string
		want    Error
	}{
		{"plain", 404, nil, `{"detail":"no such worker"}`,
			Error{Status: 404, Message: "no such worker"}},
		{"compatible", 401, map[string]string{"X-Request-Id": "r1"},
			`{"detail":"Invalid API key","error":{"message":"Invalid API key","type":"authentication_error","code":"invalid_api_key","param":null}}`,
			Error{Status: 401, Message: "Invalid API key", Type: "authentication_error", Code: "invalid_api_key", RequestID: "r1"}},
		{"nested", 403, nil, `{"detail":{"error":{"message":"encrypt it","type":"e2e_required"}}}`,
			Error{Status: 403, Message: "encrypt it", Type: "e2e_required"}},
		{"validation", 422, nil,
			`{"detail":"Invalid request: name: required","error":{"message":"Invalid request: name: required","type":"invalid_request_error"},"errors":[{"field":"name","message":"required","type":"missing"}]}`,
			Error{Status: 422, Message: "Invalid request: name: required", Type: "invalid_request_error"}},
		{"capacity", 429, map[string]string{"Retry-After": "7", "X-Svc-Error-Code": "moderation_capacity"},
			`{"detail":"busy","error":{"message":"busy","type":"rate_limit_exceeded"}}`,
			Error{Status: 429, Message: "busy", Type: "rate_limit_exceeded", Code: "moderation_capacity", RetryAfter: 7 * time.Second}},
		{"not json", 502, nil, "Bad Gateway\n", Error{Status: 502, Message: "Bad Gateway"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			err := New(srv.URL, "k").Do(context.Background(), "GET", "/x", nil, nil)
			var got *Error
			if !errors.As(err, &got) {
				t.Fatalf("err = %v", err)
			}
			if got.Status != tt.want.Status || got.Message != tt.want.Message || got.Type != tt.want.Type ||
				got.Code != tt.want.Code || got.RequestID != tt.want.RequestID || got.RetryAfter != tt.want.RetryAfter {
				t.Fatalf("got %+v\nwant %+v", *got, tt.want)
			}
			if tt.name == "validation" && (len(got.Fields) != 1 || got.Fields[0].Field != "name") {
				t.Fatalf("fields = %+v", got.Fields)
			}
		})
	}
}

func TestDoSendsKeyAndDecodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			w.WriteHeader(401)
			return
		}
		_, _ = w.Write([]byte(`{"version":"v1"}`))
	}))
	defer srv.Close()
	var out struct{ Version string }
	if err := New(srv.URL+"/", "secret").Do(context.Background(), "GET", "/v", nil, &out); err != nil || out.Version != "v1" {
		t.Fatalf("Do = %v, %+v", err, out)
	}
}

func TestConnectError(t *testing.T) {
	err := NewSocket("/nonexistent/admin.sock").Do(context.Background(), "GET", "/x", nil, nil)
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.Target != "the admin socket /nonexistent/admin.sock" {
		t.Fatalf("err = %v", err)
	}
}

func TestChatStream(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		chunks int
		status int
	}{
		{"done", "data: {\"id\":\"a\"}\n\n: keep-alive\n\ndata: {\"id\":\"b\"}\n\ndata: [DONE]\n\n", 2, 0},
		{"error frame", "data: {\"id\":\"a\"}\n\ndata: {\"error\":{\"message\":\"busy\",\"type\":\"rate_limit_exceeded\",\"status\":429,\"retry_after\":3}}\n\ndata: [DONE]\n\n", 1, 429},
		{"cut", "data: {\"id\":\"a\"}\n\n", 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Request-Id", "rid")
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			n := 0
			err := New(srv.URL, "k").ChatStream(context.Background(), map[string]any{"model": "m"}, func(json.RawMessage) error { n++; return nil })
			if n != tt.chunks {
				t.Fatalf("%d chunks, want %d", n, tt.chunks)
			}
			var e *Error
			switch tt.status {
			case 0:
				if err != nil {
					t.Fatal(err)
				}
			case -1:
				if err == nil || errors.As(err, &e) {
					t.Fatalf("err = %v", err)
				}
			default:
				if !errors.As(err, &e) || e.Status != tt.status || e.RetryAfter != 3*time.Second || e.RequestID != "rid" {
					t.Fatalf("err = %#v", err)
				}
			}
		})
	}
}

// A server that takes the request and says nothing fails the call after
// the wait for its kind, and a stream that falls silent fails too; a
// stream kept alive does not.
func TestSilentServer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Accept") != "text/event-stream" {
			<-release
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		_, _ = io.WriteString(w, ": keep-alive\n\n")
		fl.Flush()
		if bytes.Contains(body, []byte("slow reader")) {
			// One chunk, then silence while the caller takes its time.
			_, _ = io.WriteString(w, "data: {\"x\":1}\n\n")
			fl.Flush()
			time.Sleep(400 * time.Millisecond)
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		if !bytes.Contains(body, []byte("alive")) {
			<-release
			return
		}
		for range 20 {
			time.Sleep(20 * time.Millisecond)
			_, _ = io.WriteString(w, ": keep-alive\n\n")
			fl.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	defer close(release)
	c := New(srv.URL, "k")
	c.waits = waits{call: 50 * time.Millisecond, answer: 80 * time.Millisecond, idle: 250 * time.Millisecond}
	ctx := context.Background()
	none := func(json.RawMessage) error { return nil }

	var se *StallError
	if _, err := c.Workers(ctx); !errors.As(err, &se) || se.Wait != c.waits.call || se.Target != srv.URL {
		t.Errorf("workers: %v", err)
	}
	if _, err := c.Chat(ctx, map[string]any{"model": "m"}); !errors.As(err, &se) || se.Wait != c.waits.answer {
		t.Errorf("chat: %v", err)
	}
	// The stream's headers come at once, then nothing.
	if err := c.ChatStream(ctx, map[string]any{"model": "m"}, none); !errors.As(err, &se) || se.Wait != c.waits.idle {
		t.Errorf("silent stream: %v", err)
	}
	// Keep-alives 20 ms apart keep a stream alive past its 250 ms.
	if err := c.ChatStream(ctx, map[string]any{"model": "alive"}, none); err != nil {
		t.Errorf("stream kept alive: %v", err)
	}
	// Nor does the caller's own time count: a chunk handled for longer
	// than the stream may be silent.
	slow := func(json.RawMessage) error { time.Sleep(450 * time.Millisecond); return nil }
	if err := c.ChatStream(ctx, map[string]any{"model": "slow reader"}, slow); err != nil {
		t.Errorf("stream with a slow reader: %v", err)
	}
	// The caller's own end is not a stall.
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(10*time.Millisecond, cancel)
	if _, err := c.Workers(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
