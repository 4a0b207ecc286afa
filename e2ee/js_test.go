package e2ee

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jsClient is clients/js with its dependencies installed and dist/ built
// from the current sources (clients/js/install.sh). Without them the
// JavaScript tests skip, unless SVC_REQUIRE_SDKS=1 (CI), where that is a
// failure.
func jsClient(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "clients", "js"))
	if err != nil {
		t.Fatal(err)
	}
	missing := func(why string) {
		t.Helper()
		msg := "the JavaScript client is not ready (" + why + "): run clients/js/install.sh"
		if os.Getenv("SVC_REQUIRE_SDKS") == "1" {
			t.Fatal("SVC_REQUIRE_SDKS=1: " + msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node is not on PATH")
	}
	lock, _ := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	stamp, _ := os.ReadFile(filepath.Join(dir, "node_modules", ".svc-package-lock.json"))
	if len(lock) == 0 || !bytes.Equal(lock, stamp) {
		missing("node_modules is missing or older than package-lock.json")
	}
	built, err := os.Stat(filepath.Join(dir, "dist", "index.js"))
	if err != nil {
		missing("dist/ is not built")
	}
	srcs, _ := filepath.Glob(filepath.Join(dir, "src", "*.ts"))
	for _, src := range srcs {
		if fi, err := os.Stat(src); err == nil && fi.ModTime().After(built.ModTime()) {
			missing(filepath.Base(src) + " is newer than dist/")
		}
	}
	return dir
}

func node(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vectors, err := filepath.Abs(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SVC_E2EE_VECTORS="+vectors)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// The JavaScript client's own tests: they open this package's test
// vectors, and cover tampering, truncation, bad key directories and each
// typed error against a fake gateway.
func TestJSClient(t *testing.T) {
	dir := jsClient(t)
	out := node(t, dir, "--test", "test/")
	if !bytes.Contains(out, []byte("\n# fail 0\n")) {
		t.Fatalf("node --test:\n%s", out)
	}
	t.Logf("node --test:\n%s", out[bytes.LastIndex(out, []byte("# tests")):])
}

// Requests sealed by the JavaScript client, one of each sealed kind, open
// here with the vector key's seed: the same envelope, header and HPKE info
// from both clients.
func TestJSEnvelopesOpenInGo(t *testing.T) {
	dir := jsClient(t)
	vectors, err := filepath.Abs(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var sealed []struct {
		Name        string  `json:"name"`
		Path        string  `json:"path"`
		ContentType string  `json:"content_type"`
		Envelope    string  `json:"envelope"`
		Clear       *string `json:"clear"`
	}
	if err := json.Unmarshal(node(t, dir, "scripts/seal-requests.mjs", vectors), &sealed); err != nil {
		t.Fatal(err)
	}
	if len(sealed) != 8 {
		t.Fatalf("%d requests sealed, want 8", len(sealed))
	}
	kp, err := NewKeyPair(vectorInputs()[0].Seed)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sealed {
		t.Run(s.Name, func(t *testing.T) {
			if s.ContentType != ContentType {
				t.Errorf("content type %q", s.ContentType)
			}
			req, err := OpenRequest(kp, []byte(s.Envelope))
			if err != nil {
				t.Fatal(err)
			}
			if req.Version != Version || req.Suite != DefaultSuite() || req.KeyID != kp.KeyID() {
				t.Errorf("envelope %+v", req.Envelope)
			}
			if s.Clear != nil {
				var body struct {
					Model  string `json:"model"`
					Stream bool   `json:"stream"`
				}
				if err := json.Unmarshal([]byte(*s.Clear), &body); err != nil {
					t.Fatal(err)
				}
				if string(req.Body) != *s.Clear || req.Model != body.Model || req.Stream != body.Stream {
					t.Errorf("opened %q (model %q, stream %v), sent %s", req.Body, req.Model, req.Stream, *s.Clear)
				}
				return
			}
			// The upload: its Content-Type line, then the multipart body.
			ctype, upload, ok := strings.Cut(string(req.Body), "\n")
			mt, params, err := mime.ParseMediaType(ctype)
			if !ok || err != nil || mt != "multipart/form-data" || req.Model != "stt-model" || req.Stream {
				t.Fatalf("upload %q (model %q)", ctype, req.Model)
			}
			fields := map[string]string{}
			mr := multipart.NewReader(strings.NewReader(upload), params["boundary"])
			for {
				p, err := mr.NextPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(p)
				fields[p.FormName()] = string(b)
			}
			if fields["model"] != "stt-model" || fields["prompt"] != "a sealed prompt" || fields["response_format"] != "srt" ||
				fields["file"] != "RIFF\x00\x01\x02\x03" {
				t.Errorf("form %q", fields)
			}
		})
	}
}
