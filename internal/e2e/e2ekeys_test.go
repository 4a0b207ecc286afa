package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/harness"
)

func (s *server) e2eKeys(key string) map[string]e2ee.PublicKeyInfo {
	s.t.Helper()
	r := s.do("GET", "/api/v1/e2e/keys", "", bearer(key))
	if r.Status != 200 {
		s.t.Fatalf("keys = %d %s", r.Status, r.Body)
	}
	var out struct {
		Keys []e2ee.PublicKeyInfo `json:"keys"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		s.t.Fatal(err)
	}
	byName := map[string]e2ee.PublicKeyInfo{}
	for _, k := range out.Keys {
		byName[k.WorkerName] = k
	}
	return byName
}

// The key directory lists each connected worker's private-inference key
// with the models it serves privately: a new key after a restart unless
// the worker keeps it in a file; none for a worker with --e2e=false; only
// for keys that may send inference, and only on a plan with private
// inference.
func TestE2EKeyDirectory(t *testing.T) {
	s := startServer(t, "")
	admin := s.adminKey()
	keyFile := filepath.Join(t.TempDir(), "e2e.key")
	kept := startWorker(t, s.URL, s.tokenFile(), "kept", "--engine", "sim=tps=0,ttft=0", "--e2e-key", keyFile)
	fresh := startWorker(t, s.URL, s.tokenFile(), "fresh", "--engine", "sim=tps=0,ttft=0")
	startWorker(t, s.URL, s.tokenFile(), "clear-only", "--engine", "sim=tps=0,ttft=0", "--e2e=false")

	keys := s.e2eKeys(admin)
	if len(keys) != 2 {
		t.Fatalf("keys of %v", keys)
	}
	for _, name := range []string{"kept", "fresh"} {
		k := keys[name]
		sum := sha256.Sum256(k.PublicKey)
		if k.KeyID != hex.EncodeToString(sum[:8]) || len(k.PublicKey) != 1216 || k.KEMID != 0x647a || k.KDFID != 1 || k.AEADID != 2 ||
			k.Version != 1 || !slices.Contains(k.Models, "sim-chat") || !slices.Contains(k.Models, "sim-embed") || !slices.Contains(k.Models, "sim-tts") || !slices.Contains(k.Models, "sim-stt") ||
			!slices.Contains(k.Models, "sim-rerank") || !slices.Contains(k.Models, "sim-image") {
			t.Errorf("%s: %+v", name, k)
		}
		// The directory entry is a key a client can seal to.
		if _, _, err := e2ee.SealRequest(k, "sim-chat", false, []byte(`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`)); err != nil {
			t.Errorf("%s: cannot seal to it: %v", name, err)
		}
	}

	// Restarts: the kept key stays, the fresh one changes.
	before := keys
	_ = kept.stop(syscall.SIGTERM)
	_ = fresh.stop(syscall.SIGTERM)
	startWorker(t, s.URL, s.tokenFile(), "kept", "--engine", "sim=tps=0,ttft=0", "--e2e-key", keyFile)
	startWorker(t, s.URL, s.tokenFile(), "fresh", "--engine", "sim=tps=0,ttft=0")
	after := s.e2eKeys(admin)
	if after["kept"].KeyID != before["kept"].KeyID || after["fresh"].KeyID == before["fresh"].KeyID || after["fresh"].KeyID == "" {
		t.Fatalf("after restarts: kept %s → %s, fresh %s → %s", before["kept"].KeyID, after["kept"].KeyID, before["fresh"].KeyID, after["fresh"].KeyID)
	}

	usageOnly := keyFor(t, s, "u1", "member", "usage:read")
	if r := s.do("GET", "/api/v1/e2e/keys", "", bearer(usageOnly)); r.Status != 403 {
		t.Fatalf("a key without inference:write = %d %s", r.Status, r.Body)
	}
	s.console("PATCH", "/api/v1/console/orgs/default", `{"plan":"free"}`)
	r := s.do("GET", "/api/v1/e2e/keys", "", bearer(admin))
	var nested struct {
		Detail struct {
			Error struct{ Type string } `json:"error"`
		} `json:"detail"`
	}
	if r.Status != 403 || json.Unmarshal(r.Body, &nested) != nil || nested.Detail.Error.Type != "plan_required" {
		t.Fatalf("free plan = %d %s", r.Status, r.Body)
	}
}

// A client that does not trust the gateway's key directory pins the keys
// it seals to by fingerprint: svc chat --e2e-pin seals only to a worker
// whose key has a pinned fingerprint, and refuses to send the prompt at
// all, clear or sealed, when no listed key has one.
func TestCLIPinsWorkerKeys(t *testing.T) {
	s := startServer(t, "")
	keyFile := filepath.Join(t.TempDir(), "e2e.key")
	startWorker(t, s.URL, s.tokenFile(), "pinned", "--engine", "sim=tps=0,ttft=0", "--e2e-key", keyFile)
	keys := s.e2eKeys(s.adminKey())
	known := e2ee.Fingerprint(keys["pinned"].PublicKey)
	other, err := e2ee.GenerateKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	unknown := e2ee.Fingerprint(other.Public().PublicKey)
	env := []string{"SVC_BASE_URL=" + s.URL, "SVC_API_KEY=" + s.adminKey(), "HOME=" + t.TempDir()}
	rows := func(least int) []map[string]any {
		var rows []map[string]any
		harness.Eventually(5*time.Second, func() bool {
			_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(s.adminKey())).Body, &rows)
			return len(rows) >= least
		})
		return rows
	}

	out, errOut, code := svc(t, env, "chat", "sim-chat", "hello", "--no-stream", "--e2e-pin", known)
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("pinned to the worker's key: exit %d, %q %q", code, out, errOut)
	}
	if got := rows(1); len(got) != 1 || got[0]["worker_name"] != "pinned" {
		t.Fatalf("rows %v", got)
	}
	// The directory's key is not one the client pinned: nothing is sent.
	out, errOut, code = svc(t, env, "chat", "sim-chat", "hello", "--e2e-pin", strings.ToUpper(unknown))
	if code == 0 || !strings.Contains(errOut, "end-to-end encryption") || !strings.Contains(errOut, "--e2e-pin") {
		t.Fatalf("pinned to a key the gateway does not list: exit %d, %q %q", code, out, errOut)
	}
	if got := rows(2); len(got) != 1 {
		t.Fatalf("a request went out: rows %v", got)
	}
	if _, errOut, code = svc(t, env, "chat", "sim-chat", "hello", "--e2e-pin", "abc"); code != 2 || !strings.Contains(errOut, "64 hexadecimal digits") {
		t.Fatalf("a pin that is no fingerprint: exit %d, %q", code, errOut)
	}
	// An empty pin (a shell variable not set) pins nothing: refused, not
	// sent in the clear.
	if _, errOut, code = svc(t, env, "chat", "sim-chat", "hello", "--e2e-pin", ""); code != 2 || !strings.Contains(errOut, "no fingerprint") {
		t.Fatalf("an empty pin: exit %d, %q", code, errOut)
	}
	if got := rows(2); len(got) != 1 {
		t.Fatalf("a request went out: rows %v", got)
	}
}
