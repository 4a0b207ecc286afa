package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/sse"
)

// The public API, with an API key.

func query(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// Workers lists the organisation's workers.
func (c *Client) Workers(ctx context.Context) ([]api.Worker, error) {
	var out struct {
		Workers []api.Worker `json:"workers"`
	}
	err := c.Do(ctx, http.MethodGet, "/api/v1/workers", nil, &out)
	return out.Workers, err
}

// EventQuery filters worker events.
type EventQuery struct {
	WorkerID  string
	EventType string
	Limit     int
	Offset    int
}

// WorkerEvents lists worker events, newest first.
func (c *Client) WorkerEvents(ctx context.Context, q EventQuery) ([]api.WorkerEvent, error) {
	var out []api.WorkerEvent
	err := c.Do(ctx, http.MethodGet, "/api/v1/workers/events"+query("worker_id", q.WorkerID, "event_type", q.EventType,
		"limit", itoa(q.Limit), "offset", itoa(q.Offset)), nil, &out)
	return out, err
}

// WorkerPower is a worker's power history over rng (api.Range1h, 24h, 7d
// or 30d; "" is the gateway's default, 1h).
func (c *Client) WorkerPower(ctx context.Context, workerID, rng string) (api.PowerHistory, error) {
	var out api.PowerHistory
	err := c.Do(ctx, http.MethodGet, "/api/v1/workers/"+url.PathEscape(workerID)+"/power"+query("range", rng), nil, &out)
	return out, err
}

// LatestVersion is the newest worker release the gateway knows.
func (c *Client) LatestVersion(ctx context.Context) (string, error) {
	var out struct {
		Version string `json:"version"`
	}
	err := c.Do(ctx, http.MethodGet, "/api/v1/workers/latest-version", nil, &out)
	return out.Version, err
}

// Health is the gateway's GET /healthz: its version and the state of its
// store's writes.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var out api.Health
	err := c.Do(ctx, http.MethodGet, "/healthz", nil, &out)
	return out, err
}

// Inflight lists the requests running now, oldest first.
func (c *Client) Inflight(ctx context.Context, workerID string) ([]api.InflightRequest, error) {
	var out []api.InflightRequest
	err := c.Do(ctx, http.MethodGet, "/api/v1/usage/inflight"+query("worker_id", workerID), nil, &out)
	return out, err
}

// LogsQuery pages the usage log.
type LogsQuery struct {
	Limit    int
	Offset   int
	WorkerID string
	Status   int    // 0: any
	Model    string // "": any
}

// UsageLogs lists completed requests, newest first.
func (c *Client) UsageLogs(ctx context.Context, q LogsQuery) ([]api.UsageRow, error) {
	var out []api.UsageRow
	err := c.Do(ctx, http.MethodGet, "/api/v1/usage/logs"+query("limit", itoa(q.Limit), "offset", itoa(q.Offset), "worker_id", q.WorkerID,
		"status", itoa(q.Status), "model", q.Model), nil, &out)
	return out, err
}

// UsageSummary totals the last days days.
func (c *Client) UsageSummary(ctx context.Context, days int) (api.UsageSummary, error) {
	var out api.UsageSummary
	err := c.Do(ctx, http.MethodGet, "/api/v1/usage/summary"+query("days", itoa(days)), nil, &out)
	return out, err
}

// UsageDaily totals each of the last days days.
func (c *Client) UsageDaily(ctx context.Context, days int) ([]api.UsageDay, error) {
	var out []api.UsageDay
	err := c.Do(ctx, http.MethodGet, "/api/v1/usage/daily"+query("days", itoa(days)), nil, &out)
	return out, err
}

// UsageBreakdown totals by model and worker; sort is "tokens" or "requests".
func (c *Client) UsageBreakdown(ctx context.Context, days int, sort string) (api.UsageBreakdown, error) {
	var out api.UsageBreakdown
	err := c.Do(ctx, http.MethodGet, "/api/v1/usage/breakdown"+query("days", itoa(days), "sort", sort), nil, &out)
	return out, err
}

// Models lists the models the organisation's workers serve.
func (c *Client) Models(ctx context.Context) ([]api.ModelEntry, error) {
	var out api.ModelList
	err := c.Do(ctx, http.MethodGet, "/v1/models", nil, &out)
	return out.Data, err
}

// Chat sends a non-streaming chat completion and returns the raw reply.
func (c *Client) Chat(ctx context.Context, req any) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.Do(ctx, http.MethodPost, "/v1/chat/completions", req, &out)
	return out, err
}

// Embeddings sends an embeddings request and returns the raw reply.
func (c *Client) Embeddings(ctx context.Context, req any) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.Do(ctx, http.MethodPost, "/v1/embeddings", req, &out)
	return out, err
}

// maxEvent bounds one streamed event.
const maxEvent = 16 << 20

// ChatStream sends a streaming chat completion and calls fn with each
// event's data (a chat.completion.chunk) until [DONE]. An error frame in
// the stream is returned as an *Error.
func (c *Client) ChatStream(parent context.Context, req any, fn func(chunk json.RawMessage) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	resp, err := c.send(ctx, http.MethodPost, "/v1/chat/completions", req, "text/event-stream", c.waits.answer)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	requestID := resp.Header.Get("X-Request-Id")
	body := &idleReader{r: resp.Body, after: c.waits.idle, idle: time.AfterFunc(c.waits.idle, cancel)}
	defer body.idle.Stop()
	rd := sse.NewReader(body, maxEvent)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("the stream ended without [DONE]")
		}
		if err != nil && parent.Err() == nil && ctx.Err() != nil {
			return &StallError{Target: c.target(), Wait: c.waits.idle}
		}
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
		data := bytes.TrimSpace(ev.Data)
		if string(data) == "[DONE]" {
			return nil
		}
		if e := streamError(data, requestID); e != nil {
			return e
		}
		// The caller's time is not the server's silence: a reader
		// behind a paused pager takes as long as it takes.
		body.idle.Stop()
		err = fn(json.RawMessage(data))
		body.idle.Reset(body.after)
		if err != nil {
			return err
		}
	}
}

// idleReader restarts its idle timer whenever bytes arrive, keep-alive
// comments included.
type idleReader struct {
	r     io.Reader
	after time.Duration
	idle  *time.Timer
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.idle.Reset(r.after)
	}
	return n, err
}

// streamError reads an error frame: {"error": {...}}.
func streamError(data []byte, requestID string) *Error {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return nil
	}
	var f struct {
		Error *struct {
			Message    string          `json:"message"`
			Type       string          `json:"type"`
			Code       json.RawMessage `json:"code"`
			Status     int             `json:"status"`
			RetryAfter int             `json:"retry_after"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &f) != nil || f.Error == nil {
		return nil
	}
	e := &Error{Status: f.Error.Status, Message: f.Error.Message, Type: f.Error.Type, RequestID: requestID,
		RetryAfter: time.Duration(f.Error.RetryAfter) * time.Second}
	if e.Status == 0 {
		e.Status = http.StatusBadGateway
	}
	var code string
	if json.Unmarshal(f.Error.Code, &code) == nil {
		e.Code = code
	}
	return e
}

// Moderate checks input (a string, strings, or parts) with a moderation
// model and returns the raw reply. A check that failed after the reply was
// kept alive is returned as an *Error.
func (c *Client) Moderate(ctx context.Context, req any) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.Do(ctx, http.MethodPost, "/v1/moderations", req, &out); err != nil {
		return nil, err
	}
	if e := streamError(out, ""); e != nil {
		return nil, e
	}
	return out, nil
}
