package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

var _ engine.Installer = (*Engine)(nil)

const (
	// pullSize is what every simulated install downloads, about what a
	// mid-sized model at Q4 fetches.
	pullSize = 4 << 30
	// pullTick is how often a simulated download reports progress: often
	// enough for the worker's once-a-second reports to move every time.
	pullTick = 100 * time.Millisecond
)

// Pull simulates installing model the way Ollama reports it: the
// manifest, one layer downloading over Config.PullTime, verification and
// the manifest write, then success. From then on the engine serves model
// as a simulated chat model. A model it serves already installs at once.
func (e *Engine) Pull(ctx context.Context, model string, progress func(api.PullProgress)) error {
	if err := e.sim.pull(ctx, model, progress); err != nil {
		return fmt.Errorf("pull %s: %w", model, err)
	}
	return nil
}

func (s *simulator) pull(ctx context.Context, model string, progress func(api.PullProgress)) error {
	if progress == nil {
		progress = func(api.PullProgress) {}
	}
	if strings.TrimSpace(model) == "" {
		return errors.New("no model named")
	}
	if _, ok := s.models.lookup(model); ok {
		progress(api.PullProgress{Status: "success"})
		return nil
	}
	// The digest is made up but stable, so repeated runs look alike.
	sum := sha256.Sum256([]byte(model))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	layer := "pulling " + digest[7:19]
	progress(api.PullProgress{Status: "pulling manifest"})
	steps := max(1, int(s.cfg.PullTime/pullTick))
	each := s.cfg.PullTime / time.Duration(steps)
	progress(api.PullProgress{Status: layer, Digest: digest, Total: pullSize})
	for i := 1; i <= steps; i++ {
		if err := s.cfg.Sleep(ctx, each); err != nil {
			return err
		}
		progress(api.PullProgress{Status: layer, Digest: digest, Total: pullSize, Completed: pullSize * int64(i) / int64(steps)})
	}
	for _, status := range []string{"verifying sha256 digest", "writing manifest"} {
		if err := ctx.Err(); err != nil {
			return err
		}
		progress(api.PullProgress{Status: status})
	}
	s.models.add(installedSpec(model))
	progress(api.PullProgress{Status: "success"})
	return nil
}

// installedSpec is how the simulator serves a model it installed: it
// knows nothing of the model but its name, so a plain chat model. Like a
// model Ollama has just pulled, it is on disk and not in memory: the first
// request loads it, unless Keep did.
func installedSpec(id string) ModelSpec {
	return ModelSpec{Model: api.Model{ID: id, Capabilities: []string{api.CapChat}, ContextWindow: 8192}, Cold: true}
}

var _ engine.Keeper = (*Engine)(nil)

// Keep loads model, when it is cold and not in memory, and keeps it loaded
// for good. A warm model is always loaded: keeping it takes no time.
func (e *Engine) Keep(ctx context.Context, model string) (time.Duration, error) {
	m, ok := e.sim.models.lookup(model)
	if !ok {
		return 0, fmt.Errorf("keep %s loaded: the simulator does not serve it", model)
	}
	d, err := m.keep(ctx, &e.sim.cfg)
	if err != nil {
		return 0, fmt.Errorf("keep %s loaded: %w", model, err)
	}
	return d, nil
}
