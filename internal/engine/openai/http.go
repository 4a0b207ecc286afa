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
// engine's headers. The context bounds the whole exchange, body included.
func (e *Engine) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.apiKey)
	}
	return req, nil
}

// post sends body to path. On failure it returns the Result to report
// instead of a response: Cancelled when ctx ended, Unreachable when no
// answer came at all, the engine's error when it answered with one.
func (e *Engine) post(ctx context.Context, path string, body []byte, accept string) (*http.Response, *api.Result) {
	req, err := e.newRequest(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
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
