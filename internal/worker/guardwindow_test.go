package worker

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// covered reports whether parts, in order, read s whole, each starting
// no later than where the one before it ended. Its texts are made of
// numbered words, so that each part is found only where it was cut.
func covered(s string, parts []string) bool {
	at, from := 0, 0 // how far s has been read; where the last part began
	for _, p := range parts {
		i := strings.Index(s[from:], p)
		if i < 0 || from+i > at {
			return false
		}
		from += i
		at = max(at, from+len(p))
	}
	return at == len(s)
}

// numbered is n words, each of word and its number.
func numbered(word string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", word, i)
	}
	return b.String()
}

// coveredAll reports whether pieces read every one of texts whole.
func coveredAll(texts []string, pieces [][]string) bool {
	for _, t := range texts {
		var parts []string
		for _, p := range pieces {
			for _, part := range p {
				if strings.Contains(t, part) {
					parts = append(parts, part)
				}
			}
		}
		if !covered(t, parts) {
			return false
		}
	}
	return true
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		size int
	}{
		{"short", "hello", 10},
		{"exact", "0123456789", 10},
		{"long", numbered("word", 200), 64},
		{"multibyte", numbered("天気", 200), 40},
		{"emoji", numbered("😀", 200), 33},
		{"tiny size", "abcdefghijkl", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := cut(tc.s, tc.size)
			for _, p := range parts {
				if !utf8.ValidString(p) {
					t.Fatalf("part %q is cut within a rune", p)
				}
				if len(p) > tc.size && tc.size >= 8 {
					t.Fatalf("part of %d bytes, over %d", len(p), tc.size)
				}
			}
			if !covered(tc.s, parts) {
				t.Fatalf("parts %q do not read %q whole", parts, tc.s)
			}
			if len(parts) > 1 && tc.size >= 8 && !strings.Contains(parts[0], parts[1][:overlapOf(tc.size)/2]) {
				t.Fatalf("parts %q do not overlap", parts[:2])
			}
		})
	}
}

func TestPack(t *testing.T) {
	long := numbered("x", 50)
	for _, tc := range []struct {
		name   string
		texts  []string
		size   int
		pieces int
	}{
		{"none", nil, 100, 1},
		{"fits", []string{"a", "b", "c"}, 100, 1},
		{"two pieces", []string{numbered("a", 25), numbered("b", 25)}, 100, 2},
		{"long text cut", []string{"a", long, "b"}, 100, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pieces := pack(tc.texts, tc.size)
			if len(pieces) != tc.pieces {
				t.Fatalf("%d pieces, want %d: %q", len(pieces), tc.pieces, pieces)
			}
			for _, p := range pieces {
				if charsOf(p) > tc.size {
					t.Fatalf("piece of %d, over %d", charsOf(p), tc.size)
				}
			}
			if !coveredAll(tc.texts, pieces) {
				t.Fatalf("pieces %q do not read %q whole", pieces, tc.texts)
			}
		})
	}
}

func TestHalve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		texts []string
	}{
		{"one text", []string{numbered("w", 100)}},
		{"two texts", []string{"aaaa", "bbbb"}},
		{"first heavy", []string{numbered("a", 30), "b", "c"}},
		{"last heavy", []string{"a", "b", numbered("c", 30)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			halves := halve(tc.texts)
			if len(halves) < 2 {
				t.Fatalf("halves %q", halves)
			}
			for _, h := range halves {
				if len(h) == 0 || charsOf(h) >= charsOf(tc.texts) {
					t.Fatalf("half %q of %q", h, tc.texts)
				}
			}
			if !coveredAll(tc.texts, halves) {
				t.Fatalf("halves %q do not read %q whole", halves, tc.texts)
			}
		})
	}
}
