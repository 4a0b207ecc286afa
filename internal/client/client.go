// Package client is a typed Go client of svc's HTTP API, used by the CLI
// and the dashboard. It speaks to the public API with an API key, or to the
// console API over the server's admin socket.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Client calls one svc server.
type Client struct {
	base      string
	apiKey    string
	userAgent string
	hc        *http.Client
	// socket is set when the client talks over the admin socket.
	socket string
	waits  waits
}

// waits are how long the client waits on a silent server, by kind of call.
type waits struct {
	call, answer, idle time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithHTTPClient replaces the HTTP client.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// How long a client waits on a server that says nothing. A gateway that
// accepts the connection and never answers (hung, or a proxy holding the
// connection) fails the call rather than hanging the command.
const (
	// connectTimeout bounds reaching the server.
	connectTimeout = 10 * time.Second
	// callWait bounds the answer to a call of the management API (usage,
	// workers, rentals, the console), which involves no engine.
	callWait = 30 * time.Second
	// answerWait bounds the wait for an inference answer's headers where
	// the gateway starts answering within about 80 seconds, keeping a
	// long answer alive after that (chat, embeddings, models).
	answerWait = 2 * time.Minute
	// streamIdle bounds the silence inside a stream, which the gateway
	// breaks with a keep-alive comment every 15 seconds.
	streamIdle = time.Minute
)

// StallError means the server took the request but sent nothing back in
// time.
type StallError struct {
	Target string
	Wait   time.Duration
}

func (e *StallError) Error() string {
	return "no answer from " + e.Target + " within " + e.Wait.String()
}

func defaultHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = connectTimeout
	return &http.Client{Transport: tr}
}

// New returns a client of the public API at baseURL (e.g. http://127.0.0.1:8080).
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), apiKey: apiKey, userAgent: "svc-client", hc: defaultHTTPClient(),
		waits: waits{call: callWait, answer: answerWait, idle: streamIdle}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewSocket returns a client of the console API on the admin socket at path.
func NewSocket(path string, opts ...Option) *Client {
	d := net.Dialer{Timeout: connectTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
	}
	opts = append([]Option{WithHTTPClient(&http.Client{Transport: tr})}, opts...)
	c := New("http://svc", "", opts...)
	c.socket = path
	return c
}

// Error is an error answer from the server, whatever body shape it came in.
type Error struct {
	Status     int
	Message    string
	Type       string
	Code       string
	RequestID  string
	RetryAfter time.Duration
	Fields     []api.FieldError
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if b.Len() == 0 {
		b.WriteString(http.StatusText(e.Status))
	}
	for _, f := range e.Fields {
		if !strings.Contains(e.Message, f.Field+": ") {
			fmt.Fprintf(&b, "\n  %s: %s", f.Field, f.Message)
		}
	}
	return b.String()
}

// ConnectError means the server could not be reached at all.
type ConnectError struct {
	Target string
	Err    error
}

func (e *ConnectError) Error() string { return "cannot reach " + e.Target + ": " + e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (when not nil). Non-2xx answers become *Error.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	wait := c.waits.call
	if strings.HasPrefix(path, "/v1/") {
		wait = c.waits.answer
	}
	resp, err := c.send(ctx, method, path, body, "application/json", wait)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// send makes a request with an optional JSON body and returns a 2xx answer
// for the caller to read and close. A server that cannot be reached is a
// *ConnectError and a non-2xx answer an *Error.
func (c *Client) send(ctx context.Context, method, path string, body any, accept string, wait time.Duration) (*http.Response, error) {
	var up *upload
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		up = &upload{contentType: "application/json", body: bytes.NewReader(b), size: int64(len(b))}
	}
	return c.sendBody(ctx, method, path, up, accept, wait)
}

// upload is a request body of any type; size is -1 when unknown, and the
// body is then sent chunked.
type upload struct {
	contentType string
	body        io.Reader
	size        int64
}

// sendBody is send with a body that is already encoded. A server that
// has not started its answer after wait (none when 0) is a *StallError.
// The answer's body is read under ctx; closing it ends the request.
func (c *Client) sendBody(parent context.Context, method, path string, up *upload, accept string, wait time.Duration) (*http.Response, error) {
	var rd io.Reader
	if up != nil {
		rd = up.body
	}
	ctx, cancel := context.WithCancel(parent)
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("build request: %w", err)
	}
	if up != nil {
		req.Header.Set("Content-Type", up.contentType)
		req.ContentLength = up.size
		if up.size == 0 {
			req.Body = http.NoBody
		}
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.userAgent)
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	stalled := false
	var timer *time.Timer
	if wait > 0 {
		timer = time.AfterFunc(wait, cancel)
	}
	resp, err := c.hc.Do(req)
	if timer != nil && !timer.Stop() {
		// Fired: the request is cancelled, whatever Do made of it.
		stalled = true
		if err == nil {
			resp.Body.Close()
		}
	}
	switch {
	case stalled && parent.Err() == nil:
		cancel()
		return nil, &StallError{Target: c.target(), Wait: wait}
	case err != nil:
		cancel()
		if parent.Err() != nil {
			return nil, parent.Err()
		}
		return nil, &ConnectError{Target: c.target(), Err: err}
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// target names the server in errors.
func (c *Client) target() string {
	if c.socket != "" {
		return "the admin socket " + c.socket
	}
	return c.base
}

// cancelOnClose ends a request's context when its answer is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// decodeError reads any of the spec's error shapes.
func decodeError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Code: resp.Header.Get("X-Svc-Error-Code")}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body api.Body
	if err := json.Unmarshal(raw, &body); err != nil {
		e.Message = strings.TrimSpace(string(raw))
		return e
	}
	e.Message, e.Type, e.Fields = body.Message(), body.ErrorType(), body.Errors
	if body.Error != nil && body.Error.Code != nil {
		e.Code = *body.Error.Code
	}
	return e
}

// IsStatus reports whether err is an *Error with one of the statuses.
func IsStatus(err error, statuses ...int) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, s := range statuses {
		if e.Status == s {
			return true
		}
	}
	return false
}
