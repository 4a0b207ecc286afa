package espeak

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
)

// realEngine is an engine over the espeak-ng installed on PATH. Without
// one the test is skipped, or fails when SVC_REQUIRE_REAL_ENGINES=1 (CI).
func realEngine(t *testing.T) *Engine {
	t.Helper()
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		if os.Getenv("SVC_REQUIRE_REAL_ENGINES") == "1" {
			t.Fatalf("SVC_REQUIRE_REAL_ENGINES=1 but espeak-ng is not installed: %v", err)
		}
		t.Skip("espeak-ng is not installed (apt-get install espeak-ng)")
	}
	return New(Config{})
}

// say speaks text through the real engine and decodes the answer, checking
// that the WAV's header sizes are exact.
func say(t *testing.T, e *Engine, text, voice string, speed float64) audio.PCM {
	t.Helper()
	var s sink
	res := e.Serve(context.Background(), speechRequest(t, api.SpeechParams{Input: text, Voice: voice, Speed: speed}), &s)
	if res.Status != 200 {
		t.Fatalf("Serve(%q): %d %+v", text, res.Status, res.Error)
	}
	le := binary.LittleEndian
	if n := len(s.body); n < 44 || le.Uint32(s.body[4:]) != uint32(n-8) || le.Uint32(s.body[40:]) != uint32(n-44) {
		t.Fatalf("WAV of %d bytes has RIFF size %d and data size %d", n, le.Uint32(s.body[4:]), le.Uint32(s.body[40:]))
	}
	if _, _, err := audio.ToSpeechWAV(s.body); err != nil {
		t.Fatalf("the worker could not convert the WAV: %v", err)
	}
	pcm, err := audio.Decode(bytes.NewReader(s.body))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return pcm
}

func seconds(p audio.PCM) float64 { return float64(len(p.Samples)) / float64(p.Rate) }

func rms(p audio.PCM) float64 {
	var sum float64
	for _, v := range p.Samples {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(max(len(p.Samples), 1)))
}

func TestRealModels(t *testing.T) {
	e := realEngine(t)
	ms, err := e.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].ID != "espeak-ng" || ms[0].DefaultVoice != "en-us" {
		t.Fatalf("Models = %+v", ms)
	}
	for _, v := range []string{"en-us", "en-gb", "de"} {
		if !slices.Contains(ms[0].Voices, v) {
			t.Errorf("voices %q lack %s", ms[0].Voices, v)
		}
	}
	if !slices.IsSorted(ms[0].Voices) || len(ms[0].Voices) < 50 {
		t.Errorf("voices = %q, want many, sorted", ms[0].Voices)
	}
}

func TestRealSpeech(t *testing.T) {
	e := realEngine(t)
	const short = "The quick brown fox jumps over the lazy dog."
	const long = short + " Please open the door and turn on the lights in the kitchen. " +
		"The meeting has been moved to Thursday afternoon."

	normal := say(t, e, short, "en-us", 1)
	if d := seconds(normal); d < 1.5 || d > 6 {
		t.Errorf("%q lasts %.2f s, want 1.5 to 6", short, d)
	}
	if r := rms(normal); r < 0.02 {
		t.Errorf("speech RMS = %.4f: silent", r)
	}
	if d, d0 := seconds(say(t, e, long, "en-us", 1)), seconds(normal); d < 2.5*d0 {
		t.Errorf("a text 3.5 times as long lasts %.2f s against %.2f s", d, d0)
	}
	if d, d0 := seconds(say(t, e, short, "en-us", 2)), seconds(normal); d > 0.7*d0 {
		t.Errorf("at speed 2 it lasts %.2f s against %.2f s at 1", d, d0)
	}
	if d, d0 := seconds(say(t, e, short, "en-us", 0.5)), seconds(normal); d < 1.4*d0 {
		t.Errorf("at speed 0.5 it lasts %.2f s against %.2f s at 1", d, d0)
	}
	// A voice espeak-ng does not find by its language code.
	if r := rms(say(t, e, "osiyo", "chr-US-Qaaa-x-west", 1)); r < 0.02 {
		t.Errorf("Cherokee RMS = %.4f: silent", r)
	}
	// Text that looks like options is spoken, not obeyed.
	if r := rms(say(t, e, "--help -v xx", "en-gb", 1)); r < 0.02 {
		t.Errorf("option-like text RMS = %.4f: silent", r)
	}
}
