package sim

import (
	"testing"
	"unicode/utf8"
)

func TestSplitHelpers(t *testing.T) {
	for _, s := range []string{"", "one", `{"a": "b c", "n": 1}`, "  leading", "trailing  "} {
		if got := joinStrings(splitTokens(s)); got != s {
			t.Fatalf("splitTokens(%q) joins to %q", s, got)
		}
	}
	for _, s := range []string{"", "short", "a much longer string of arguments ✓✓✓✓ here"} {
		parts := splitBytes(s, 5)
		if joinStrings(parts) != s {
			t.Fatalf("splitBytes(%q) joins to %q", s, joinStrings(parts))
		}
		for _, p := range parts {
			if !utf8.ValidString(p) {
				t.Fatalf("splitBytes(%q) split a rune: %q", s, p)
			}
		}
	}
}

func joinStrings(ss []string) string {
	out := ""
	for _, s := range ss {
		out += s
	}
	return out
}
