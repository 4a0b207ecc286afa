package server

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

// Request bodies may come compressed (Content-Encoding): clients that
// send long conversations again on every turn compress them (the Codex
// CLI sends its responses requests in zstd; Anthropic's API takes gzip),
// and a browser's CompressionStream writes gzip and deflate. A body read
// whole is decoded before anything reads it, within its route's limit,
// which is a limit on what the body holds, however small it came.

// acceptedCodings answers a coding the gateway does not decode, in the
// Accept-Encoding that RFC 9110 (12.5.3) has a server send for it.
const acceptedCodings = "gzip, deflate, zstd"

// zstdWindow bounds the window a zstd body may ask its decoder to hold:
// RFC 9659 has HTTP's zstd coding stay within 8 MB, and a larger one is
// memory a few bytes of body could take.
const zstdWindow = 8 << 20

// decodeBody replaces a body sent in a content coding with what it holds,
// at most limit bytes of it (errOverLimit past them), taking what it
// holds from budget as readBody does; the request then reads as if it
// had been sent as it is.
func decodeBody(ctx *fasthttp.RequestCtx, limit int, budget *bodyBudget, held *int64) error {
	coding := ctx.Request.Header.ContentEncoding()
	if len(coding) == 0 {
		return nil
	}
	name := strings.ToLower(strings.TrimSpace(string(coding)))
	raw := ctx.Request.Body()
	if name == "identity" || len(raw) == 0 {
		ctx.Request.Header.Del(fasthttp.HeaderContentEncoding)
		return nil
	}
	r, closeReader, err := decoder(name, bytes.NewReader(raw))
	if err == nil {
		defer closeReader()
		var body []byte
		body, err = readPieces(wholeStream{r}, limit+1, func(n int) bool { return budget.take(held, n) })
		switch {
		case errors.Is(err, errBodyMemory):
			return err
		case err == nil && len(body) > limit:
			return errOverLimit
		case err == nil:
			ctx.Request.SetBodyRaw(body)
			ctx.Request.Header.Del(fasthttp.HeaderContentEncoding)
			return nil
		}
	}
	if errors.Is(err, errUnsupportedCoding) {
		ctx.Response.Header.Set(fasthttp.HeaderAcceptEncoding, acceptedCodings)
		return &api.Error{Kind: api.KindInvalidRequest, Code: "unsupported_content_encoding",
			Message: fmt.Sprintf("Content-Encoding %q is not taken: send the body as it is, or in one of %s", coding, acceptedCodings)}
	}
	return &api.Error{Kind: api.KindInvalidRequest, Code: "invalid_content_encoding",
		Message: fmt.Sprintf("The body is not valid %s data, as its Content-Encoding says: %v", name, err)}
}

var errUnsupportedCoding = errors.New("unsupported content coding")

// wholeStream is a decoder whose stream must be whole: readPieces takes
// io.ErrUnexpectedEOF for a body's end, where from a decoder it is a
// stream cut short.
type wholeStream struct{ r io.Reader }

var errCutShort = errors.New("the compressed data is cut short")

func (w wholeStream) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = errCutShort
	}
	return n, err
}

// decoder reads what src holds in the coding name; done releases it.
func decoder(name string, src io.Reader) (r io.Reader, done func(), err error) {
	switch name {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { _ = zr.Close() }, nil
	case "deflate":
		// HTTP's deflate is the zlib format (RFC 9110, 8.4.1.2).
		zr, err := zlib.NewReader(src)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { _ = zr.Close() }, nil
	case "zstd":
		zr, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdWindow))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return nil, nil, errUnsupportedCoding
}

// errCodedUpload answers an upload sent in a content coding: it is
// parsed as it arrives, and the audio in it is compressed already.
var errCodedUpload = &api.Error{Kind: api.KindInvalidRequest, Code: "unsupported_content_encoding",
	Message: "An upload is taken as it is, without a Content-Encoding: the audio in it is compressed already"}

// codedUpload reports whether a streamed body says it comes in a coding.
func codedUpload(ctx *fasthttp.RequestCtx) bool {
	c := bytes.TrimSpace(ctx.Request.Header.ContentEncoding())
	return len(c) > 0 && !bytes.EqualFold(c, []byte("identity"))
}
