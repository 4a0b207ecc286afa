package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
)

// hostile is what a worker may call itself to take over the terminal of
// whoever lists it: clear the screen, turn the rest red, set the window's
// title and ring, then go back over the line and write over it; with a C1
// CSI and a right-to-left override besides.
const hostile = "ansi\x1b[2J\x1b[31mEVIL\x1b]0;pwned\x07\r\b\bname\u009b2J\u202eevil"

// hostileShown is hostile as the tables show it.
const hostileShown = `ansi\x1b[2J\x1b[31mEVIL\x1b]0;pwned\a\r\b\bname\u009b2J\u202eevil`

// terminalControls lists what in out, less the colours the CLI writes
// itself, a terminal would act on: a C0 control other than the newline,
// DEL, a C1 control (or a lone byte that would be one), a bidirectional
// override or isolate.
func terminalControls(out string) []string {
	var found []string
	s := ansi.ReplaceAllString(out, "")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			found = append(found, fmt.Sprintf("byte %#x", s[i]))
		case r == '\n':
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			found = append(found, fmt.Sprintf("%U", r))
		}
		i += n
	}
	return found
}

// requireInert fails when out holds anything of hostile's a terminal would
// act on; the colours the CLI writes itself are fine.
func requireInert(t *testing.T, what, out string) {
	t.Helper()
	if c := terminalControls(out); len(c) > 0 {
		t.Errorf("%s passes %q to the terminal:\n%s", what, c, out)
	}
	// The payload's own SGR is no colour of the CLI's, yet the pattern
	// above would take it for one.
	lacks(t, what, out, "\x1b[31mEVIL", "\x1b[2J", "\x1b]0;")
}

func hostileGateway(t *testing.T) *fakeGateway {
	t.Helper()
	detail, actor := "engine said \x1b[1A\x1b[2Kall good\r\nnext line\tand tab", "op\x1b[8m"
	driver := "550\x1b]52;c;cGF5bG9hZA==\x07"
	workers, _ := json.Marshal(map[string][]api.Worker{"workers": {{
		WorkerID: "wk_0000000000000001", WorkerName: hostile, Status: api.StatusHealthy, Version: "v1.3.0+\x1b[5m",
		Models: []api.Model{
			{ID: "qwen\x1b[8m-hidden", Capabilities: []string{"chat\x07"}, Engine: "openai\r"},
			{ID: "模型-東京", Capabilities: []string{"chat"}, Engine: "openai"},
		},
		ActiveTasks: 1, MaxConcurrent: 4, LastSeenSecondsAgo: 3,
		Engines:       []api.EngineInfo{{Kind: "openai\x1b[0m", URL: "http://127.0.0.1:8000/\x1b]8;;http://evil/\x07x"}},
		GPUs:          []api.GPU{{Index: 0, Name: "H200\x1b[2J\u202e", MemoryTotalMiB: 143771}},
		DriverVersion: &driver,
	}, {
		WorkerID: "wk_0000000000000002", WorkerName: "gpu-box-2", Status: api.StatusHealthy, Version: "v1.3.0",
		Models: []api.Model{{ID: "bge-m3", Capabilities: []string{"embeddings"}, Engine: "openai"}},
	}}})
	events, _ := json.Marshal([]api.WorkerEvent{{
		ID: "ev1", WorkerID: "wk_0000000000000001", WorkerName: hostile, EventType: "connected\x1b[31m",
		Detail: &detail, Actor: &actor, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Metadata: map[string]any{"version": "\x1b[2J"},
	}})
	return newFakeGateway(t, map[string]fakeReply{
		"GET /api/v1/workers":                {body: string(workers)},
		"GET /api/v1/workers/latest-version": {body: `{"version": "v1.4.0+\u001b[2J"}`},
		"GET /api/v1/workers/events":         {body: string(events)},
		"GET /api/v1/usage/summary": {status: http.StatusBadRequest,
			body: `{"detail": "days out of range\u001b[2J\u001b]0;pwned\u0007\r\u009b31mEVIL\u202e"}`},
	})
}

