package cli

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The wait for the replaced server's store follows its drain unless set,
// and a start grace of 0 turns the grace off rather than taking the
// fleet's default.
func TestServeRestartFlags(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		storeWait time.Duration
		grace     time.Duration
		usage     bool
	}{
		{name: "defaults", storeWait: 45 * time.Second, grace: 10 * time.Second},
		{name: "follows the drain", args: []string{"--drain-timeout", "5s"}, storeWait: 20 * time.Second, grace: 10 * time.Second},
		{name: "env", env: map[string]string{"SVC_STORE_WAIT": "2m", "SVC_START_GRACE": "3s"}, storeWait: 2 * time.Minute, grace: 3 * time.Second},
		{name: "no grace", args: []string{"--start-grace", "0"}, storeWait: 45 * time.Second, grace: -1},
		{name: "negative wait", args: []string{"--store-wait", "-1s"}, usage: true},
		{name: "negative drain", env: map[string]string{"SVC_DRAIN_TIMEOUT": "-5s"}, usage: true},
		{name: "negative hold", args: []string{"--queue-hold", "-1s"}, usage: true},
		{name: "negative worker grace", args: []string{"--worker-grace", "-1s"}, usage: true},
		{name: "public URL not a URL", env: map[string]string{"SVC_PUBLIC_URL": "notaurl"}, usage: true},
		{name: "public URL without a host", args: []string{"--public-url", "https://"}, usage: true},
		{name: "public URL", args: []string{"--public-url", "https://gw.example.com:8443"}, storeWait: 45 * time.Second, grace: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"HOME": "/h"}
			for k, v := range tt.env {
				env[k] = v
			}
			var got ServeOptions
			cmd := NewCmdServe(testFactory(env), func(_ context.Context, o *ServeOptions) error { got = *o; return nil })
			err := run(cmd, tt.args...)
			if tt.usage {
				if exitCode(err) != exitUsage {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w := storeWait(&got); w != tt.storeWait {
				t.Errorf("store wait = %v, want %v", w, tt.storeWait)
			}
			if g := startGrace(got.StartGrace); g != tt.grace {
				t.Errorf("start grace = %v, want %v", g, tt.grace)
			}
		})
	}
}

// A worker's durations are checked before it starts, as the server's are.
func TestWorkerDurationFlags(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		usage bool
	}{
		{args: []string{"--engine", "sim"}},
		{args: []string{"--engine", "sim", "--drain-timeout", "0s"}},
		{args: []string{"--engine", "sim", "--drain-timeout", "-1s"}, usage: true},
		{args: []string{"--engine", "sim", "--engine-ttfb", "0s"}, usage: true},
	} {
		cmd := NewCmdWorker(testFactory(map[string]string{"HOME": "/h"}), func(context.Context, *WorkerOptions) error { return nil })
		err := run(cmd, tt.args...)
		if got := exitCode(err) == exitUsage; got != tt.usage || (!tt.usage && err != nil) {
			t.Errorf("svc worker %v: %v, want a usage error: %v", tt.args, err, tt.usage)
		}
	}
}

// The demo's banner points another shell's svc commands at this server
// when they would not find it by default.
func TestDemoClientEnv(t *testing.T) {
	env := func(k string) string { return map[string]string{"HOME": "/home/ann"}[k] }
	for _, tt := range []struct{ addr, data, want string }{
		{"127.0.0.1:8080", "/home/ann/.local/share/svc", ""},
		{"127.0.0.1:46695", "/home/ann/.local/share/svc", "  In another shell, first: export SVC_BASE_URL=http://127.0.0.1:46695\n"},
		{"127.0.0.1:8080", "/tmp/d 1", "  In another shell, first: export SVC_DATA='/tmp/d 1'\n"},
		{"127.0.0.1:9", "/tmp/it's", "  In another shell, first: export SVC_BASE_URL=http://127.0.0.1:9 SVC_DATA='/tmp/it'\\''s'\n"},
	} {
		if got := clientEnv(env, tt.addr, tt.data); got != tt.want {
			t.Errorf("clientEnv(%q, %q) = %q, want %q", tt.addr, tt.data, got, tt.want)
		}
	}
}

// A token file named on the command line beats a token in the
// environment; both flags at once are a usage error.
func TestWorkerTokenPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.token")
	if err := os.WriteFile(file, []byte("svc_w_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env   map[string]string
		args  []string
		want  string
		usage bool
	}{
		{env: map[string]string{"SVC_WORKER_TOKEN": "svc_w_stale"}, args: []string{"--token-file", file}, want: "svc_w_fromfile"},
		{env: map[string]string{"SVC_WORKER_TOKEN": "svc_w_env", "SVC_WORKER_TOKEN_FILE": file}, want: "svc_w_env"},
		{env: map[string]string{"SVC_WORKER_TOKEN_FILE": file}, want: "svc_w_fromfile"},
		{args: []string{"--token", "svc_w_flag"}, env: map[string]string{"SVC_WORKER_TOKEN_FILE": file}, want: "svc_w_flag"},
		{args: []string{"--token", "svc_w_flag", "--token-file", file}, usage: true},
		// A token file that cannot be read is as lasting a mistake as an
		// empty one: systemd does not restart a worker for it.
		{args: []string{"--token-file", filepath.Join(dir, "none.token")}, usage: true},
		{args: []string{"--token-file", empty}, usage: true},
	} {
		env := map[string]string{"HOME": "/h"}
		maps.Copy(env, tt.env)
		var got string
		cmd := NewCmdWorker(testFactory(env), func(_ context.Context, o *WorkerOptions) error {
			var err error
			got, err = workerToken(o, func(k string) string { return env[k] })
			return err
		})
		err := run(cmd, append([]string{"--engine", "sim"}, tt.args...)...)
		if tt.usage {
			if exitCode(err) != exitUsage {
				t.Errorf("%v %v: %v, want a usage error", tt.env, tt.args, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%v %v: token %q, %v; want %q", tt.env, tt.args, got, err, tt.want)
		}
	}
}
