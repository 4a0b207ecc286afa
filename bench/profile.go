package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// profileSvc loads svc with non-streaming requests in a closed loop while
// fetching CPU profiles of the gateway and the worker, then their
// allocation profiles. Read them with `go tool pprof DIR/gateway.cpu`.
// With streams it also profiles the streaming scenario's load, into
// DIR/gateway.stream.cpu and DIR/worker.stream.cpu.
func (h *rig) profileSvc(ctx context.Context, dir string, streams bool) error {
	svc := h.path("svc")
	if svc == nil || svc.pprof == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	secs := max(int(h.scale.duration/time.Second), 2)
	load := time.Duration(secs)*time.Second + 500*time.Millisecond
	if err := cpuProfiles(svc, dir, "cpu", secs, func() {
		closedLoop(ctx, h.scale.conc, load, unaryCall(h.client, svc, unaryBody))
	}); err != nil {
		return err
	}
	if streams {
		if err := cpuProfiles(svc, dir, "stream.cpu", secs, func() {
			openLoop(ctx, streamRate(h.scale.short), load, streamCall(h.client, svc, streamBody))
		}); err != nil {
			return err
		}
	}
	for name, addr := range svc.pprof {
		if err := fetch("http://"+addr+"/debug/pprof/allocs", filepath.Join(dir, name+".allocs")); err != nil {
			return err
		}
	}
	h.log("profiles written to %s (go tool pprof -top %s)", dir, filepath.Join(dir, "gateway.cpu"))
	return nil
}

// heapProfiles saves the gateway's and the worker's live heap, named for
// what is being held.
func (h *rig) heapProfiles(svc *path, label string) {
	if err := os.MkdirAll(h.scale.profile, 0o755); err != nil {
		h.log("heap profiles: %v", err)
		return
	}
	for name, addr := range svc.pprof {
		base := filepath.Join(h.scale.profile, name+"."+label)
		for file, url := range map[string]string{
			base + ".heap":           "/debug/pprof/heap?gc=1",
			base + ".memstats.txt":   "/debug/pprof/heap?debug=1", // ends with runtime.MemStats: stacks, GC
			base + ".goroutines.txt": "/debug/pprof/goroutine?debug=1",
		} {
			if err := fetch("http://"+addr+url, file); err != nil {
				h.log("profile: %v", err)
			}
		}
	}
}

// mallocs is the heap objects the gateway and the worker have allocated
// since they started, as runtime.MemStats counts them at the end of the
// allocation profile's text form; 0 when a process does not say.
func (p *path) mallocs() uint64 {
	var n uint64
	for _, addr := range p.pprof {
		resp, err := http.Get("http://" + addr + "/debug/pprof/allocs?debug=1")
		if err != nil {
			return 0
		}
		m, ok := uint64(0), false
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if v, found := strings.CutPrefix(sc.Text(), "# Mallocs = "); found {
				m, err = strconv.ParseUint(v, 10, 64)
				ok = err == nil
			}
		}
		resp.Body.Close()
		if !ok {
			return 0
		}
		n += m
	}
	return n
}

func fetch(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// cpuProfiles fetches a CPU profile of each of svc's processes, named
// DIR/PROCESS.SUFFIX, while load runs.
func cpuProfiles(svc *path, dir, suffix string, secs int, load func()) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(svc.pprof))
	for name, addr := range svc.pprof {
		wg.Go(func() {
			errs <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), filepath.Join(dir, name+"."+suffix))
		})
	}
	load()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
