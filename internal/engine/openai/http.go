package openai

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Read limits. Error bodies are only turned into a message; a successful
// non-streaming answer is held in memory whole before it is passed on.
const (
	maxErrorBody    = 1 << 20
	maxResponseBody = 64 << 20
	maxMetaBody     = 16 << 20 // /v1/models and /props
	// maxEvent bounds one SSE event; chunks are normally a few hundred
	// bytes, but logprobs and tool-call arguments can make them large.
	maxEvent = 16 << 20
)

var errTooLarge = errors.New("response too large")

// post sends the JSON body to path. On failure it returns the Result to
// report instead of a response: Cancelled when ctx ended, Unreachable when
// no answer came at all, the engine's error when it answered with one.
// The context bounds the whole exchange, body included.
func (e *Engine) post(ctx context.Context, path string, body []byte, accept string) (*response, *api.Result) {
	return e.do(ctx, &request{method: http.MethodPost, path: path, body: body, contentType: "application/json", accept: accept})
}

// postStream is post for a body of contentType that is read while it is
// sent, such as a multipart upload, of size bytes (-1 when unknown).
func (e *Engine) postStream(ctx context.Context, path string, body io.Reader, size int64, contentType, accept string) (*response, *api.Result) {
	return e.do(ctx, &request{method: http.MethodPost, path: path, stream: body, size: size, contentType: contentType, accept: accept})
}

// do sends r and sorts out failures as post describes.
func (e *Engine) do(ctx context.Context, r *request) (*response, *api.Result) {
	resp, err := e.client.do(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, engine.Cancelled()
		}
		return nil, engine.Unreachable(err)
	}
	if resp.status >= http.StatusBadRequest {
		defer resp.Close()
		return nil, errorResponse(ctx, resp)
	}
	return resp, nil
}

// errorResponse turns an engine's error answer into a Result.
func errorResponse(ctx context.Context, resp *response) *api.Result {
	body, err := readLimited(resp, maxErrorBody)
	if err != nil && ctx.Err() != nil {
		return engine.Cancelled()
	}
	// The status is what matters: a message cut short by the limit or a
	// broken connection is still worth reporting.
	res := engine.ErrorResult(resp.status, body)
	if res.Error != nil && resp.fr != nil {
		res.Error.RetryAfter = retryAfter(resp.fr.Header.Peek("Retry-After"))
	}
	return res
}

// retryAfter reads a Retry-After of whole seconds, the form engines send;
// an HTTP date or anything unreadable is 0, and the gateway picks.
func retryAfter(h []byte) int {
	n, err := strconv.Atoi(string(bytes.TrimSpace(h)))
	if err != nil || n < 0 {
		return 0
	}
	return min(n, 3600)
}

// readLimited reads r whole, failing with errTooLarge past limit bytes.
// On errTooLarge it returns the first limit bytes. A response whose
// length is known is read into a buffer of that size.
func readLimited(r io.Reader, limit int64) ([]byte, error) { return readLimitedFor(r, limit, nil) }

// readLimitedFor is readLimited telling recv, when not nil, of each read
// that brings bytes.
func readLimitedFor(r io.Reader, limit int64, recv engine.Receiver) ([]byte, error) {
	size := 512
	if resp, ok := r.(*response); ok {
		if n := resp.length(); n >= 0 && int64(n) <= limit {
			size = n
		}
	}
	b := make([]byte, 0, size)
	lr := io.LimitedReader{R: r, N: limit + 1}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		if n > 0 && recv != nil {
			recv.Receiving()
		}
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return b[:limit], errTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
