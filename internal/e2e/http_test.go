package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reply is an HTTP answer with its body read.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object.
func (r reply) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

type header struct{ k, v string }

func bearer(key string) header { return header{"Authorization", "Bearer " + key} }

// request sends one request with hc to base+path.
func request(t testing.TB, hc *http.Client, method, url, body string, hs ...header) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hs {
		req.Header.Set(h.k, h.v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// async sends a request from another goroutine; failures come back as a
// reply with Status -1 and the error as Body, since t.Fatal may not be
// called off the test's goroutine.
func (s *server) async(method, path, body string, hs ...header) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		if err != nil {
			out <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		for _, h := range hs {
			req.Header.Set(h.k, h.v)
		}
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			out <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			out <- reply{Status: -1, Body: []byte(err.Error())}
			return
		}
		out <- reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}()
	return out
}

// do calls the public API.
func (s *server) do(method, path, body string, hs ...header) reply {
	s.t.Helper()
	return request(s.t, http.DefaultClient, method, s.URL+path, body, hs...)
}

// console calls the console API over the admin socket.
func (s *server) console(method, path, body string) reply {
	s.t.Helper()
	sock := filepath.Join(s.Data, "admin.sock")
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer hc.CloseIdleConnections()
	return request(s.t, hc, method, "http://svc"+path, body)
}
