package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

func zlibbed(b []byte) []byte {
	var out bytes.Buffer
	w := zlib.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

func zstded(b []byte) []byte {
	w, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	return w.EncodeAll(b, nil)
}

// zstdStream is b in a zstd frame of the given window, as a streaming
// encoder writes one of a megabyte or more.
func zstdStream(b []byte, window int) []byte {
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithWindowSize(window))
	if err != nil {
		panic(err)
	}
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

// A body in a content coding is decoded within its route's limit, which
// holds for what it holds; one the gateway cannot decode is refused with
// the spec's 400, naming the codings it takes.
func TestDecodeBody(t *testing.T) {
	chat := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 200) + `"}]}`)
	bomb := make([]byte, 1<<20) // a megabyte of zeros, a kilobyte compressed
	for _, tc := range []struct {
		name, coding string
		body         []byte
		limit        int
		budget       int64
		want         []byte // the body after, when it is taken
		status       int    // the refusal's, when it is not
		code         string
		over         bool // errOverLimit, which the caller answers with the route's 413
	}{
		{name: "none", body: chat, want: chat},
		{name: "identity", coding: "identity", body: chat, want: chat},
		{name: "gzip", coding: "gzip", body: gzipped(chat), want: chat},
		{name: "x-gzip, as HTTP/1.0 named it", coding: "x-gzip", body: gzipped(chat), want: chat},
		{name: "the coding's case and spaces", coding: " GZip ", body: gzipped(chat), want: chat},
		{name: "deflate is zlib", coding: "deflate", body: zlibbed(chat), want: chat},
		{name: "zstd", coding: "zstd", body: zstded(chat), want: chat},
		{name: "an empty body", coding: "gzip", body: nil, want: nil},
		{name: "two gzip members", coding: "gzip", body: append(gzipped(chat[:10]), gzipped(chat[10:])...), want: chat},
		{name: "brotli", coding: "br", body: chat, status: 400, code: "unsupported_content_encoding"},
		{name: "a list of codings", coding: "gzip, zstd", body: zstded(gzipped(chat)), status: 400, code: "unsupported_content_encoding"},
		{name: "not gzip", coding: "gzip", body: chat, status: 400, code: "invalid_content_encoding"},
		{name: "gzip cut short", coding: "gzip", body: gzipped(chat)[:40], status: 400, code: "invalid_content_encoding"},
		{name: "zstd cut short", coding: "zstd", body: zstded(chat)[:30], status: 400, code: "invalid_content_encoding"},
		{name: "not zlib", coding: "deflate", body: gzipped(chat), status: 400, code: "invalid_content_encoding"},
		{name: "a bomb", coding: "gzip", body: gzipped(bomb), limit: 64 << 10, over: true},
		{name: "a zstd bomb", coding: "zstd", body: zstded(bomb), limit: 64 << 10, over: true},
		{name: "a zstd window past 8 MB", coding: "zstd", body: zstdStream(bomb, 16<<20), status: 400, code: "invalid_content_encoding"},
		{name: "a zstd window of 8 MB", coding: "zstd", body: zstdStream(bomb, 8<<20), want: bomb},
		{name: "within the limit, past the budget", coding: "gzip", body: gzipped(bomb), budget: 256 << 10, status: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.SetBody(tc.body)
			if tc.coding != "" {
				ctx.Request.Header.Set("Content-Encoding", tc.coding)
			}
			limit := tc.limit
			if limit == 0 {
				limit = 32 << 20
			}
			budget := &bodyBudget{max: tc.budget}
			if tc.budget == 0 {
				budget.max = 1 << 30
			}
			var held int64
			err := decodeBody(&ctx, limit, budget, &held)
			switch {
			case tc.over:
				if !errors.Is(err, errOverLimit) {
					t.Fatalf("err = %v, want errOverLimit", err)
				}
			case tc.status != 0:
				ae := api.ErrorOf(err)
				if err == nil || ae.HTTPStatus() != tc.status || ae.Code != tc.code {
					t.Fatalf("err = %v (status %d, code %q), want %d %q", err, ae.HTTPStatus(), ae.Code, tc.status, tc.code)
				}
				if got := string(ctx.Response.Header.Peek("Accept-Encoding")); (tc.code == "unsupported_content_encoding") != (got != "") {
					t.Errorf("Accept-Encoding %q", got)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if got := ctx.Request.Body(); !bytes.Equal(got, tc.want) {
					t.Fatalf("body %.60q, want %.60q", got, tc.want)
				}
				if h := ctx.Request.Header.ContentEncoding(); len(h) != 0 {
					t.Errorf("Content-Encoding %q kept on a decoded body", h)
				}
			}
			if held != budget.used.Load() {
				t.Errorf("held %d, the budget says %d", held, budget.used.Load())
			}
		})
	}
}

// An upload, parsed as it arrives, is taken only as it is.
func TestCodedUpload(t *testing.T) {
	for coding, want := range map[string]bool{"": false, "identity": false, " Identity": false, "gzip": true, "zstd": true} {
		var ctx fasthttp.RequestCtx
		if coding != "" {
			ctx.Request.Header.Set("Content-Encoding", coding)
		}
		if got := codedUpload(&ctx); got != want {
			t.Errorf("%q: codedUpload = %v, want %v", coding, got, want)
		}
	}
}

func FuzzDecodeBody(f *testing.F) {
	f.Add("gzip", gzipped([]byte(`{"a":1}`)))
	f.Add("zstd", zstded([]byte(`{"a":1}`)))
	f.Add("deflate", zlibbed([]byte(`{"a":1}`)))
	f.Fuzz(func(t *testing.T, coding string, body []byte) {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetBody(body)
		ctx.Request.Header.Set("Content-Encoding", coding)
		budget := &bodyBudget{max: 1 << 30}
		var held int64
		err := decodeBody(&ctx, 1<<20, budget, &held)
		if err != nil && !errors.Is(err, errOverLimit) && api.ErrorOf(err).HTTPStatus() != 400 {
			t.Fatalf("%q: %v", coding, err)
		}
		if err == nil && len(ctx.Request.Body()) > 1<<20 {
			t.Fatalf("%q: a %d-byte body past the limit", coding, len(ctx.Request.Body()))
		}
	})
}
