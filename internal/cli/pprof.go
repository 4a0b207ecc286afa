package cli

import (
	"context"
	"log/slog"
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
// function waits for the server to stop. The address is logged, with a
// warning when it is not loopback: the endpoints have no authentication,
// and a profile shows the program's memory.
func servePprof(ctx context.Context, addr string, log *slog.Logger) (func(), error) {
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
	bound := ln.Addr().(*net.TCPAddr)
	if bound.IP.IsLoopback() {
		log.Info("profiling endpoints", "addr", bound.String())
	} else {
		log.Warn("profiling endpoints on an address others may reach, without authentication; bind them to loopback",
			"addr", bound.String())
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
