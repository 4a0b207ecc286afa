package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/money"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/worker"
)

func testFactory(env map[string]string) *Factory {
	ios, _, _, _ := iostreams.Test()
	return &Factory{
		IO:     ios,
		Build:  buildinfo.Info{Version: "v1.2.3", Commit: "0123456789abcdef0123", Go: "go1.26.0"},
		Getenv: func(k string) string { return env[k] },
	}
}

// run executes a command tree with args and returns the error.
func run(cmd *cobra.Command, args ...string) error {
	cmd.SetArgs(args)
	cmd.SetOut(&strings.Builder{})
	cmd.SetErr(&strings.Builder{})
	_, err := cmd.ExecuteC()
	return err
}

func TestKeysCreateFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		want  api.CreateKeyRequest
		usage bool
	}{
		{"defaults", []string{"--name", "ci"}, api.CreateKeyRequest{Name: "ci", User: "admin"}, false},
		{"repeated perms", []string{"--name", "ci", "--perm", "usage:read", "--perm", "workers:read"},
			api.CreateKeyRequest{Name: "ci", User: "admin", Permissions: []string{"usage:read", "workers:read"}}, false},
		{"comma perms", []string{"--name", "ci", "--user", "bob", "--perm", "usage:read, inference:write"},
			api.CreateKeyRequest{Name: "ci", User: "bob", Permissions: []string{"usage:read", "inference:write"}}, false},
		{"unrestricted", []string{"--name", "legacy", "--unrestricted"}, api.CreateKeyRequest{Name: "legacy", User: "admin", Unrestricted: true}, false},
		{"no name", []string{"--perm", "usage:read"}, api.CreateKeyRequest{}, true},
		{"positional", []string{"--name", "x", "extra"}, api.CreateKeyRequest{}, true},
		{"unknown flag", []string{"--name", "x", "--colour"}, api.CreateKeyRequest{}, true},
		{"exclusive", []string{"--name", "x", "--perm", "usage:read", "--unrestricted"}, api.CreateKeyRequest{}, true},
		{"empty perm", []string{"--name", "x", "--perm", ""}, api.CreateKeyRequest{}, true},
		{"stray comma", []string{"--name", "x", "--perm", "usage:read,"}, api.CreateKeyRequest{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *KeyCreateOptions
			o := &AdminOptions{IO: testFactory(nil).IO}
			cmd := NewCmdAdminKeysCreate(o, func(opts *KeyCreateOptions) error { got = opts; return nil })
			cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
			err := run(cmd, tt.args...)
			if tt.usage {
				if exitCode(err) != exitUsage {
					t.Fatalf("err = %v (exit %d), want a usage error", err, exitCode(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Request.Name != tt.want.Name || got.Request.User != tt.want.User ||
				got.Request.Unrestricted != tt.want.Unrestricted || !slices.Equal(got.Request.Permissions, tt.want.Permissions) {
				t.Fatalf("request = %+v, want %+v", got.Request, tt.want)
			}
		})
	}
}

func TestParseSettings(t *testing.T) {
	budget := money.Pounds(250)
	tests := []struct {
		args  []string
		check func(api.OrgPatch) bool
		usage bool
	}{
		{[]string{"require_e2e=true"}, func(p api.OrgPatch) bool { return p.RequireE2E == api.Some(true) && !p.Plan.Set }, false},
		{[]string{"content-filtering=off"}, func(p api.OrgPatch) bool { return p.ContentFiltering == api.Some(false) }, false},
		{[]string{"max_runtime=8h"}, func(p api.OrgPatch) bool { return *p.MaxRuntimeSeconds.Ptr() == 8*3600 }, false},
		{[]string{"max_runtime=90"}, func(p api.OrgPatch) bool { return *p.MaxRuntimeSeconds.Ptr() == 90 }, false},
		{[]string{"max_runtime=none"}, func(p api.OrgPatch) bool { return p.MaxRuntimeSeconds.Set && p.MaxRuntimeSeconds.Null }, false},
		{[]string{"monthly_budget_gbp=250"}, func(p api.OrgPatch) bool { return *p.MonthlyBudgetGBP.Ptr() == budget }, false},
		{[]string{"jurisdiction_floor=uk", "plan=pro"}, func(p api.OrgPatch) bool {
			return *p.JurisdictionFloor.Ptr() == "uk" && p.Plan == api.Some(api.PlanPro)
		}, false},
		{[]string{"requests_per_minute=1200"}, func(p api.OrgPatch) bool { return p.RequestsPerMinute == api.Some(1200) }, false},
		{[]string{"rpm=0"}, func(p api.OrgPatch) bool { return p.RequestsPerMinute == api.Some(0) }, false},
		{[]string{"requests_per_minute=unlimited"}, func(p api.OrgPatch) bool { return p.RequestsPerMinute == api.Some(0) }, false},
		{[]string{"requests_per_minute=default"}, func(p api.OrgPatch) bool { return p.RequestsPerMinute == api.Null[int]() }, false},
		{[]string{"requests_per_minute=none"}, nil, true},
		{[]string{"requests_per_minute=fast"}, nil, true},
		{[]string{"require_e2e"}, nil, true},
		{[]string{"require_e2e=maybe"}, nil, true},
		{[]string{"max_runtime=soon"}, nil, true},
		{[]string{"monthly_budget_gbp=1.001"}, nil, true},
		{[]string{"colour=blue"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			p, err := parseSettings(tt.args)
			if tt.usage {
				if exitCode(err) != exitUsage {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil || !tt.check(p) {
				t.Fatalf("parseSettings = %+v, %v", p, err)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("boom"), 1},
		{usageErrorf("bad flag"), 2},
		{fmt.Errorf("unknown command %q for %q", "x", "svc"), 2},
		{&client.Error{Status: http.StatusUnauthorized}, 4},
		{fmt.Errorf("list: %w", &client.Error{Status: http.StatusForbidden}), 4},
		{&client.Error{Status: http.StatusTooManyRequests}, 5},
		{&client.Error{Status: http.StatusServiceUnavailable}, 5},
		{&client.Error{Status: http.StatusNotFound}, 1},
		{&client.ConnectError{Target: "x", Err: errors.New("refused")}, 1},
		{fmt.Errorf("open the cluster's database: %w", fmt.Errorf("pgstore: %w: it is at version 9", pgstore.ErrSchemaTooNew)), 6},
		{fmt.Errorf("open: %w", fmt.Errorf("%w: schema 9", bolt.ErrSchemaTooNew)), 6},
		{fmt.Errorf("connect: %w", &worker.PermanentError{Reason: "gateway refused the worker: revoked"}), 8},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestServeFlagsEnvPrecedence(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want ServeOptions
	}{
		{"defaults", map[string]string{"HOME": "/home/u"}, nil,
			ServeOptions{Addr: "127.0.0.1:8080", DataDir: "/home/u/.local/share/svc", DrainTimeout: 30 * time.Second}},
		{"xdg", map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/xdg"}, nil,
			ServeOptions{Addr: "127.0.0.1:8080", DataDir: "/xdg/svc", DrainTimeout: 30 * time.Second}},
		{"env", map[string]string{"SVC_ADDR": ":9", "SVC_DATA": "/d", "SVC_DRAIN_TIMEOUT": "5s"}, nil,
			ServeOptions{Addr: ":9", DataDir: "/d", DrainTimeout: 5 * time.Second}},
		{"flag beats env", map[string]string{"SVC_ADDR": ":9", "SVC_DATA": "/d"}, []string{"--addr", ":10", "--data", "/f"},
			ServeOptions{Addr: ":10", DataDir: "/f", DrainTimeout: 30 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got ServeOptions
			cmd := NewCmdServe(testFactory(tt.env), func(_ context.Context, o *ServeOptions) error { got = *o; return nil })
			if err := run(cmd, tt.args...); err != nil {
				t.Fatal(err)
			}
			if got.Addr != tt.want.Addr || got.DataDir != tt.want.DataDir || got.DrainTimeout != tt.want.DrainTimeout {
				t.Fatalf("options = %+v, want %+v", got, tt.want)
			}
		})
	}
	cmd := NewCmdServe(testFactory(map[string]string{"SVC_DRAIN_TIMEOUT": "soon", "HOME": "/h"}), func(context.Context, *ServeOptions) error { return nil })
	if err := run(cmd); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "SVC_DRAIN_TIMEOUT") {
		t.Fatalf("bad env value: %v", err)
	}
}

// What cannot work whatever the host is a usage error before anything is
// written to the data directory: an address that is not host:port, and a
// cluster's setting without the cluster.
func TestServeUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--addr", "nonsense"}, "--addr must be HOST:PORT"},
		{nil, []string{"--addr", ":99999"}, "--addr's port"},
		{map[string]string{"SVC_ADDR": "127.0.0.1:"}, nil, "--addr must be HOST:PORT"},
		{nil, []string{"--advertise-url", "http://x:1"}, "--advertise-url is a setting of a cluster's replica"},
		{map[string]string{"SVC_ADVERTISE_URL": "bogus"}, nil, "--advertise-url is a setting"},
		{map[string]string{"SVC_STORE_PASSWORD_FILE": "bogus"}, nil, "--store-password-file is a setting"},
		{map[string]string{"SVC_LEASE_TTL": "5s"}, nil, "--lease-ttl is a setting"},
		{map[string]string{"SVC_REGION": "eu"}, nil, "--region is a setting"},
		// Rental settings that would empty the catalogue or fail at boot.
		{nil, []string{"--rental-margin", "-0.5"}, "--rental-margin must be 0 or more"},
		{nil, []string{"--rental-margin", "NaN"}, "--rental-margin must be 0 or more"},
		{nil, []string{"--rental-usd-gbp", "0"}, "--rental-usd-gbp must be above 0"},
		{nil, []string{"--rental-deadline", "-1s"}, "--rental-deadline must be above 0"},
		{nil, []string{"--local-capacity", "sim-zz=2"}, `--local-capacity: no local GPU "sim-zz" (sim-l4`},
		{nil, []string{"--local-capacity", "sim-l4=-1"}, "may not be negative"},
		{nil, []string{"--local-engine", "bogus"}, `--local-engine: unknown engine "bogus"`},
	} {
		env := map[string]string{"HOME": "/h"}
		maps.Copy(env, tc.env)
		ran := false
		cmd := NewCmdServe(testFactory(env), func(context.Context, *ServeOptions) error { ran = true; return nil })
		err := run(cmd, tc.args...)
		if ran || exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%v %v: %v (ran %v), want a usage error with %q", tc.env, tc.args, err, ran, tc.want)
		}
	}
}

func TestServeTakesANamedPort(t *testing.T) {
	ran := false
	cmd := NewCmdServe(testFactory(map[string]string{"HOME": "/h"}), func(context.Context, *ServeOptions) error { ran = true; return nil })
	if err := run(cmd, "--addr", "localhost:http"); err != nil || !ran {
		t.Fatalf("--addr localhost:http: %v", err)
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		format string
		tty    bool
		json   bool
		bad    bool
	}{
		{"auto", true, false, false},
		{"auto", false, true, false},
		{"text", false, false, false},
		{"json", true, true, false},
		{"yaml", false, false, true},
	}
	for _, tt := range tests {
		var b strings.Builder
		log, err := newLogger(&b, tt.tty, "info", tt.format)
		if tt.bad {
			if err == nil {
				t.Errorf("format %q accepted", tt.format)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hello")
		if isJSON := strings.HasPrefix(b.String(), "{"); isJSON != tt.json {
			t.Errorf("format %q tty %v: %q", tt.format, tt.tty, b.String())
		}
	}
	if _, err := newLogger(&strings.Builder{}, false, "loud", "auto"); err == nil {
		t.Error("bad level accepted")
	}
}

func TestVersion(t *testing.T) {
	f := testFactory(nil)
	root := NewCmdRoot(f)
	if err := run(root, "version"); err != nil {
		t.Fatal(err)
	}
	out := f.IO.Out.(fmt.Stringer).String()
	if out != "svc v1.2.3 (commit 0123456789ab, go1.26.0)\n" {
		t.Fatalf("version = %q", out)
	}
}

func TestBuildInfoFallback(t *testing.T) {
	b := buildinfo.Read("", "")
	if b.Version == "" || b.Commit == "" || !strings.HasPrefix(b.Go, "go") {
		t.Fatalf("fallback = %+v", b)
	}
	if b := buildinfo.Read("v9", "abc"); b.Version != "v9" || b.Commit != "abc" {
		t.Fatalf("ldflags values not kept: %+v", b)
	}
}

func TestAdminSocketPath(t *testing.T) {
	// Where the client dials shows in the error of a socket nobody serves.
	dialed := func(o *AdminOptions) string {
		t.Helper()
		c, err := o.Client()
		if err != nil {
			t.Fatal(err)
		}
		var ce *client.ConnectError
		if err := c.Do(context.Background(), http.MethodGet, "/x", nil, nil); !errors.As(err, &ce) {
			t.Fatalf("err = %v, want a connect error", err)
		}
		return strings.TrimPrefix(ce.Target, "the admin socket ")
	}
	o := &AdminOptions{getenv: func(k string) string { return map[string]string{"HOME": "/h"}[k] }}
	if got := dialed(o); got != "/h/.local/share/svc/admin.sock" {
		t.Fatalf("default socket %q", got)
	}
	o.DataDir = "rel"
	abs, _ := filepath.Abs("rel")
	if got := dialed(o); got != filepath.Join(abs, "admin.sock") {
		t.Fatalf("relative --data: socket %q", got)
	}
	o.Socket = "/run/svc.sock"
	if got := dialed(o); got != "/run/svc.sock" {
		t.Fatalf("--socket: socket %q", got)
	}
}

// Every command that groups others refuses an argument that names none
// of them, with exit status 2, rather than printing its help and
// succeeding: a mistyped `svc admin settings sett ...` changes nothing and
// must say so.
func TestGroupsRefuseUnknownSubcommands(t *testing.T) {
	var groups [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasParent() && c.HasSubCommands() {
			groups = append(groups, path)
		}
		for _, sub := range c.Commands() {
			if !sub.Hidden && sub.Name() != "help" {
				walk(sub, append(slices.Clone(path), sub.Name()))
			}
		}
	}
	walk(NewCmdRoot(testFactory(nil)), nil)
	if len(groups) < 10 {
		t.Fatalf("only %d groups found: %v", len(groups), groups)
	}
	for _, g := range groups {
		err := run(NewCmdRoot(testFactory(nil)), append(g, "sett")...)
		if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), `unknown command "sett"`) {
			t.Errorf("svc %s sett: %v (exit %d)", strings.Join(g, " "), err, exitCode(err))
		}
	}
}

// A negative amount read as flags says how to give it; other unknown
// flags are plain usage errors.
func TestFlagErrorNamesANegativeNumber(t *testing.T) {
	o := &AdminOptions{IO: testFactory(nil).IO}
	cmd := newCmdAdminCredit(o)
	cmd.SetFlagErrorFunc(flagError)
	err := run(cmd, "add", "-2.50")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "`credit add -- -2.50`") {
		t.Fatalf("negative amount: %v", err)
	}
	err = run(cmd, "add", "-x")
	if exitCode(err) != exitUsage || strings.Contains(err.Error(), " -- ") {
		t.Fatalf("unknown flag: %v", err)
	}
}
