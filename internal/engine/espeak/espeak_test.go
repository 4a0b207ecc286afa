package espeak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// sink records the body an engine sends; fail makes Body fail.
type sink struct {
	body   []byte
	bodies int
	fail   bool
}

func (s *sink) Event(context.Context, []byte) error {
	return errors.New("speech sends no events")
}

func (s *sink) Body(_ context.Context, data []byte) error {
	if s.fail {
		return errors.New("client gone")
	}
	s.body = append([]byte(nil), data...)
	s.bodies++
	return nil
}

// spokenSamples is what the fake espeak-ng speaks: 100 bytes of 16-bit
// samples in a WAV whose sizes are those espeak-ng writes to a pipe.
var spokenSamples = bytes.Repeat([]byte{1, 2}, 50)

// fakeEspeak writes a stand-in for espeak-ng into a temporary directory:
// it lists someVoices (counting the listings in the file voices-listed),
// and otherwise saves its arguments and stdin to the files args and stdin
// and then runs the shell commands of speak, in which $dir is its
// directory and $dir/out.wav a WAV as espeak-ng writes one.
//
// The tests that run it are not parallel: a script written while another
// test forks can fail to start with "text file busy".
func fakeEspeak(t *testing.T, speak string) (e *Engine, dir string) {
	t.Helper()
	dir = t.TempDir()
	script := `#!/bin/sh
dir=$(dirname "$0")
if [ "$1" = --voices ]; then
	echo x >>"$dir/voices-listed"
	cat "$dir/voices.txt"
	exit 0
fi
printf '%s\n' "$@" >"$dir/args"
cat >"$dir/stdin"
` + speak + "\n"
	files := map[string][]byte{
		"voices.txt": []byte(someVoices),
		"out.wav":    riff(0x7ffff024, fmtChunk(), chunk{"data", 0x7ffff000, spokenSamples}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prog := filepath.Join(dir, "espeak-ng")
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return New(Config{Path: prog}), dir
}

func speechRequest(t *testing.T, p api.SpeechParams) *engine.Request {
	t.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Request{Kind: api.KindSpeech, Model: Kind, Body: body}
}

func TestServe(t *testing.T) {
	fixed := riff(36+100, fmtChunk(), chunk{"data", 100, spokenSamples})
	tests := []struct {
		name    string
		speak   string // the fake's shell commands
		req     *engine.Request
		maxWAV  int
		status  int
		errType string
		errHas  string
		args    []string // the fake's arguments, when it ran
		stdin   string
	}{{
		name:   "speaks stdin text with fixed sizes",
		speak:  `cat "$dir/out.wav"`,
		req:    speechRequest(t, api.SpeechParams{Input: "-v --help\n$(rm -rf /) ünïcode", Voice: "en-gb", Speed: 2}),
		status: http.StatusOK,
		args:   []string{"--stdout", "--stdin", "-b", "1", "-v", "gmw/en", "-s", "350"},
		stdin:  "-v --help\n$(rm -rf /) ünïcode",
	}, {
		name:   "a NUL is a space, not the end of the text",
		speak:  `cat "$dir/out.wav"`,
		req:    speechRequest(t, api.SpeechParams{Input: "Hello\x00 world, and more"}),
		status: http.StatusOK,
		args:   []string{"--stdout", "--stdin", "-b", "1", "-v", "gmw/en-US", "-s", "175"},
		stdin:  "Hello  world, and more",
	}, {
		name:   "voice by its file, default speed",
		speak:  `cat "$dir/out.wav"`,
		req:    speechRequest(t, api.SpeechParams{Input: "hi", Voice: "chr-US-Qaaa-x-west"}),
		status: http.StatusOK,
		args:   []string{"--stdout", "--stdin", "-b", "1", "-v", "iro/chr", "-s", "175"},
		stdin:  "hi",
	}, {
		name:   "no voice is the default",
		speak:  `cat "$dir/out.wav"`,
		req:    speechRequest(t, api.SpeechParams{Input: "hi", Speed: 0.25}),
		status: http.StatusOK,
		args:   []string{"--stdout", "--stdin", "-b", "1", "-v", "gmw/en-US", "-s", "80"},
		stdin:  "hi",
	}, {
		name:    "unknown voice",
		speak:   `cat "$dir/out.wav"`,
		req:     speechRequest(t, api.SpeechParams{Input: "hi", Voice: "alloy"}),
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  `voice: "alloy" is not a voice of espeak-ng; choose one of af, chr-US-Qaaa-x-west, de,`,
	}, {
		name:    "espeak-ng fails",
		speak:   "echo 'Error: voice data'  >&2; echo '  is missing' >&2; exit 3",
		req:     speechRequest(t, api.SpeechParams{Input: "hi", Voice: "de"}),
		status:  http.StatusBadGateway,
		errType: api.TypeUpstream,
		errHas:  "espeak-ng failed: exit status 3: Error: voice data is missing",
		args:    []string{"--stdout", "--stdin", "-b", "1", "-v", "gmw/de", "-s", "175"},
		stdin:   "hi",
	}, {
		name:    "not a WAV",
		speak:   "echo garbage",
		req:     speechRequest(t, api.SpeechParams{Input: "hi", Voice: "de"}),
		status:  http.StatusBadGateway,
		errType: api.TypeUpstream,
		errHas:  "espeak-ng wrote a bad WAV: not a RIFF WAVE file",
		args:    []string{"--stdout", "--stdin", "-b", "1", "-v", "gmw/de", "-s", "175"},
		stdin:   "hi",
	}, {
		name:    "too much audio",
		speak:   "head -c 100000 /dev/zero",
		req:     speechRequest(t, api.SpeechParams{Input: "hi", Voice: "de"}),
		maxWAV:  1000,
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  "too long to speak",
		args:    []string{"--stdout", "--stdin", "-b", "1", "-v", "gmw/de", "-s", "175"},
		stdin:   "hi",
	}, {
		name:    "chat",
		req:     &engine.Request{Kind: api.KindChat, Model: Kind, Body: []byte(`{}`)},
		status:  http.StatusNotImplemented,
		errType: api.TypeNotSupported,
	}, {
		name:    "transcription",
		req:     &engine.Request{Kind: api.KindTranscription, Model: Kind, Body: []byte(`{}`)},
		status:  http.StatusNotImplemented,
		errType: api.TypeNotSupported,
	}, {
		name:    "another model",
		req:     &engine.Request{Kind: api.KindSpeech, Model: "tts-1", Body: []byte(`{"input":"hi"}`)},
		status:  http.StatusNotFound,
		errType: api.TypeNotFound,
	}, {
		name:    "bad parameters",
		req:     &engine.Request{Kind: api.KindSpeech, Model: Kind, Body: []byte(`{"input":7}`)},
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, dir := fakeEspeak(t, tt.speak)
			if tt.maxWAV > 0 {
				e.maxWAV = tt.maxWAV
			}
			var s sink
			res := e.Serve(context.Background(), tt.req, &s)
			if res.Status != tt.status {
				t.Fatalf("status = %d (%+v), want %d", res.Status, res.Error, tt.status)
			}
			if tt.status == http.StatusOK {
				if !bytes.Equal(s.body, fixed) || s.bodies != 1 {
					t.Errorf("%d bodies, last\n% x\nwant\n% x", s.bodies, s.body, fixed)
				}
			} else {
				if res.Error == nil || res.Error.Type != tt.errType || !strings.Contains(res.Error.Message, tt.errHas) {
					t.Errorf("error = %+v, want type %s with %q", res.Error, tt.errType, tt.errHas)
				}
				if s.bodies != 0 {
					t.Errorf("a failure sent %d bodies", s.bodies)
				}
				if want := res.Status == http.StatusBadGateway; res.Retryable != want {
					t.Errorf("retryable = %v, want %v", res.Retryable, want)
				}
			}
			args, err := os.ReadFile(filepath.Join(dir, "args"))
			if tt.args == nil {
				if err == nil {
					t.Errorf("espeak-ng ran with %q", args)
				}
				return
			}
			if got := strings.Split(strings.TrimSuffix(string(args), "\n"), "\n"); !slices.Equal(got, tt.args) {
				t.Errorf("args = %q, want %q", got, tt.args)
			}
			if stdin, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(stdin) != tt.stdin {
				t.Errorf("stdin = %q, want %q", stdin, tt.stdin)
			}
		})
	}
}

func TestServeCancelled(t *testing.T) {
	e, dir := fakeEspeak(t, "exec sleep 30")
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan struct{})
	defer func() { <-cancelled }()
	go func() {
		defer close(cancelled)
		defer cancel()
		// Cancel once espeak-ng, a process of its own, has started: it
		// saves its args first.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(dir, "args")); err == nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	start := time.Now()
	res := e.Serve(ctx, speechRequest(t, api.SpeechParams{Input: "hi", Voice: "en-us"}), &sink{})
	if res.Status != 499 {
		t.Fatalf("status = %d (%+v), want 499", res.Status, res.Error)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelling took %v", d)
	}
}

func TestServeSinkGone(t *testing.T) {
	e, _ := fakeEspeak(t, `cat "$dir/out.wav"`)
	res := e.Serve(context.Background(), speechRequest(t, api.SpeechParams{Input: "hi"}), &sink{fail: true})
	if res.Status != 499 {
		t.Fatalf("status = %d (%+v), want 499", res.Status, res.Error)
	}
}

func TestModels(t *testing.T) {
	e, dir := fakeEspeak(t, "")
	for range 3 {
		ms, err := e.Models(context.Background())
		if err != nil {
			t.Fatalf("Models: %v", err)
		}
		if len(ms) != 1 {
			t.Fatalf("Models = %+v, want one model", ms)
		}
		m := ms[0]
		if m.ID != "espeak-ng" || m.Engine != "espeak-ng" || !slices.Equal(m.Capabilities, []string{api.CapSpeech}) ||
			m.DefaultVoice != "en-us" || !slices.Contains(m.Voices, "en-us") || len(m.Voices) != 7 || m.Simulated {
			t.Errorf("model = %+v", m)
		}
	}
	listed, _ := os.ReadFile(filepath.Join(dir, "voices-listed"))
	if n := strings.Count(string(listed), "x"); n != 1 {
		t.Errorf("espeak-ng listed its voices %d times, want once", n)
	}
	if info := e.Info(); info.Kind != "espeak-ng" || info.Simulated {
		t.Errorf("Info = %+v", info)
	}
}

func TestMissingProgram(t *testing.T) {
	e := New(Config{Path: filepath.Join(t.TempDir(), "espeak-ng")})
	if ms, err := e.Models(context.Background()); err == nil {
		t.Fatalf("Models = %+v, want an error", ms)
	}
	res := e.Serve(context.Background(), speechRequest(t, api.SpeechParams{Input: "hi", Voice: "en-us"}), &sink{})
	if res.Status != http.StatusBadGateway || !res.Retryable || !strings.Contains(res.Error.Message, "unreachable") {
		t.Errorf("result = %d %+v retryable %v, want the engine unreachable", res.Status, res.Error, res.Retryable)
	}
}

func TestWordsPerMinute(t *testing.T) {
	tests := []struct {
		speed float64
		want  int
	}{{0, 175}, {1, 175}, {0.25, 80}, {0.5, 88}, {2, 350}, {4, 700}, {10, 700}, {-1, 175}, {math.NaN(), 175}}
	for _, tt := range tests {
		if got := wordsPerMinute(tt.speed); got != tt.want {
			t.Errorf("wordsPerMinute(%v) = %d, want %d", tt.speed, got, tt.want)
		}
	}
}