// A worker's name, version, models, engines and GPUs, and its events,
// reach the terminal escaped, on a terminal and off one, and the table
// stays a table.
func TestHostileWorkerText(t *testing.T) {
	g := hostileGateway(t)
	for _, tty := range []bool{false, true} {
		for _, args := range [][]string{{"workers"}, {"workers", "events"}, {"workers", "show", "wk_0000000000000001"}} {
			name := strings.Join(args, " ")
			if tty {
				name += " on a terminal"
			}
			t.Run(name, func(t *testing.T) {
				r := cliRun{env: gatewayEnv(g), tty: tty}.run(t, args...)
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				requireInert(t, "stdout", r.stdout)
				if !tty && strings.Contains(r.stdout, "\x1b") {
					t.Errorf("ESC off a terminal:\n%s", r.stdout)
				}
				if tty {
					for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
						if w := lipgloss.Width(ansi.ReplaceAllString(line, "")); w > defaultWidth {
							t.Errorf("line of %d cells wider than the terminal:\n%s", w, line)
						}
					}
				}
			})
		}
	}

	r := cliRun{env: gatewayEnv(g)}.run(t, "workers")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows, got:\n%s", r.stdout)
	}
	contains(t, "workers", lines[1], hostileShown, `v1.3.0+\x1b[5m (latest v1.4.0+\x1b[2J)`, `qwen\x1b[8m-hidden, 模型-東京`)
	// Escaped before it is measured: the columns line up after the name.
	col := strings.Index(lines[0], "STATUS")
	if got := strings.Index(lines[1], "healthy"); got != col {
		t.Errorf("STATUS at %d, the row's status at %d:\n%s", col, got, r.stdout)
	}
	if got := strings.Index(lines[2], "healthy"); got != col {
		t.Errorf("STATUS at %d, the next row's status at %d:\n%s", col, got, r.stdout)
	}

	r = cliRun{env: gatewayEnv(g)}.run(t, "workers", "events")
	contains(t, "events", r.stdout, hostileShown, `connected\x1b[31m`,
		`engine said \x1b[1A\x1b[2Kall good\r\nnext line\tand tab (by op\x1b[8m)`)
	if n := strings.Count(strings.TrimRight(r.stdout, "\n"), "\n"); n != 1 {
		t.Errorf("the event's newline broke its row:\n%s", r.stdout)
	}

	r = cliRun{env: gatewayEnv(g)}.run(t, "workers", "show", "wk_0000000000000001")
	for _, re := range []string{
		`(?m)^Name\s+` + regexp.QuoteMeta(hostileShown) + `$`,
		`(?m)^Engines\s+` + regexp.QuoteMeta(`openai\x1b[0m http://127.0.0.1:8000/\x1b]8;;http://evil/\ax`) + `$`,
		`(?m)^GPUs\s+` + regexp.QuoteMeta(`0: H200\x1b[2J\u202e (0.0 of 140.4 GiB used)`) + `$`,
		`(?m)^Driver\s+` + regexp.QuoteMeta(`550\x1b]52;c;cGF5bG9hZA==\a`) + `$`,
		`(?m)^` + regexp.QuoteMeta(`qwen\x1b[8m-hidden`) + `\s+` + regexp.QuoteMeta(`chat\a`) + `\s+-\s+` + regexp.QuoteMeta(`openai\r`) + `\s`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("show lacks %s:\n%s", re, r.stdout)
		}
	}
}

// The colours of 'svc workers show' are still the CLI's own.
func TestHostileWorkerShowColours(t *testing.T) {
	r := cliRun{env: gatewayEnv(hostileGateway(t)), tty: true}.run(t, "workers", "show", "wk_0000000000000001")
	contains(t, "show", r.stdout, "\x1b[32mhealthy\x1b[0m", "\x1b[33m"+`v1.3.0+\x1b[5m (latest v1.4.0+\x1b[2J)`+"\x1b[0m")
}

// An error's detail is the server's text: escaped on stderr, as a table's.
func TestHostileErrorDetail(t *testing.T) {
	r := cliRun{env: gatewayEnv(hostileGateway(t))}.run(t, "usage", "summary")
	if r.code == 0 {
		t.Fatalf("exit 0: %s", r.stdout)
	}
	requireInert(t, "stderr", r.stderr)
	if strings.Contains(r.stderr, "\x1b") {
		t.Errorf("ESC on stderr:\n%s", r.stderr)
	}
	contains(t, "stderr", r.stderr, `days out of range\x1b[2J\x1b]0;pwned\a\r\u009b31mEVIL\u202e`, "Request id: rid-")
}

// --json is the API's document, as it was: JSON escapes the C0 controls
// itself, and a script gets the worker's name back byte for byte.
func TestHostileJSONUnchanged(t *testing.T) {
	r := cliRun{env: gatewayEnv(hostileGateway(t)), tty: true}.run(t, "workers", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, b := range []byte(r.stdout) {
		if b < 0x20 && b != '\n' {
			t.Fatalf("--json has byte %#x:\n%s", b, r.stdout)
		}
	}
	contains(t, "--json", r.stdout, `ansi\u001b[2J\u001b[31mEVIL\u001b]0;pwned\u0007\r\b\bname`)
	var doc struct{ Workers []api.Worker }
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Workers) == 0 || doc.Workers[0].WorkerName != hostile {
		t.Errorf("--json does not give the name back (%v): %+v", err, doc.Workers)
	}
}

// printf escapes what it quotes, of any string type or an error, and
// leaves its format and its numbers alone.
func TestPrintfEscapesArguments(t *testing.T) {
	var b strings.Builder
	type plan string
	_, err := printf(&b, "%s on %s (%v), %d of %.1f\n\tdone\n", "gpu\x1b[2J", plan("pro\r"), errors.New("bad\x07"), 3, 1.5)
	if err != nil {
		t.Fatal(err)
	}
	if want := "gpu\\x1b[2J on pro\\r (bad\\a), 3 of 1.5\n\tdone\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// Labelled values are escaped before they are coloured: the colour is the
// CLI's, the escapes in the value are not.
func TestStyledFields(t *testing.T) {
	var b strings.Builder
	cs := colorScheme{true}
	if err := styledFields(&b, map[string]func(string) string{"Status": cs.red},
		[2]string{"Name", "a\tb\x1b[31m"}, [2]string{"Status", "down\x1b[0m"}); err != nil {
		t.Fatal(err)
	}
	want := "Name    a\\tb\\x1b[31m\nStatus  \x1b[31mdown\\x1b[0m\x1b[0m\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
