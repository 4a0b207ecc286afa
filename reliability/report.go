package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// report is the JSON a run writes.
type report struct {
	Machine machine   `json:"machine"`
	Short   bool      `json:"short"`
	Checks  []*result `json:"checks"`
}

type machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	Kernel    string `json:"kernel"`
	Time      string `json:"time"`
}

// result is what one check found: figures to report, and every property
// it saw violated. Checks record from many goroutines at once.
type result struct {
	Name     string   `json:"name"`
	Seconds  float64  `json:"seconds"`
	Figures  []figure `json:"figures"`
	Failures []string `json:"failures"`
	// Dropped counts failures beyond the ones kept.
	Dropped int `json:"failures_dropped,omitempty"`

	mu sync.Mutex
}

type figure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// keptFailures bounds a result: after the first few of a kind, more
// lines say nothing new.
const keptFailures = 50

// figure records (or replaces) a figure.
func (r *result) figure(name, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := fmt.Sprintf(format, args...)
	for i := range r.Figures {
		if r.Figures[i].Name == name {
			r.Figures[i].Value = v
			return
		}
	}
	r.Figures = append(r.Figures, figure{name, v})
}

// fail records a violated property.
func (r *result) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.Failures) >= keptFailures {
		r.Dropped++
		return
	}
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// failed is the number of violations recorded.
func (r *result) failed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.Failures) + r.Dropped
}

func (rep *report) failures() int {
	n := 0
	for _, c := range rep.Checks {
		n += c.failed()
	}
	return n
}

func (rep *report) save(out string) error {
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// printTable writes the report as people read it: per check, its figures
// and its verdict.
func printTable(w io.Writer, rep *report) {
	mode := "full"
	if rep.Short {
		mode = "short"
	}
	fmt.Fprintf(w, "svc reliability (%s run) on %d CPUs, %s, %s\n\n", mode, rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.GoVersion)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range rep.Checks {
		verdict := "pass"
		if n := c.failed(); n > 0 {
			verdict = fmt.Sprintf("FAIL (%d)", n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0fs\n", c.Name, verdict, c.Seconds)
		for _, f := range c.Figures {
			fmt.Fprintf(tw, "  %s\t%s\t\n", f.Name, f.Value)
		}
		for _, f := range c.Failures {
			fmt.Fprintf(tw, "  ! %s\t\t\n", f)
		}
	}
	tw.Flush()
}

func readMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Time: time.Now().UTC().Format(time.RFC3339)}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
