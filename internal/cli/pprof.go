package cli

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/cobra"
)

// addPprofFlag adds the hidden --pprof-addr flag: profiling endpoints on
// their own listener, for benchmarks and diagnosis, never on the API port.
func addPprofFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "pprof-addr", "", "serve Go profiling endpoints (/debug/pprof/) on this address")
	_ = cmd.Flags().MarkHidden("pprof-addr")
}

// servePprof serves the profiling endpoints until ctx ends; the returned
// function waits for the server to stop.
func servePprof(ctx context.Context, addr string) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ends with ErrServerClosed when closed
	}()
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	return func() {
		stop()
		_ = srv.Close()
		<-done
	}, nil
}
