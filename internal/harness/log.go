package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Log is a process's output kept in memory, line by line, for a test to
// read and to wait on. svc logs one JSON object a line with --log-format
// json.
type Log struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	lines   []string
	partial []byte
	ended   bool
	changed chan struct{} // closed, and replaced, at each new line and at the end
}

func newLog() *Log { return &Log{changed: make(chan struct{})} }

// Write adds output.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		l.notify()
	}
	return len(p), nil
}

// end marks the output complete: the process has exited.
func (l *Log) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.lines = append(l.lines, string(l.partial))
		l.partial = nil
	}
	l.ended = true
	l.notify()
}

func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// String is the whole output so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// WaitLine waits for the first line match accepts and returns it. It fails
// when the process exits without writing one, or ctx ends first.
func (l *Log) WaitLine(ctx context.Context, what string, match func(line string) bool) (string, error) {
	seen := 0
	for {
		l.mu.Lock()
		lines, ended, changed := l.lines, l.ended, l.changed
		l.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if match(lines[seen]) {
				return lines[seen], nil
			}
		}
		if ended {
			return "", fmt.Errorf("the process exited before logging %s", what)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("no %s logged: %w", what, context.Cause(ctx))
		}
	}
}

// WaitMsg waits for the first JSON log record whose msg starts with prefix
// and returns it.
func (l *Log) WaitMsg(ctx context.Context, prefix string) (map[string]any, error) {
	var rec map[string]any
	_, err := l.WaitLine(ctx, fmt.Sprintf("%q", prefix), func(line string) bool {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) != nil {
			return false
		}
		if msg, _ := r["msg"].(string); strings.HasPrefix(msg, prefix) {
			rec = r
			return true
		}
		return false
	})
	return rec, err
}
