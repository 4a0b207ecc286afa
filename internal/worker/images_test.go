package worker

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/moderation"
)

// A chat's remote images reach the engine as data: URLs the worker
// fetched through its guard; one at an address the guard refuses, or that
// cannot be fetched, fails the request before the engine sees it.
func TestInlineImages(t *testing.T) {
	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	pic := buf.Bytes()
	var hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/missing.png" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain") // the bytes decide
		_, _ = w.Write(pic)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	hosts := map[string]string{"example.com": "93.184.216.34", "inside.example.com": "10.0.0.7"}
	fetcher := &moderation.Fetcher{RootCAs: pool, Timeout: 5 * time.Second,
		LookupIPAddr: func(_ context.Context, host string) ([]net.IPAddr, error) {
			if ip, ok := hosts[host]; ok {
				return []net.IPAddr{{IP: net.ParseIP(ip)}}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		}}
	a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{&stubEngine{}}, Images: fetcher})
	if err != nil {
		t.Fatal(err)
	}
	chat := func(urls ...string) []byte {
		parts := []any{map[string]any{"type": "text", "text": "what is this?"}}
		for i, u := range urls {
			if i%2 == 0 {
				parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": u, "detail": "low"}})
			} else {
				parts = append(parts, map[string]any{"type": "image_url", "image_url": u})
			}
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "temperature": 0.10000000000000001, "max_tokens": 9007199254740993,
			"messages": []any{map[string]any{"role": "user", "content": parts}}})
		return b
	}
	ctx := context.Background()

	// Untouched: no remote image at all.
	plain := chat()
	if got, res := a.inlineImages(ctx, plain); res != nil || !bytes.Equal(got, plain) {
		t.Fatalf("a chat without images: %s %+v", got, res)
	}
	// Two remote images, in both shapes: the engine gets their bytes.
	got, res := a.inlineImages(ctx, chat("https://example.com/a.png", "https://example.com/b.png"))
	if res != nil {
		t.Fatalf("inline: %+v", res.Error)
	}
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pic)
	if n := strings.Count(string(got), want); n != 2 || strings.Contains(string(got), "example.com") {
		t.Fatalf("%d inlined images in %s", n, got)
	}
	if !strings.Contains(string(got), `"max_tokens":9007199254740993`) || !strings.Contains(string(got), `"detail":"low"`) {
		t.Fatalf("the rest of the body changed: %s", got)
	}

	for _, tc := range []struct {
		name   string
		url    string
		status int
		code   string
	}{
		{"an internal address", "https://inside.example.com/a.png", 400, api.CodeRemoteImageRefused},
		{"a literal internal address", "https://169.254.169.254/latest/meta-data/", 400, api.CodeRemoteImageRefused},
		{"plain http", "http://example.com/a.png", 400, api.CodeRemoteImageRefused},
		{"a name that does not resolve", "https://nowhere.example.com/a.png", 502, api.CodeRemoteImageUnavailable},
		{"a missing image", "https://example.com/missing.png", 502, api.CodeRemoteImageUnavailable},
	} {
		before := hits.Load()
		_, res := a.inlineImages(ctx, chat(tc.url))
		if res == nil || res.Status != tc.status || res.Error.Code != tc.code || !res.Final {
			t.Errorf("%s: %+v, want %d %s", tc.name, res, tc.status, tc.code)
		}
		if tc.status == 400 && hits.Load() != before {
			t.Errorf("%s: the server was reached", tc.name)
		}
	}
	// Too many are refused before any is fetched.
	var many []string
	for range maxRemoteImages + 1 {
		many = append(many, "https://example.com/a.png")
	}
	before := hits.Load()
	if _, res := a.inlineImages(ctx, chat(many...)); res == nil || res.Status != 400 || hits.Load() != before {
		t.Errorf("%d remote images: %+v, %d fetched", len(many), res, hits.Load()-before)
	}

	// Every byte but the URL's stays as the client sent it: key order (a
	// schema's properties order the model's output), spacing, escapes.
	raw := `{"model":"m", "response_format":{"type":"json_schema","json_schema":{"schema":{"properties":{"z":{},"a":{}}}}},` +
		`"messages":[{"content":[{"image_url":{"detail":"low",  "url":"https://example.com/a.png"},"type":"image_url"},` +
		`{"type":"text","text":"\u00e9t\u00e9 https://example.com/not-an-image"}],"role":"user"}]}`
	got, res = a.inlineImages(ctx, []byte(raw))
	if want := strings.Replace(raw, `"https://example.com/a.png"`, `"`+want+`"`, 1); res != nil || string(got) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s\n%+v", got, want, res)
	}
	// JSON that breaks after an image URL does not go on with it.
	broken := `{"messages":[{"content":[{"type":"image_url","image_url":"https://example.com/a.png"}]}]} trailing`
	if _, res := a.inlineImages(ctx, []byte(broken)); res == nil || res.Status != 400 {
		t.Errorf("broken JSON after a URL: %+v", res)
	}
	// A URL or a key written with JSON escapes is the same URL to the
	// engine, and fetched all the same.
	for _, escaped := range []string{
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"\u0068ttps://inside.example.com/a.png"}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image\u005furl","image\u005furl":"https:\/\/inside.example.com/a.png"}]}]}`,
	} {
		if _, res := a.inlineImages(ctx, []byte(escaped)); res == nil || res.Error.Code != api.CodeRemoteImageRefused {
			t.Errorf("%s: %+v, want the internal address refused", escaped, res)
		}
	}
}

// Whatever the body, each image found is a JSON string in it that decodes
// to the URL found, and the spans come in order without overlapping: the
// splice replaces exactly those bytes.
func FuzzFindRemoteImages(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"type":"image\u005furl","image\u005furl":"\u0068ttps:\/\/x.test/a"}]}]}`))
	f.Add([]byte(`{"messages" : [ { "content" : [ { "image_url" : { "url" : "HTTPS://x.test" } } , {"image_url":"http://y"} ] } ] }`))
	f.Add([]byte(`[{"messages":[]}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		imgs, _ := findRemoteImages(body)
		at := 0
		for _, im := range imgs {
			if im.start < at || im.end <= im.start || im.end > len(body) {
				t.Fatalf("span [%d,%d) after %d in %q", im.start, im.end, at, body)
			}
			var s string
			if err := json.Unmarshal(body[im.start:im.end], &s); err != nil || s != im.url {
				t.Fatalf("span %q is not the string %q: %v", body[im.start:im.end], im.url, err)
			}
			at = im.end
		}
	})
}
