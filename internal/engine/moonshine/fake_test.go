package moonshine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/audio"
)

// The fake runner is this test binary: an engine whose node is the test
// binary runs it with runner.mjs as its first argument, and TestMain then
// plays the runner's part of the protocol instead of running the tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && filepath.Base(os.Args[1]) == "runner.mjs" {
		os.Exit(fakeRunner(os.Args[1], os.Args[2:]))
	}
	// The race detector makes a program sleep a second as it exits; the
	// fake runners need not, and the tests stop many of them.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// Start-up behaviours of the fake runner, written in its runner.mjs.
const (
	startOK         = "ok"
	startFails      = "fails"       // exits before it is ready
	startSlow       = "slow"        // never gets ready
	startWrongModel = "wrong-model" // says another model is ready
)

// What the fake runner does with a request: the first sample, times 8,
// says.
const (
	doAnswer  = iota // answer with segments that describe the audio
	doError          // answer with an error
	doDie            // exit without answering
	doHang           // never answer
	doWrongID        // answer with another request's id
	doGarbage        // answer with a line that is not JSON
)

// fakeRunner plays a runner whose start-up behaviour is the content of
// script; it notes each start in the file starts next to it.
func fakeRunner(script string, args []string) int {
	fl := flag.NewFlagSet("runner", flag.ContinueOnError)
	size := fl.String("size", "", "")
	fl.String("threads", "", "")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	mode, err := os.ReadFile(script)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	starts, err := os.OpenFile(filepath.Join(filepath.Dir(script), "starts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(starts, strings.Join(args, " "))
	starts.Close()

	out := json.NewEncoder(os.Stdout)
	model := "moonshine-" + *size
	switch string(mode) {
	case startFails:
		fmt.Fprintln(os.Stderr, "Error: libonnxruntime.so.1: cannot open shared object file")
		return 1
	case startSlow:
		time.Sleep(time.Hour)
	case startWrongModel:
		model = "moonshine-huge"
	}
	out.Encode(ready{Ready: true, Model: model, LoadMs: 12})

	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			return 0
		}
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad header:", err)
			return 1
		}
		raw := make([]byte, 4*req.Samples)
		if _, err := io.ReadFull(in, raw); err != nil {
			fmt.Fprintln(os.Stderr, "short samples:", err)
			return 1
		}
		samples := make([]float32, req.Samples)
		for i := range samples {
			samples[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		do := doAnswer
		if len(samples) > 0 {
			do = int(math.Round(float64(samples[0]) * 8))
		}
		switch do {
		case doAnswer:
			out.Encode(describe(req.ID, samples))
		case doError:
			out.Encode(reply{ID: req.ID, Error: "onnxruntime: invalid input shape"})
		case doDie:
			fmt.Fprintln(os.Stderr, "fatal: out of memory")
			return 3
		case doHang:
			note(script, "hangs")
			time.Sleep(time.Hour)
		case doWrongID:
			out.Encode(reply{ID: req.ID + 1})
		case doGarbage:
			fmt.Println("Warning: something printed to stdout")
		}
	}
}

// describe is the fake runner's transcript of samples: a segment naming
// how many samples came and the peak among them, an empty one, and one
// to be trimmed.
func describe(id uint64, samples []float32) reply {
	var peak float32
	for _, v := range samples {
		peak = max(peak, v)
	}
	end := float64(len(samples)) / sampleRate
	return reply{ID: id, VADMs: 1, DecodeMs: 2, Segments: []segment{
		{Start: 0, End: end / 2, Text: fmt.Sprintf(" heard %d samples peaking at %.2f ", len(samples), peak),
			AvgLogprob: -0.123456, NoSpeechProb: 0.0123456},
		{Start: end / 2, End: end * 3 / 4, Text: "  "},
		{Start: end * 3 / 4, End: end, Text: "\tthe end.\n", AvgLogprob: -1},
	}}
}

// fakeInstall makes an install whose runner is the fake, starting as
// start says.
func fakeInstall(t *testing.T, start string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range append(requiredFiles("base"), requiredFiles("tiny")...) {
		data := []byte("stand-in")
		if name == "runner.mjs" {
			data = []byte(start)
		}
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeEngine is an engine over a fake install; it is closed when the test
// ends, which must leave no runner behind.
func fakeEngine(t *testing.T, start string, size string) (*Engine, string) {
	t.Helper()
	dir := fakeInstall(t, start)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Dir: dir, Node: self, Size: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e, dir
}

// starts is how many times the fake runner of the install in dir started.
func starts(t *testing.T, dir string) int {
	t.Helper()
	return noted(t, dir, "starts")
}

// note adds a line to the file name next to the fake runner's script.
func note(script, name string) {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(script), name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Fprintln(f)
	f.Close()
}

// noted is how many lines the fake runners of the install in dir wrote to
// the file name.
func noted(t *testing.T, dir, name string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

// waitUntil polls cond, about the fake runner, a process of its own,
// until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitQueued waits until n requests wait for e's runner: as many
// goroutines are parked in its acquire.
func waitQueued(t *testing.T, e *Engine, n int) {
	t.Helper()
	frame := []byte(fmt.Sprintf("moonshine.(*Engine).acquire(%p", e))
	waitUntil(t, fmt.Sprintf("%d requests to queue", n), func() bool {
		buf := make([]byte, 1<<20)
		for {
			if k := runtime.Stack(buf, true); k < len(buf) {
				return bytes.Count(buf[:k], frame) >= n
			}
			buf = make([]byte, 2*len(buf))
		}
	})
}

// clip is a WAV of seconds of silence at rate, whose first sample tells
// the fake runner what to do and whose peak is 0.5.
func clip(t *testing.T, rate int, seconds float64, do int) []byte {
	t.Helper()
	s := make([]float32, int(seconds*float64(rate)))
	if len(s) > 0 {
		s[0] = float32(do) / 8
	}
	if len(s) > 1 {
		s[len(s)/2] = 0.5
	}
	var b bytes.Buffer
	if err := audio.EncodeWAV(&b, audio.PCM{Rate: rate, Samples: s}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sink records what an engine sends.
type sink struct {
	mu     sync.Mutex
	body   []byte
	bodies int
}

func (s *sink) Event(context.Context, []byte) error {
	return errors.New("transcription sends no events")
}

func (s *sink) Body(ctx context.Context, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = append([]byte(nil), data...)
	s.bodies++
	return nil
}
