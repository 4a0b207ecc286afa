package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Poll calls cond at once and then every interval until it returns true,
// or ctx ends, which is Poll's error.
func Poll(ctx context.Context, every time.Duration, cond func() bool) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// Eventually polls cond every 20 ms for up to timeout and reports whether
// it came true: for a test to wait on what becomes true soon without
// guessing how soon.
func Eventually(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Poll(ctx, 20*time.Millisecond, cond) == nil
}

// WaitHTTP waits until url answers with a status below 500, polling every
// 50 ms. It fails at once when p, if not nil, exits.
func WaitHTTP(ctx context.Context, url string, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	exited := false
	err := Poll(ctx, 50*time.Millisecond, func() bool {
		if p != nil && p.Exited() {
			exited = true
			return true
		}
		st, _ := get(ctx, url, "")
		return st > 0 && st < 500
	})
	switch {
	case exited:
		return fmt.Errorf("%s exited before %s answered: %v", p.Name(), url, p.Err())
	case err != nil:
		return fmt.Errorf("%s did not answer: %w", url, err)
	}
	return nil
}

// get sends a GET that leaves no connection behind in the process under
// test, whose open files some checks count.
func get(ctx context.Context, url, key string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, nil
	}
	req.Close = true
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
