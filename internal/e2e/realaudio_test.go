package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unicode"
)

// realEngines returns the Moonshine install to use, skipping the test when
// a real engine is missing, unless SVC_REQUIRE_REAL_ENGINES=1 (CI) makes
// that a failure.
func realEngines(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SVC_MOONSHINE_DIR")
	_, err := exec.LookPath("espeak-ng")
	var missing string
	switch {
	case err != nil:
		missing = "espeak-ng is not installed"
	case dir == "":
		missing = "SVC_MOONSHINE_DIR names no Moonshine install (engines/moonshine/install.sh DIR)"
	}
	if missing == "" {
		return dir
	}
	if os.Getenv("SVC_REQUIRE_REAL_ENGINES") == "1" {
		t.Fatal(missing)
	}
	t.Skip(missing)
	return ""
}

// wer is the word error rate of hyp against ref: the edit distance over
// words, divided by the number of reference words. Case and punctuation
// do not count.
func wer(ref, hyp string) float64 {
	norm := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && r != '\'' })
	}
	r, h := norm(ref), norm(hyp)
	prev := make([]int, len(h)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(r); i++ {
		cur := make([]int, len(h)+1)
		cur[0] = i
		for j := 1; j <= len(h); j++ {
			sub := prev[j-1]
			if r[i-1] != h[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev = cur
	}
	return float64(prev[len(h)]) / float64(len(r))
}

func TestWER(t *testing.T) {
	tests := []struct {
		ref, hyp string
		want     float64
	}{
		{"the cat sat", "The cat sat.", 0},
		{"the cat sat", "the cat", 1.0 / 3},
		{"the cat sat", "a cat sat down", 2.0 / 3},
		{"the cat sat", "", 1},
	}
	for _, tt := range tests {
		if got := wer(tt.ref, tt.hyp); got != tt.want {
			t.Errorf("wer(%q, %q) = %v, want %v", tt.ref, tt.hyp, got, tt.want)
		}
	}
}

// Speech made by espeak-ng on one worker is transcribed back by Moonshine
// on another, both through the gateway, and reads as what was said: the
// real engines, on the CPU, end to end.
//
// The bounds hold with a wide margin: espeak-ng's voice is unlike the
// speech Moonshine learnt from, and it still gets about 3% of these words
// wrong (measured: one word in 39).
func TestRealEnginesRoundTrip(t *testing.T) {
	const perSentence, overall = 0.35, 0.20
	dir := realEngines(t)
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "cpu-voice", "--engine", "espeak-ng")
	startWorker(t, s.URL, s.tokenFile(), "cpu-ears", "--engine", "moonshine="+dir, "--model-alias", "stt-large-v3-turbo=moonshine-base")

	r := s.do("GET", "/v1/models", "", bearer(key))
	var list struct {
		Data []map[string]any `json:"data"`
	}
	_ = json.Unmarshal(r.Body, &list)
	engines := map[string]string{}
	for _, m := range list.Data {
		if m["simulated"] == true {
			t.Fatalf("a real engine's model is labelled simulated: %v", m)
		}
		engines[m["id"].(string)], _ = m["engine"].(string)
		if m["id"] == "stt-large-v3-turbo" && m["local_model"] != "moonshine-base" {
			t.Fatalf("the alias does not name its local model: %v", m)
		}
	}
	if engines["espeak-ng"] != "espeak-ng" || engines["stt-large-v3-turbo"] != "moonshine" {
		t.Fatalf("models %s", r.Body)
	}

	sentences := []string{
		"The quick brown fox jumps over the lazy dog.",
		"Please open the door and turn on the lights in the kitchen.",
		"The weather today is sunny with a light breeze from the west.",
	}
	var errs, words float64
	for _, text := range sentences {
		r := s.do("POST", "/v1/audio/speech", `{"model":"espeak-ng","voice":"en-us","input":"`+text+`"}`, bearer(key))
		if r.Status != 200 || r.Header.Get("X-Worker-Name") != "cpu-voice" {
			t.Fatalf("speech: %d %s", r.Status, r.Body)
		}
		// espeak-ng speaks at 22.05 kHz: the worker resampled it.
		info := checkSpeechWAV(t, r.Body)
		if info.Seconds < 1.5 {
			t.Fatalf("%q spoken in %.2f s", text, info.Seconds)
		}

		ct, body := upload(t, r.Body, "model", "stt-large-v3-turbo", "language", "en", "response_format", "verbose_json")
		tr := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
		if tr.Status != 200 || tr.Header.Get("X-Worker-Name") != "cpu-ears" {
			t.Fatalf("transcription: %d %s", tr.Status, tr.Body)
		}
		var v struct {
			Text     string  `json:"text"`
			Duration float64 `json:"duration"`
			Segments []struct {
				Start, End float64
			} `json:"segments"`
		}
		if err := json.Unmarshal(tr.Body, &v); err != nil || len(v.Segments) == 0 {
			t.Fatalf("transcript %s: %v", tr.Body, err)
		}
		if d := v.Duration - info.Seconds; d > 0.05 || d < -0.05 {
			t.Errorf("transcript of %.2f s of audio says %.2f s", info.Seconds, v.Duration)
		}
		rate := wer(text, v.Text)
		t.Logf("%q -> %q: WER %.0f%%", text, v.Text, 100*rate)
		if rate > perSentence {
			t.Errorf("WER %.0f%% for %q (heard %q), bound %.0f%%", 100*rate, text, v.Text, 100*perSentence)
		}
		n := float64(len(strings.Fields(text)))
		errs, words = errs+rate*n, words+n
	}
	if total := errs / words; total > overall {
		t.Errorf("overall WER %.0f%%, bound %.0f%%", 100*total, 100*overall)
	}

	// MP3 and FLAC are decoded on the worker: "Hello world." as LAME and
	// FLAC encoded it (internal/audio/testdata).
	for _, f := range []struct{ name, format string }{{"speech-vbr.mp3", "mp3"}, {"speech.flac", "flac"}} {
		file, err := os.ReadFile("../audio/testdata/" + f.name)
		if err != nil {
			t.Fatal(err)
		}
		ct, body := upload(t, file, "model", "stt-large-v3-turbo", "response_format", "text")
		tr := s.post("/v1/audio/transcriptions", ct, body, bearer(key))
		if tr.Status != 200 || wer("hello world", string(tr.Body)) > 0.5 {
			t.Errorf("%s: %d %q", f.name, tr.Status, tr.Body)
		}
		if row := s.usageRow(key, tr.Header.Get("X-Request-Id")); row["audio_format"] != f.format {
			t.Errorf("%s recorded as %v", f.name, row["audio_format"])
		}
	}
}
