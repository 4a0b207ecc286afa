package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// unitBinary is where the packages install svc, and so what the units run.
const unitBinary = "/usr/bin/svc"

// systemd-analyze verify parses the units as systemd would and checks what
// they refer to. Any line it prints is a failure: an unknown key or a bad
// value is only a warning to it.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("SVC_REQUIRE_SYSTEMD") != "" {
			t.Fatal("SVC_REQUIRE_SYSTEMD is set and systemd-analyze is not installed (Debian: systemd)")
		}
		t.Skip("systemd-analyze is not installed")
	}
	// verify checks only that ExecStart names an executable file, so the
	// test binary stands in for svc where the packages put it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	units, _ := filepath.Glob(filepath.Join("systemd", "*.s*"))
	dir := t.TempDir()
	var args []string
	for _, u := range units {
		if !strings.HasSuffix(u, ".service") && !strings.HasSuffix(u, ".socket") {
			continue
		}
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(u, ".service") && !bytes.Contains(b, []byte("ExecStart="+unitBinary+" ")) {
			t.Errorf("%s does not run %s", u, unitBinary)
		}
		out := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(out, bytes.ReplaceAll(b, []byte(unitBinary), []byte(self)), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, out)
	}
	if len(args) < 3 {
		t.Fatalf("found %d units in systemd/, want svc.service, svc.socket and svc-worker.service", len(args))
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--man=no"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The environment files set only variables svc reads (or the units
// expand), so a misspelt setting is caught here rather than ignored on a
// host.
func TestEnvFilesNameRealSettings(t *testing.T) {
	var src bytes.Buffer
	files, _ := filepath.Glob(filepath.Join("..", "internal", "cli", "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	read := func(name string) bool { return bytes.Contains(src.Bytes(), []byte(`"`+name+`"`)) }
	expanded := map[string]string{"serve.env": "svc.service", "worker.env": "svc-worker.service"}
	assignment := regexp.MustCompile(`(?m)^#?(SVC_[A-Z0-9_]+)=`)
	for env, unit := range expanded {
		b, err := os.ReadFile(filepath.Join("env", env))
		if err != nil {
			t.Fatal(err)
		}
		u, err := os.ReadFile(filepath.Join("systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(u, []byte("EnvironmentFile=-/etc/svc/"+env)) {
			t.Errorf("%s does not read /etc/svc/%s", unit, env)
		}
		vars := assignment.FindAllSubmatch(b, -1)
		if len(vars) == 0 {
			t.Fatalf("env/%s sets nothing", env)
		}
		for _, m := range vars {
			name := string(m[1])
			if !read(name) && !bytes.Contains(u, []byte("$"+name)) {
				t.Errorf("env/%s sets %s, which neither svc nor %s reads", env, name, unit)
			}
		}
	}
}

// goreleaser is not run by the tests (CI checks the file with it only
// where it is installed), so the files its packages and image are made
// from are checked here: each must exist.
func TestReleaseConfigFilesExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		NFPMs []struct {
			Contents []struct {
				Src string `yaml:"src"`
			} `yaml:"contents"`
			Scripts map[string]string `yaml:"scripts"`
		} `yaml:"nfpms"`
		Dockers []struct {
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"dockers_v2"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("goreleaser.yaml: %v", err)
	}
	var srcs []string
	for _, n := range cfg.NFPMs {
		for _, c := range n.Contents {
			srcs = append(srcs, c.Src)
		}
		for _, s := range n.Scripts {
			srcs = append(srcs, s)
		}
	}
	for _, d := range cfg.Dockers {
		srcs = append(srcs, d.Dockerfile)
	}
	if len(cfg.NFPMs) == 0 || len(cfg.Dockers) == 0 {
		t.Fatal("goreleaser.yaml has no nfpms or no dockers_v2")
	}
	for _, src := range srcs {
		if m, _ := filepath.Glob(filepath.Join("..", src)); len(m) == 0 {
			t.Errorf("goreleaser.yaml packages %s, which matches no file", src)
		}
	}
	for _, n := range cfg.NFPMs {
		for _, s := range n.Scripts {
			if fi, err := os.Stat(filepath.Join("..", s)); err == nil && fi.Mode()&0o111 == 0 {
				t.Errorf("%s is not executable", s)
			}
		}
	}
}
