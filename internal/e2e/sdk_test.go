package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// sdkDir is where clients/sdk-tests/install.sh put the official npm SDKs
// (SVC_SDK_DIR). Without it the test skips, unless SVC_REQUIRE_SDKS=1
// (CI), where a missing SDK is a failure.
func sdkDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SVC_SDK_DIR")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); dir == "" || err != nil {
		msg := "the official SDKs are not installed: run clients/sdk-tests/install.sh DIR and set SVC_SDK_DIR=DIR"
		if os.Getenv("SVC_REQUIRE_SDKS") == "1" {
			t.Fatal("SVC_REQUIRE_SDKS=1: " + msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("SVC_SDK_DIR is set but node is not on PATH")
	}
	return dir
}

// The official OpenAI and Anthropic JavaScript SDKs, pointed at the
// demo (svc serve --demo, its simulated worker in the same process) with
// nothing else changed: chat, the Responses API and the Messages API,
// streamed and not, with tools; image generation, rerank, model
// retrieval, text completions, translations and a moderation with no
// model (the organisation's default); and the OpenAI SDK, the Vercel AI
// SDK and LangChain each running an agent loop with a tool, with no sim:
// line. Every request checked is one usage row under the X-Request-Id its
// SDK saw.
func TestOfficialSDKs(t *testing.T) {
	dir := sdkDir(t)
	s := startServer(t, "", "--demo")
	key := s.adminKey()
	s.workerNamed(key, "demo-sim", statusIs("healthy"))

	run := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "clients", "sdk-tests", "check.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(run, "check.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	// ES modules resolve packages from the script's folder up.
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Env = append(os.Environ(), "SVC_BASE_URL="+s.URL, "SVC_API_KEY="+key, "SVC_MODEL=sim-chat")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("node check.mjs:\n%s%s", out, stderr.Bytes())

	type result struct {
		Name      string `json:"name"`
		OK        bool   `json:"ok"`
		Error     string `json:"error"`
		RequestID string `json:"request_id"`
		// RequestType and Model are the row's, when not a chat of sim-chat.
		RequestType string `json:"request_type"`
		Model       string `json:"model"`
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r result
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		seen++
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Error)
			continue
		}
		if r.RequestID == "" {
			continue
		}
		row := waitRow(t, s, key, r.RequestID)
		if row["status_code"] != float64(200) || row["request_type"] != cmp.Or(r.RequestType, "chat") || row["model"] != cmp.Or(r.Model, "sim-chat") {
			t.Errorf("%s: row %v", r.Name, row)
		}
	}
	if err != nil && !t.Failed() {
		t.Fatalf("node: %v", err)
	}
	if seen < 20 {
		t.Fatalf("%d checks reported, want 20", seen)
	}
}
