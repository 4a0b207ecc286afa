package sim

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain words.", `quote " and \ backslash`, "line\nbreak\ttab\r", "\x00\x1f", "<a>&b", "héllo wörld ✓", "\u2028\u2029", "bad \xff utf8"} {
		got := appendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, got, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = "bad \ufffd utf8"
		}
		if back != want {
			t.Fatalf("appendString(%q) decodes to %q", s, back)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\\", "\x7f\x80", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, got, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("appendString(%q) decodes to %q", s, back)
		}
		// encoding/json agrees on the decoded value.
		std, _ := json.Marshal(s)
		var stdBack string
		if err := json.Unmarshal(std, &stdBack); err != nil || stdBack != back {
			t.Fatalf("encoding/json decodes %q, appendString %q", stdBack, back)
		}
	})
}

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
