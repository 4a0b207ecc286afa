package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// jsClientDir is clients/js as clients/js/install.sh leaves it: its
// dependencies installed and dist/ built. Without it the test skips,
// unless SVC_REQUIRE_SDKS=1 (CI), where that is a failure.
func jsClientDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "js"))
	if err != nil {
		t.Fatal(err)
	}
	lock, _ := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	stamp, _ := os.ReadFile(filepath.Join(dir, "node_modules", ".svc-package-lock.json"))
	_, built := os.Stat(filepath.Join(dir, "dist", "index.js"))
	if len(lock) == 0 || !bytes.Equal(lock, stamp) || built != nil {
		msg := "the JavaScript client is not installed: run clients/js/install.sh"
		if os.Getenv("SVC_REQUIRE_SDKS") == "1" {
			t.Fatal("SVC_REQUIRE_SDKS=1: " + msg)
		}
		t.Skip(msg)
	}
	return dir
}

// jsResult is one line of clients/js/e2e/openai-sdk.mjs.
type jsResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
	Worker *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"worker"`
	Raw json.RawMessage `json:"-"`
}

// jsSDK prepares a folder where clients/js/e2e/openai-sdk.mjs finds the
// official OpenAI SDK (SVC_SDK_DIR) and the package, and returns a
// function that runs it in a mode against s.
func jsSDK(t testing.TB, s *server, key, marker string) func(mode string) []jsResult {
	t.Helper()
	sdk, js := sdkDir(t), jsClientDir(t)
	run := t.TempDir()
	src, err := os.ReadFile(filepath.Join(js, "e2e", "openai-sdk.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(run, "openai-sdk.mjs")
	// ES modules resolve packages from the script's folder up, and each
	// package's own dependencies from where its files really are.
	for _, link := range [][2]string{
		{filepath.Join(sdk, "node_modules", "openai"), filepath.Join(run, "node_modules", "openai")},
		{js, filepath.Join(run, "node_modules", "@svc-dev", "e2ee")},
	} {
		if err := os.MkdirAll(filepath.Dir(link[1]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(link[0], link[1]); err != nil {
			t.Fatal(err)
		}
	}
	audio := filepath.Join(run, "clip.wav")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(audio, tone(t, 2, 16000), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(mode string) []jsResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", script, mode)
		cmd.Env = append(os.Environ(), "SVC_BASE_URL="+s.URL, "SVC_API_KEY="+key, "SVC_MARKER="+marker, "SVC_AUDIO="+audio)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node openai-sdk.mjs %s: %v\n%s%s", mode, err, out, stderr.Bytes())
		}
		var results []jsResult
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var r jsResult
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Name != "" {
				r.Raw = append(json.RawMessage(nil), sc.Bytes()...)
				results = append(results, r)
			}
		}
		if len(results) == 0 {
			t.Fatalf("node openai-sdk.mjs %s reported nothing:\n%s%s", mode, out, stderr.Bytes())
		}
		return results
	}
}

// The official OpenAI JS SDK, given the JavaScript client's fetch and
// nothing else, completes a private chat (whole and streamed), embeddings,
// a transcription and speech through real gateway and worker processes,
// each reply naming the worker; the spec's refusals map to their classes;
// and the gateway's memory, store and logs never hold what was sealed.
func TestPrivateInferenceJS(t *testing.T) {
	marker := newMarker()
	s := startServer(t, "", "--log-level", "debug")
	key := s.adminKey()
	w := startWorker(t, s.URL, s.tokenFile(), "vault", "--engine", "sim=tps=0,ttft=0,rtf=0", "--log-level", "debug")
	run := jsSDK(t, s, key, marker)

	results := run("private")
	want := map[string]bool{"chat": true, "chat-stream": true, "embeddings": true, "transcription": true, "speech": true}
	for _, r := range results {
		t.Logf("%s", r.Raw)
		switch {
		case !r.OK:
			t.Errorf("%s: %s", r.Name, r.Error)
		case r.Worker == nil || r.Worker.Name != "vault" || r.Worker.ID == "":
			t.Errorf("%s: the serving worker was not reported: %s", r.Name, r.Raw)
		}
		delete(want, r.Name)
	}
	if len(want) > 0 {
		t.Fatalf("not run: %v", want)
	}

	// One usage row each, from the worker's report, never an estimate.
	var rows []map[string]any
	harness.Eventually(5*time.Second, func() bool {
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(key)).Body, &rows)
		return len(rows) >= 5
	})
	if len(rows) != 5 {
		t.Fatalf("rows %v", rows)
	}
	for _, r := range rows {
		if r["status_code"] != float64(200) || r["tokens_estimated"] != false {
			t.Errorf("row %v", r)
		}
	}

	refusals := run("refused")
	if len(refusals) != 2 {
		t.Errorf("refused: %d checks run, want 2", len(refusals))
	}
	for _, r := range refusals {
		t.Logf("%s", r.Raw)
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
	}

	s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e":true}`)
	for _, r := range run("e2e-required") {
		t.Logf("%s", r.Raw)
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
	}
	s.console("PATCH", "/api/v1/console/orgs/default", `{"plan":"free","require_e2e":false}`)
	for _, r := range run("plan-required") {
		t.Logf("%s", r.Raw)
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
	}

	assertNoPlaintext(t, s, w, marker)
}

// The same private requests against the demo (svc serve --demo), whose
// simulated worker runs in the gateway's process with its own key pair:
// what a new user tries first. Its speech-to-text model has the spec's id.
func TestPrivateInferenceJSOnTheDemo(t *testing.T) {
	s := startServer(t, "", "--demo")
	key := s.adminKey()
	s.workerNamed(key, "demo-sim", statusIs("healthy"))
	t.Setenv("SVC_STT_MODEL", "stt-large-v3-turbo")
	run := jsSDK(t, s, key, newMarker())
	want := map[string]bool{"chat": true, "chat-stream": true, "embeddings": true, "transcription": true, "speech": true}
	for _, r := range run("private") {
		switch {
		case !r.OK:
			t.Errorf("%s: %s", r.Name, r.Error)
		case r.Worker == nil || r.Worker.Name != "demo-sim":
			t.Errorf("%s: the serving worker was not reported: %s", r.Name, r.Raw)
		}
		delete(want, r.Name)
	}
	if len(want) > 0 {
		t.Fatalf("not run: %v", want)
	}
}

// BenchmarkPrivateJS is BenchmarkPrivate for the JavaScript client: the
// same chat, whole and streamed (200 chunks), with Node's fetch in the
// clear and with the package's fetch sealed, through the same gateway and
// worker. It reports medians over SVC_BENCH_N runs (100 by default).
//
//	go test ./internal/e2e -run '^$' -bench PrivateJS -benchtime 1x
func BenchmarkPrivateJS(b *testing.B) {
	s := startServer(b, "")
	key := s.adminKey()
	startWorker(b, s.URL, s.tokenFile(), "bench", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "8")
	run := jsSDK(b, s, key, "")
	for b.Loop() {
		for _, r := range run("bench") {
			if !r.OK {
				b.Fatalf("%s: %s", r.Name, r.Error)
			}
			b.Logf("%s", r.Raw)
		}
	}
}
