package rental

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWorkerArgs(t *testing.T) {
	v, _ := variantByID(Models(), "qwen3-8b-q4")
	w := WorkerSpec{Gateway: "https://gw.example", Token: "svc_w_x", Name: "Rented L4", Models: []Variant{v}}
	tests := []struct {
		engine string
		want   string
	}{
		{"sim", "worker --gateway https://gw.example --token-file /t --name Rented L4 --engine sim --pull qwen3-8b-q4 --always-on qwen3-8b-q4"},
		{"ollama=http://127.0.0.1:11434", "worker --gateway https://gw.example --token-file /t --name Rented L4 --engine ollama=http://127.0.0.1:11434 --pull qwen3:8b-q4_K_M --model-alias qwen3-8b-q4=qwen3:8b-q4_K_M --always-on qwen3-8b-q4"},
	}
	for _, tc := range tests {
		if got := strings.Join(WorkerArgs(w, "/t", tc.engine), " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.engine, got, tc.want)
		}
	}
}

// The boot script is valid shell, carries the token only into a 0600
// file, quotes a hostile name, and arms the machine's own shutdown.
func TestBootScript(t *testing.T) {
	v, _ := variantByID(Models(), "qwen3-8b-q4")
	l := Launch{RentalID: "r-1", Worker: WorkerSpec{Gateway: "https://gw.example", Token: "svc_w_secret",
		Name: `it's "$(reboot)"`, Models: []Variant{v}, MaxRuntime: 90 * time.Minute}}
	for _, url := range []string{"https://example.com/svc_1.0.0_linux_amd64.tar.gz", "https://example.com/svc"} {
		script := BootScript(l, BootOptions{WorkerURL: url})
		path := filepath.Join(t.TempDir(), "boot.sh")
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
			t.Fatalf("bash -n: %v\n%s\n%s", err, out, script)
		}
		for _, want := range []string{
			"shutdown -h +90 ",
			"printf '%s' svc_w_secret > /etc/svc/worker.token",
			`--name 'it'\''s "$(reboot)"'`,
			"--pull qwen3:8b-q4_K_M",
			"systemctl enable --now svc-worker.service",
		} {
			if !strings.Contains(script, want) {
				t.Errorf("script lacks %q:\n%s", want, script)
			}
		}
		if strings.Count(script, "svc_w_secret") != 1 {
			t.Errorf("the token appears more than once:\n%s", script)
		}
	}
}
