package termsafe

import (
	"strings"
	"testing"

	"charm.land/lipgloss/v2"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "gpu-box-1", "gpu-box-1"},
		{"empty", "", ""},
		{"clear screen and colour", "a\x1b[2J\x1b[31mEVIL", `a\x1b[2J\x1b[31mEVIL`},
		{"window title", "\x1b]0;pwned\x07", `\x1b]0;pwned\a`},
		{"carriage return and backspace", "ok\r\b\bname", `ok\r\b\bname`},
		{"tab and newline", "a\tb\nc", `a\tb\nc`},
		{"NUL and other C0", "\x00\x01\x1f", `\x00\x01\x1f`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1 as UTF-8", "a\u009b31mb\u0085", `a\u009b31mb\u0085`},
		{"C1 as a lone byte", "a\x9b31m", `a\x9b31m`},
		{"invalid UTF-8", "\xff\xfe", `\xff\xfe`},
		{"cut short UTF-8", "é\xc3", `é\xc3`},
		{"bidi override", "invoice\u202efdp.exe", `invoice\u202efdp.exe`},
		{"bidi embeddings and isolates", "\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`},
		{"line separators", "a\u2028b\u2029", `a\u2028b\u2029`},
		{"backslash kept", `C:\models\x1b`, `C:\models\x1b`},
		{"CJK", "工作站-東京", "工作站-東京"},
		{"emoji with joiner and selector", "👩‍💻 ❤️ 🇬🇧", "👩‍💻 ❤️ 🇬🇧"},
		{"replacement character", "a\ufffdb", "a\ufffdb"},
		{"accents", "café naïve", "café naïve"},
		{"Arabic and Hebrew", "عامل שרת", "عامل שרת"},
		{"zero width space kept", "a\u200bb", "a\u200bb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Line(tc.in)
			if got != tc.want {
				t.Fatalf("Line(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if Line(got) != got {
				t.Errorf("Line is not idempotent on %q: %q", got, Line(got))
			}
			if got != tc.in {
				for _, r := range got {
					if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
						t.Errorf("Line(%q) kept control %U", tc.in, r)
					}
				}
			}
		})
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"lines and tabs kept", "Invalid request\n  name:\ttoo long", "Invalid request\n  name:\ttoo long"},
		{"carriage return", "fine\rEVIL", `fine\rEVIL`},
		{"escape sequence", "detail: \x1b[2K\x1b[1A", `detail: \x1b[2K\x1b[1A`},
		{"C1 and bidi", "\u009b2J \u202e", `\u009b2J \u202e`},
		{"vertical tab and form feed", "\v\f", `\v\f`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.in); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// A name that needs no escaping is shown, and measured, as it was.
func TestWidthKept(t *testing.T) {
	for _, s := range []string{"gpu-box-1", "工作站", "👩‍💻 dev", "qwen3-32b", "Ünïcödé"} {
		if got := Line(s); got != s || lipgloss.Width(got) != lipgloss.Width(s) {
			t.Errorf("Line(%q) = %q (width %d, was %d)", s, got, lipgloss.Width(got), lipgloss.Width(s))
		}
	}
	// Escaped, a hostile name is as wide as its escapes: nothing of it is
	// zero width or acts on the cursor, so columns after it stay aligned.
	got := Line("ansi\x1b[2J\x1b[31mEVIL\x1b]0;pwned\x07\r\b\bname")
	want := `ansi\x1b[2J\x1b[31mEVIL\x1b]0;pwned\a\r\b\bname`
	if got != want || lipgloss.Width(got) != len(want) {
		t.Errorf("got %q, width %d; want %q, width %d", got, lipgloss.Width(got), want, len(want))
	}
}

func TestNoCopyWhenSafe(t *testing.T) {
	s := strings.Repeat("gpu-box-1 工作站 ", 10)
	if n := testing.AllocsPerRun(100, func() { _ = Line(s) }); n != 0 {
		t.Errorf("Line allocates %v times on safe text", n)
	}
}
