package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/svc-dev/svc/internal/harness"
)

// TestScripts runs the CLI scripts in testdata/script against the real
// binary: a background `svc serve` and `svc` client commands. $PORT is a
// free loopback port for a script's server, so its clients know the URL.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup:               setupPort,
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"waitfor": cmdWaitFor,
			"json":    cmdJSON,
			"jsonenv": cmdJSONEnv,
			"exits":   cmdExits,
			"retry":   cmdRetry,
		},
	})
}

// setupPort sets $PORT to a port that was free a moment ago. Another
// process could take it before the script's server does; that is rare, as
// the kernel does not hand a port it just gave out straight back, and the
// script would then fail loudly rather than pass wrongly.
func setupPort(env *testscript.Env) error {
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	env.Setenv("PORT", strconv.Itoa(port))
	return nil
}

// exits N PROG [ARGS...] runs PROG as exec does (stdout and stderr are
// kept for the next commands) and checks that it exits with status N.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not a status", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// retry PROG [ARGS...] runs PROG until it succeeds, for up to 15 s: for
// what becomes true soon (a worker connecting, usage rows committed).
func cmdRetry(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: retry PROG [ARGS...]")
	}
	var err error
	if !harness.Eventually(15*time.Second, func() bool {
		err = ts.Exec(args[0], args[1:]...)
		return err == nil
	}) {
		ts.Fatalf("%s still failing after 15s: %v", args[0], err)
	}
}

// waitfor FILE waits up to 15 s for FILE to exist (a server's socket).
func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfor FILE")
	}
	if !harness.Eventually(15*time.Second, func() bool {
		_, err := os.Stat(ts.MkAbs(args[0]))
		return err == nil
	}) {
		ts.Fatalf("%s did not appear within 15s", args[0])
	}
}

// json stdout|FILE PATH WANT checks one value of a JSON document. PATH is
// dotted with array indices (keys.0.name, or "." for the whole document);
// WANT is compared with the value's JSON text, strings unquoted, and
// "#N" checks the length of an array or object.
func cmdJSON(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: json stdout|FILE PATH WANT")
	}
	v := readJSON(ts, args[0], args[1])
	got := render(v)
	want := args[2]
	if n, ok := strings.CutPrefix(want, "#"); ok {
		got = "#" + strconv.Itoa(length(v))
		want = "#" + n
	}
	if (got == want) == neg {
		ts.Fatalf("%s = %s, want %s%s", args[1], got, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}

// jsonenv VAR stdout|FILE PATH sets VAR to one value of a JSON document.
func cmdJSONEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: jsonenv VAR stdout|FILE PATH")
	}
	ts.Setenv(args[0], render(readJSON(ts, args[1], args[2])))
}

func readJSON(ts *testscript.TestScript, file, path string) any {
	data := ts.ReadFile(file)
	var doc any
	if err := json.Unmarshal([]byte(data), &doc); err != nil {
		ts.Fatalf("not JSON: %v\n%s", err, data)
	}
	v, err := walk(doc, path)
	if err != nil {
		ts.Fatalf("%v\n%s", err, data)
	}
	return v
}

func walk(v any, path string) (any, error) {
	if path == "." {
		return v, nil
	}
	for _, p := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return nil, fmt.Errorf("no key %q", p)
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("no index %q in an array of %d", p, len(x))
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("cannot step into %T with %q", v, p)
		}
	}
	return v, nil
}

func render(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func length(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case map[string]any:
		return len(x)
	}
	return -1
}
