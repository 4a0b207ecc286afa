package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/iostreams"
)

// configWorld is a temporary HOME with a config file and a local gateway's
// data directory holding its admin key.
type configWorld struct {
	home, data, configFile, adminKey string
}

func newConfigWorld(t *testing.T, file string) configWorld {
	t.Helper()
	w := configWorld{home: t.TempDir(), data: t.TempDir()}
	w.configFile = filepath.Join(w.home, ".config", "svc", "config.json")
	w.adminKey = filepath.Join(w.data, "admin.key")
	if err := os.WriteFile(w.adminKey, []byte("svc_k_admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if file != "" {
		if err := os.MkdirAll(filepath.Dir(w.configFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w.configFile, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// resolve runs ClientConfig for a command given args, in env.
func resolve(t *testing.T, env map[string]string, args ...string) (ClientConfig, error) {
	t.Helper()
	ios, _, _, _ := iostreams.Test()
	f := &Factory{IO: ios, Build: buildinfo.Info{Version: "v1"}, Getenv: func(k string) string { return env[k] }}
	cmd := &cobra.Command{Use: "x"}
	AddClientFlags(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return f.ClientConfig(cmd)
}

func TestClientConfigPrecedence(t *testing.T) {
	const file = `{"base_url": "http://127.0.0.1:9000/", "api_key": "svc_k_file"}`
	w := newConfigWorld(t, file)
	bare := newConfigWorld(t, "")
	tests := []struct {
		name             string
		world            configWorld
		env              map[string]string
		args             []string
		wantURL, wantKey string
		wantSource       string // "file", "admin" or literal
	}{
		{name: "flag beats env and file",
			world: w, env: map[string]string{"SVC_BASE_URL": "http://127.0.0.1:9001", "SVC_API_KEY": "svc_k_env"},
			args:    []string{"--base-url", "http://127.0.0.1:9002", "--api-key", "svc_k_flag"},
			wantURL: "http://127.0.0.1:9002", wantKey: "svc_k_flag", wantSource: "--api-key"},
		{name: "env beats file",
			world: w, env: map[string]string{"SVC_BASE_URL": "http://127.0.0.1:9001", "SVC_API_KEY": "svc_k_env"},
			wantURL: "http://127.0.0.1:9001", wantKey: "svc_k_env", wantSource: "SVC_API_KEY"},
		{name: "file beats the admin key",
			world:   w,
			wantURL: "http://127.0.0.1:9000", wantKey: "svc_k_file", wantSource: "file"},
		{name: "the file's key only for its gateway",
			world: w, env: map[string]string{"SVC_BASE_URL": "http://127.0.0.1:9001"},
			wantURL: "http://127.0.0.1:9001", wantKey: "svc_k_admin", wantSource: "admin"},
		{name: "flag URL and file key for that URL",
			world: w, args: []string{"--base-url", "http://127.0.0.1:9000"},
			wantURL: "http://127.0.0.1:9000", wantKey: "svc_k_file", wantSource: "file"},
		{name: "the admin key as the last resort",
			world:   bare,
			wantURL: DefaultBaseURL, wantKey: "svc_k_admin", wantSource: "admin"},
		{name: "never the admin key to another host",
			world: bare, args: []string{"--base-url", "https://gw.example.com"},
			wantURL: "https://gw.example.com", wantKey: ""},
		{name: "localhost is this host",
			world: bare, env: map[string]string{"SVC_BASE_URL": "http://localhost:8080"},
			wantURL: "http://localhost:8080", wantKey: "svc_k_admin", wantSource: "admin"},
		{name: "an empty env var is unset",
			world: w, env: map[string]string{"SVC_API_KEY": "", "SVC_BASE_URL": ""},
			wantURL: "http://127.0.0.1:9000", wantKey: "svc_k_file", wantSource: "file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"HOME": tt.world.home, "SVC_DATA": tt.world.data}
			for k, v := range tt.env {
				env[k] = v
			}
			cc, err := resolve(t, env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			source := tt.wantSource
			switch source {
			case "file":
				source = tt.world.configFile
			case "admin":
				source = tt.world.adminKey
			}
			if cc.BaseURL != tt.wantURL || cc.APIKey != tt.wantKey || cc.KeySource != source {
				t.Fatalf("got %+v\nwant url %s key %q from %q", cc, tt.wantURL, tt.wantKey, source)
			}
		})
	}
}

func TestClientConfigFileLocation(t *testing.T) {
	xdg, other := t.TempDir(), t.TempDir()
	write := func(path, key string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(`{"api_key": "`+key+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(xdg, "svc", "config.json"), "svc_k_xdg")
	write(filepath.Join(other, "elsewhere.json"), "svc_k_svcconfig")
	cc, err := resolve(t, map[string]string{"HOME": "/nonexistent", "XDG_CONFIG_HOME": xdg})
	if err != nil || cc.APIKey != "svc_k_xdg" {
		t.Fatalf("XDG_CONFIG_HOME: %+v %v", cc, err)
	}
	cc, err = resolve(t, map[string]string{"XDG_CONFIG_HOME": xdg, "SVC_CONFIG": filepath.Join(other, "elsewhere.json")})
	if err != nil || cc.APIKey != "svc_k_svcconfig" {
		t.Fatalf("SVC_CONFIG: %+v %v", cc, err)
	}
	// Nowhere to look: the environment still works.
	cc, err = resolve(t, map[string]string{"SVC_API_KEY": "k"})
	if err != nil || cc.APIKey != "k" || cc.BaseURL != DefaultBaseURL {
		t.Fatalf("no HOME: %+v %v", cc, err)
	}

	write(filepath.Join(other, "bad.json"), "x")
	if err := os.WriteFile(filepath.Join(other, "bad.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := resolve(t, map[string]string{"SVC_CONFIG": filepath.Join(other, "bad.json")}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := resolve(t, map[string]string{"SVC_BASE_URL": "127.0.0.1:8080"}); exitCode(err) != exitUsage {
		t.Fatalf("URL without a scheme: %v", err)
	}
}

// The precedence holds end to end: the key the gateway receives.
func TestAPIClientSendsResolvedKey(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{"GET /v1/models": {body: "models.json"}})
	w := newConfigWorld(t, `{"base_url": "`+g.URL+`", "api_key": "svc_k_file"}`)
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"HOME": w.home, "SVC_DATA": w.data}, nil, "Bearer svc_k_file"},
		{map[string]string{"HOME": w.home, "SVC_DATA": w.data, "SVC_API_KEY": "svc_k_env"}, nil, "Bearer svc_k_env"},
		{map[string]string{"HOME": w.home, "SVC_DATA": w.data, "SVC_API_KEY": "svc_k_env"}, []string{"--api-key", "svc_k_flag"}, "Bearer svc_k_flag"},
		{map[string]string{"HOME": t.TempDir(), "SVC_DATA": w.data, "SVC_BASE_URL": g.URL}, nil, "Bearer svc_k_admin"},
	} {
		r := cliRun{env: tt.env}.run(t, append([]string{"models", "--json"}, tt.args...)...)
		if got := g.last("/v1/models").Auth; r.code != 0 || got != tt.want {
			t.Errorf("env %v args %v: exit %d, sent %q, want %q", tt.env, tt.args, r.code, got, tt.want)
		}
	}
}

func TestLoginLogout(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`, key: "svc_k_good"},
		"GET /v1/models":                     {body: "models.json", key: "svc_k_good"},
	})
	home := t.TempDir()
	env := map[string]string{"HOME": home, "SVC_BASE_URL": g.URL}
	path := filepath.Join(home, ".config", "svc", "config.json")

	// A refused key is not saved.
	r := cliRun{env: env, stdin: "svc_k_bad\n"}.run(t, "login")
	if r.code != exitAuth || !strings.Contains(r.stderr, "refused the key, so it was not saved: Invalid API key") {
		t.Fatalf("bad key: exit %d %q", r.code, r.stderr)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("config written for a refused key: %v", err)
	}

	// The key from a pipe, checked and saved 0600 in a 0700 directory.
	r = cliRun{env: env, stdin: "svc_k_good\n"}.run(t, "login")
	if r.code != 0 || !strings.Contains(r.stdout, "Logged in to "+g.URL+"; the key is saved in "+path) {
		t.Fatalf("login: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := g.last("/api/v1/workers/latest-version").Auth; got != "Bearer svc_k_good" {
		t.Fatalf("checked with %q", got)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: mode %v, want %v (%v)", p, st.Mode().Perm(), want, err)
		}
	}
	cf, err := readClientFile(path)
	if err != nil || cf.BaseURL != g.URL || cf.APIKey != "svc_k_good" {
		t.Fatalf("saved %+v %v", cf, err)
	}

	// Client commands now use it, with no other configuration.
	r = cliRun{env: map[string]string{"HOME": home}}.run(t, "models", "--base-url", g.URL, "--jq", ".data[0].id")
	if r.code != 0 || r.stdout != "qwen3-32b\n" {
		t.Fatalf("after login: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// --api-key works too, and replaces the saved key.
	r = cliRun{env: env}.run(t, "login", "--api-key", "svc_k_good")
	if r.code != 0 {
		t.Fatalf("login --api-key: %q", r.stderr)
	}

	// logout drops the key and keeps the URL.
	r = cliRun{env: env}.run(t, "logout")
	if r.code != 0 || !strings.Contains(r.stdout, "Removed the API key for "+g.URL) {
		t.Fatalf("logout: %q %q", r.stdout, r.stderr)
	}
	if cf, _ := readClientFile(path); cf.APIKey != "" || cf.BaseURL != g.URL {
		t.Fatalf("after logout %+v", cf)
	}
	r = cliRun{env: env}.run(t, "logout")
	if r.code != 0 || !strings.Contains(r.stdout, "No API key is saved") {
		t.Fatalf("second logout: %q", r.stdout)
	}
	r = cliRun{env: map[string]string{"HOME": home}}.run(t, "models", "--base-url", g.URL)
	if r.code != exitAuth || !strings.Contains(r.stderr, "No API key is configured") {
		t.Fatalf("after logout: exit %d %q", r.code, r.stderr)
	}

	// An empty pipe is a usage error.
	r = cliRun{env: env}.run(t, "login")
	if r.code != exitUsage {
		t.Fatalf("no key: exit %d %q", r.code, r.stderr)
	}
}

func TestLoginForbiddenKeyIsSaved(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers/latest-version": {status: 403, body: `{"detail": "This key lacks the workers:read permission"}`},
	})
	home := t.TempDir()
	r := cliRun{env: map[string]string{"HOME": home}}.run(t, "login", "--base-url", g.URL, "--api-key", "svc_k_inference")
	if r.code != 0 || !strings.Contains(r.stderr, "Warning: the key cannot list workers") {
		t.Fatalf("exit %d %q", r.code, r.stderr)
	}
	if cf, _ := readClientFile(filepath.Join(home, ".config", "svc", "config.json")); cf.APIKey != "svc_k_inference" {
		t.Fatalf("saved %+v", cf)
	}
}

func TestWriteClientFileReplacesLooseMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeClientFile(path, clientFile{APIKey: "k"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
}

// A config file that is not one stops only the commands that need it:
// not one given its URL and key by flags or the environment. 'svc login'
// writes a new one, and 'svc logout' removes it.
func TestBrokenConfigFile(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0"}`, key: "svc_k_good"},
		"GET /v1/models":                     {body: "models.json", key: "svc_k_good"},
	})
	for _, tc := range []struct{ content, want string }{
		{"{bad json", "is not valid JSON"},
		{`{"base_url": 5}`, "base_url must be a string, not a JSON number"},
	} {
		home := t.TempDir()
		path := filepath.Join(home, ".config", "svc", "config.json")
		write := func() {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write()
		home1 := map[string]string{"HOME": home}
		r := cliRun{env: home1}.run(t, "models", "--base-url", g.URL)
		if r.code != exitError || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "svc login") {
			t.Fatalf("%s: a command that needs the file: exit %d %q", tc.content, r.code, r.stderr)
		}
		r = cliRun{env: home1}.run(t, "models", "--base-url", g.URL, "--api-key", "svc_k_good", "--json")
		if r.code != 0 {
			t.Fatalf("%s: flags give all: exit %d %q", tc.content, r.code, r.stderr)
		}
		r = cliRun{env: map[string]string{"HOME": home, "SVC_BASE_URL": g.URL, "SVC_API_KEY": "svc_k_good"}}.run(t, "models", "--json")
		if r.code != 0 {
			t.Fatalf("%s: the environment gives all: exit %d %q", tc.content, r.code, r.stderr)
		}
		r = cliRun{env: map[string]string{"HOME": home, "SVC_BASE_URL": g.URL}, stdin: "svc_k_good\n"}.run(t, "login")
		if r.code != 0 || !strings.Contains(r.stderr, "writing a new one") {
			t.Fatalf("%s: login over it: exit %d %q", tc.content, r.code, r.stderr)
		}
		if cf, err := readClientFile(path); err != nil || cf.APIKey != "svc_k_good" {
			t.Fatalf("%s: after login %+v %v", tc.content, cf, err)
		}
		write()
		r = cliRun{env: home1}.run(t, "logout")
		if _, err := os.Stat(path); r.code != 0 || !os.IsNotExist(err) {
			t.Fatalf("%s: logout: exit %d %q, file %v", tc.content, r.code, r.stderr, err)
		}
	}
}

func TestNormalizeBaseURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{" https://gw.example.com/ ", "https://gw.example.com"},
		{"http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"}, // the SDKs' base URL
		{"http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080"},
		{"https://example.com/svc/v1", "https://example.com/svc"},
		{"https://example.com/v10", "https://example.com/v10"},
		{"http://127.0.0.1:99999", ""},
		{"http://127.0.0.1:0", ""},
		{"http://127.0.0.1:", ""},
		{"ftp://x", ""},
		{"notaurl", ""},
	} {
		got, err := normalizeBaseURL(tc.in)
		if tc.want == "" {
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Errorf("%q: %q, %v; want a usage error", tc.in, got, err)
			}
			continue
		}
		if got != tc.want || err != nil {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
