package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
)

// Pull downloads model, reporting each progress line Ollama sends. It
// returns nil once Ollama says "success". A cancelled pull can be
// resumed: Ollama keeps the layers it has.
func (e *Engine) Pull(ctx context.Context, model string, progress func(api.PullProgress)) error {
	if err := e.pull(ctx, model, progress); err != nil {
		return fmt.Errorf("pull %s: %w", model, err)
	}
	return nil
}

func (e *Engine) pull(ctx context.Context, model string, progress func(api.PullProgress)) error {
	resp, err := e.send(ctx, http.MethodPost, "/api/pull", map[string]any{"model": model, "stream": true})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return statusError(resp)
	}
	sc := lines(resp.Body)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var p struct {
			api.PullProgress
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &p); err != nil {
			return fmt.Errorf("unreadable progress line: %w", err)
		}
		if hasError(p.Error) {
			return errors.New(errorText(p.Error))
		}
		if progress != nil {
			progress(p.PullProgress)
		}
		if p.Status == "success" {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("progress stream ended before success: %w", io.ErrUnexpectedEOF)
}
