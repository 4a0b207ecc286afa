package server_test

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// Compressed request bodies over HTTP, as the clients that send them do:
// gzip (Anthropic's API takes it) and zstd (the Codex CLI's responses
// requests) are served as if sent plain; a bomb is refused as too large
// for what it holds; a coding the gateway does not take, or any on an
// upload, is the client's 400. Each has its usage row.
func TestCompressedRequestBodies(t *testing.T) {
	g := startInProcess(t)
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zst := func(s string) []byte { return enc.EncodeAll([]byte(s), nil) }
	bomb := `{"model":"sim-chat","messages":[{"role":"user","content":"` + strings.Repeat("a", 40<<20) + `"}]}`
	for _, tc := range []struct {
		name, path, coding, ctype string
		body                      []byte
		status                    int
		want                      string
	}{
		{"gzip chat", "/v1/chat/completions", "gzip", "", gz(fuzzRoutes[0].seed), 200, `"chat.completion"`},
		{"zstd responses", "/v1/responses", "zstd", "", zst(fuzzRoutes[5].seed), 200, `"object":"response"`},
		{"gzip messages, streamed", "/v1/messages", "gzip", "", gz(fuzzRoutes[4].seed), 200, "event: message_stop"},
		{"a bomb", "/v1/chat/completions", "gzip", "", gz(bomb), 413, "too large"},
		{"brotli", "/v1/embeddings", "br", "", []byte(fuzzRoutes[6].seed), 400, "unsupported_content_encoding"},
		{"not gzip", "/v1/embeddings", "gzip", "", []byte(fuzzRoutes[6].seed), 400, "invalid_content_encoding"},
		{"an upload", "/v1/audio/transcriptions", "gzip", "multipart/form-data; boundary=x",
			gz("--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsim-stt\r\n--x--\r\n"), 400, "unsupported_content_encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", g.url+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+g.key)
			req.Header.Set("Content-Type", "application/json")
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			req.Header.Set("Content-Encoding", tc.coding)
			a, err := roundTrip(g.hc, req)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != tc.status || !strings.Contains(string(a.body), tc.want) {
				t.Fatalf("%d %.300s, want %d with %s", a.status, a.body, tc.status, tc.want)
			}
			if tc.want == "unsupported_content_encoding" && tc.path != "/v1/audio/transcriptions" &&
				a.header.Get("Accept-Encoding") != "gzip, deflate, zstd" {
				t.Errorf("Accept-Encoding %q", a.header.Get("Accept-Encoding"))
			}
			if err := checkAnswer(a); err != nil && a.status != 413 {
				t.Fatal(err)
			}
			row, err := g.usageRow(a.header.Get("X-Request-Id"))
			if err != nil {
				t.Fatal(err)
			}
			if row["status_code"] != float64(a.status) {
				t.Fatalf("answered %d, logged %v", a.status, row)
			}
		})
	}
}
