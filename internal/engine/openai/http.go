package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

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

// newRequest builds a request to path (under the root URL) with the
// engine's headers and body, if any, as JSON. The context bounds the whole
// exchange, body included.
func (e *Engine) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	if body == nil {
		return e.newBodyRequest(ctx, method, path, nil, "")
	}
	return e.newBodyRequest(ctx, method, path, bytes.NewReader(body), "application/json")
}

// newBodyRequest is newRequest for a body of any type.
func (e *Engine) newBodyRequest(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if e.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.apiKey)
	}
	return req, nil
}

// post sends the JSON body to path. On failure it returns the Result to
// report instead of a response: Cancelled when ctx ended, Unreachable when
// no answer came at all, the engine's error when it answered with one.
func (e *Engine) post(ctx context.Context, path string, body []byte, accept string) (*http.Response, *api.Result) {
	req, err := e.newRequest(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
	return e.do(ctx, req, accept)
}

// postStream is post for a body of contentType that is read while it is
// sent, such as a multipart upload, of size bytes (-1 when unknown).
func (e *Engine) postStream(ctx context.Context, path string, body io.Reader, size int64, contentType, accept string) (*http.Response, *api.Result) {
	req, err := e.newBodyRequest(ctx, http.MethodPost, path, body, contentType)
	if err != nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
	req.ContentLength = size
	return e.do(ctx, req, accept)
}

// do sends req and sorts out failures as post describes.
func (e *Engine) do(ctx context.Context, req *http.Request, accept string) (*http.Response, *api.Result) {
	req.Header.Set("Accept", accept)
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, engine.Cancelled()
		}
		return nil, engine.Unreachable(err)
	}
	if resp.StatusCode >= http.StatusBadRequest {
		defer resp.Body.Close()
		return nil, errorResponse(ctx, resp)
	}
	return resp, nil
}

// errorResponse turns an engine's error answer into a Result.
func errorResponse(ctx context.Context, resp *http.Response) *api.Result {
	body, err := readLimited(resp.Body, maxErrorBody)
	if err != nil && ctx.Err() != nil {
		return engine.Cancelled()
	}
	// The status is what matters: a message cut short by the limit or a
	// broken connection is still worth reporting.
	return engine.ErrorResult(resp.StatusCode, body)
}

// readLimited reads r whole, failing with errTooLarge past limit bytes.
// On errTooLarge it returns the first limit bytes.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(b)) > limit {
		return b[:limit], errTooLarge
	}
	return b, err
}
