package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/engine/sim"
)

// NewCmdSim builds `svc sim`: the simulator as a standalone
// OpenAI-compatible server, for benchmarks and for trying the openai engine
// adapter against a real process.
func NewCmdSim(f *Factory) *cobra.Command {
	var addr, options string
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the inference simulator as an OpenAI-compatible server",
		Long: `Serve the built-in simulator over HTTP: GET /v1/models, POST /v1/chat/completions
(streaming and not), POST /v1/completions, POST /v1/embeddings,
POST /v1/rerank (sim-rerank), POST /v1/images/generations (sim-image),
POST /v1/audio/transcriptions (sim-stt) and POST /v1/audio/speech (sim-tts).
Its guard models (guard-a, guard-b, guard-c) answer in the formats of the
real guards. Its output is deterministic text and speech-like sound at a set
rate; it is a simulator, not a model.

--options takes the same settings as --engine sim=OPTIONS of svc worker:
tps (tokens per second, 0 for as fast as possible), ttft, latency, load (cold
start), rtf (audio work as a share of the audio's length), timings (1 adds
llama.cpp-style timings), reasoning_field, incomplete (a model listed as not
fully installed; once per model).`,
		Example: `  svc sim --addr 127.0.0.1:8000 --options tps=0,ttft=0
  svc worker --engine openai=http://127.0.0.1:8000`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := sim.ParseOptions(options)
			if err != nil {
				return usageErrorf("--options: %v", err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			srv := &http.Server{Handler: sim.NewHandler(cfg), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(f.IO.ErrOut, "simulator listening on http://%s\n", ln.Addr())
			return serveUntil(cmd.Context(), srv, ln)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8000", "address to listen on")
	cmd.Flags().StringVar(&options, "options", "", "simulator settings, e.g. tps=100,ttft=30ms")
	return cmd
}

// serveUntil serves on ln until ctx ends, then shuts down gracefully.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
