package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/iostreams"
)

func TestTablePrinter(t *testing.T) {
	build := func(tty bool) (*tablePrinter, *strings.Builder) {
		ios, _, _, _ := iostreams.Test()
		ios.SetStdoutTTY(tty)
		var b strings.Builder
		ios.Out = &b
		tp := newTablePrinter(ios, "NAME", "NOTE", "WHEN")
		tp.width = 30
		tp.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
		tp.shrinkable("NOTE")
		tp.field("gpu-1")
		tp.field("a long note that does not fit", colorScheme{true}.red)
		tp.timeField(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
		tp.endRow()
		tp.row("箱", "", "")
		return tp, &b
	}
	tp, b := build(false)
	if err := tp.render(); err != nil {
		t.Fatal(err)
	}
	want := "NAME   NOTE                           WHEN\n" +
		"gpu-1  a long note that does not fit  2026-01-02T03:00:00Z\n" +
		"箱\n"
	if b.String() != want {
		t.Fatalf("pipe:\n%q\nwant\n%q", b.String(), want)
	}
	tp, b = build(true)
	if err := tp.render(); err != nil {
		t.Fatal(err)
	}
	// 30 cells: NOTE gives way, to 15.
	want = "\x1b[1mNAME\x1b[0m   \x1b[1mNOTE\x1b[0m             \x1b[1mWHEN\x1b[0m\n" +
		"gpu-1  \x1b[31ma long note th…\x1b[0m  4m ago\n" +
		"箱\n"
	if b.String() != want {
		t.Fatalf("terminal:\n%q\nwant\n%q", b.String(), want)
	}
}

// A terminal too narrow for a table: lists are summed up to their column,
// then optional columns go, as few as cutting needs, in their order.
func TestTableFit(t *testing.T) {
	models := []string{"sim-chat", "sim-reasoner", "guard-b:0.6b", "sim-embed"}
	tests := []struct {
		name  string
		tty   bool
		width int
		want  []string
	}{
		{"wide", true, 100, []string{
			"NAME   MODELS                                           STATE    STARTED",
			"box-1  sim-chat, sim-reasoner, guard-b:0.6b, sim-embed  running  4m ago"}},
		{"a summary", true, 60, []string{
			"NAME   MODELS                          STATE    STARTED",
			"box-1  sim-chat, sim-reasoner +2 more  running  4m ago"}},
		{"an optional column goes", true, 30, []string{
			"NAME   MODELS    STATE",
			"box-1  4 models  running"}},
		{"and another", true, 24, []string{
			"NAME   MODELS",
			"box-1  sim-chat +3 more"}},
		{"a pipe sums up long lists only", false, 30, []string{
			"NAME   MODELS                          STATE    STARTED",
			"box-1  sim-chat, sim-reasoner +2 more  running  2026-01-02T03:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			ios.SetStdoutTTY(tt.tty)
			var b strings.Builder
			ios.Out = &b
			tp := newTablePrinter(ios, "NAME", "MODELS", "STATE", "STARTED")
			tp.width = tt.width
			tp.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
			tp.shrinkable("MODELS")
			tp.optional("STARTED", "STATE")
			tp.field("box-1")
			tp.listField("models", models, 32)
			tp.field("running")
			tp.timeField(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
			if err := tp.render(); err != nil {
				t.Fatal(err)
			}
			if got := ansi.ReplaceAllString(strings.TrimSuffix(b.String(), "\n"), ""); got != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", got, strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		w    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a bit too long", 10, "a bit too…"},
		{"日本語のワーカー", 7, "日本語…"},
	} {
		if got := truncate(tt.in, tt.w); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.w, got, tt.want)
		}
	}
}

func TestFmtAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "just now", 0: "just now", 3 * time.Second: "3s ago", 125 * time.Second: "2m ago",
		5 * time.Hour: "5h ago", 47 * time.Hour: "47h ago", 72 * time.Hour: "3d ago",
	} {
		if got := fmtAge(d); got != want {
			t.Errorf("fmtAge(%v) = %q, want %q", d, got, want)
		}
	}
	for ms, want := range map[int64]string{0: "0ms", 999: "999ms", 1500: "1.5s", 98000: "1m38s"} {
		if got := fmtMs(ms); got != want {
			t.Errorf("fmtMs(%d) = %q, want %q", ms, got, want)
		}
	}
}
