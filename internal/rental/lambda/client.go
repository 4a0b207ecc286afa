package lambda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error codes of the Lambda API this package acts on. The API's docs ask
// clients to branch on the code, never on the message.
const (
	codeInvalidKey           = "global/invalid-api-key"
	codeNotFound             = "global/object-does-not-exist"
	codeInsufficientCapacity = "instance-operations/launch/insufficient-capacity"
)

// ErrUnauthorized is returned (wrapped) when Lambda refuses the API key.
var ErrUnauthorized = errors.New("lambda refused the API key")

// APIError is an error the Lambda API answered with.
type APIError struct {
	Status     int
	Code       string
	Message    string
	Suggestion string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("lambda API %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Suggestion != "" {
		s += " (" + e.Suggestion + ")"
	}
	return s
}

// Is lets callers test for a refused key without knowing the envelope.
func (e *APIError) Is(target error) bool {
	return target == ErrUnauthorized && (e.Status == http.StatusUnauthorized || e.Code == codeInvalidKey)
}

func (e *APIError) notFound() bool {
	return e.Status == http.StatusNotFound || e.Code == codeNotFound
}

// maxBody bounds what is read of a response: the largest, the instance
// type list, is a few tens of kilobytes.
const maxBody = 8 << 20

// attempts bounds the tries of one call that is rate limited or, for
// reads, fails in transit; the context bounds them too.
const attempts = 6

// call sends one API request and decodes the data of its envelope into
// out (when not nil). Requests refused with 429 are retried after the
// wait the API asks for; reads are also retried after transport errors
// and 5xx answers, which writes are not, since a launch might have been
// done.
func (p *Provider) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	read := method == http.MethodGet
	var last error
	for try := 0; try < attempts; try++ {
		retryAfter, err := p.once(ctx, method, path, body, out)
		if err == nil {
			return nil
		}
		last = err
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			return err
		case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
		case read && (!errors.As(err, &ae) || ae.Status >= 500):
		default:
			return err
		}
		wait := retryAfter
		if wait <= 0 {
			wait = p.backoff(try)
		}
		p.log.Debug("lambda: retrying", "method", method, "path", path, "wait", wait, "err", err)
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("%w (gave up waiting: %v)", last, err)
		}
	}
	return last
}

// once sends a request once. It returns, with an error, how long the API
// asked to wait before trying again (0 when it did not say).
func (p *Provider) once(ctx context.Context, method, path string, body []byte, out any) (time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+p.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, fmt.Errorf("lambda API %d: reading the answer: %w", resp.StatusCode, err)
	}
	if resp.StatusCode/100 != 2 {
		return p.retryAfter(resp.Header.Get("Retry-After")), apiError(resp.StatusCode, raw)
	}
	if out == nil {
		return 0, nil
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return 0, fmt.Errorf("lambda API: decoding the answer: %w", err)
	}
	if len(env.Data) == 0 {
		return 0, errors.New("lambda API: answer without data")
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return 0, fmt.Errorf("lambda API: decoding the answer: %w", err)
	}
	return 0, nil
}

// apiError reads the API's error envelope; a body that is not one (a
// proxy's page, say) is kept, shortened, as the message.
func apiError(status int, raw []byte) *APIError {
	var env struct {
		Error *struct {
			Code       string  `json:"code"`
			Message    string  `json:"message"`
			Suggestion *string `json:"suggestion"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &env) == nil && env.Error != nil {
		e := &APIError{Status: status, Code: env.Error.Code, Message: env.Error.Message}
		if env.Error.Suggestion != nil {
			e.Suggestion = *env.Error.Suggestion
		}
		return e
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &APIError{Status: status, Message: msg}
}

// retryAfter reads a Retry-After header: delay seconds or an HTTP date.
func (p *Provider) retryAfter(h string) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		return min(time.Duration(max(s, 0))*time.Second, maxWait)
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(max(t.Sub(p.now()), 0), maxWait)
	}
	return 0
}

// maxWait caps any one wait between tries.
const maxWait = 30 * time.Second

// backoff is the wait before try n+1 when the API named none: doubling
// from the poll interval, capped.
func (p *Provider) backoff(n int) time.Duration {
	d := p.poll
	for range n {
		if d >= maxWait {
			break
		}
		d *= 2
	}
	return min(d, maxWait)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
