package openai

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// viaFasthttp is what fasthttp's Request.Write sends for r.
func viaFasthttp(t *testing.T, c *client, r *request) string {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	c.fill(req, r)
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	if err := writeRequest(req, bw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// viaHead is what try sends for r.
func viaHead(t *testing.T, c *client, r *request) string {
	t.Helper()
	var b bytes.Buffer
	bw := bufio.NewWriterSize(&b, 16) // smaller than a head: Write goes in parts
	if err := writeWhole(bw, c.appendHead(nil, r), r.body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestAppendHeadAsFasthttp(t *testing.T) {
	clients := []*client{
		{host: "127.0.0.1:8000"},
		{host: "engine.local", prefix: "/base", auth: "Bearer sk-x"},
		{host: "engine.local:443", prefix: "http://engine.local:443/v1", proxyAuth: "Basic dTpw"},
	}
	requests := []*request{
		{method: "POST", path: chatPath, body: []byte(`{"model":"m"}`), contentType: "application/json", accept: "application/json"},
		{method: "POST", path: chatPath, body: []byte(`{"stream":true}`), contentType: "application/json", accept: "text/event-stream"},
		{method: "POST", path: "/v1/embeddings", body: []byte{}, contentType: "application/json"},
		{method: "POST", path: "/v1/x"},
		{method: "GET", path: "/v1/models", accept: "application/json"},
		{method: "GET", path: "/health"},
		{method: "GET", path: "/v1/models?x=1", body: []byte("b")},
		{method: "DELETE", path: "/v1/x"},
		{method: "HEAD", path: "/v1/x"},
	}
	for _, c := range clients {
		for _, r := range requests {
			if got, want := viaHead(t, c, r), viaFasthttp(t, c, r); got != want {
				t.Errorf("%s %s%s:\n got %q\nwant %q", r.method, c.prefix, r.path, got, want)
			}
		}
	}
}

// FuzzAppendHead holds the hand-written head to fasthttp's for any
// values a configuration could hold (printable, one line; a base URL's
// path).
func FuzzAppendHead(f *testing.F) {
	f.Add("POST", "/v1/chat/completions", "127.0.0.1:8000", "", "Bearer x", "", "application/json", "application/json", []byte(`{}`), false)
	f.Add("GET", "/v1/models", "h", "/p", "", "Basic y", "", "*/*", []byte(nil), true)
	f.Fuzz(func(t *testing.T, method, path, host, prefix, auth, proxyAuth, contentType, accept string, body []byte, nilBody bool) {
		for _, s := range []string{method, path, host, prefix, auth, proxyAuth, contentType, accept} {
			if strings.ContainsFunc(s, func(r rune) bool { return r < '!' || r > '~' }) {
				return
			}
		}
		// A base URL's escaped path is empty or absolute; a proxy's prefix
		// is the server's URL.
		if method == "" || !strings.HasPrefix(path, "/") || host == "" ||
			prefix != "" && !strings.HasPrefix(prefix, "/") && !strings.HasPrefix(prefix, "http://") {
			return
		}
		if nilBody {
			body = nil
		}
		c := &client{host: host, prefix: prefix, auth: auth, proxyAuth: proxyAuth}
		r := &request{method: method, path: path, body: body, contentType: contentType, accept: accept}
		if got, want := viaHead(t, c, r), viaFasthttp(t, c, r); got != want {
			t.Fatalf("\n got %q\nwant %q", got, want)
		}
	})
}
