package completions

import (
	"strings"
	"testing"
)

// BenchmarkParseLongPrompt checks a request whose prompt is 24 KB of text
// with quotes and newlines, escaped, as a document to continue is.
func BenchmarkParseLongPrompt(b *testing.B) {
	body := []byte(`{"model":"m","max_tokens":16,"prompt":"` + strings.Repeat(`The quick brown fox jumps over the lazy dog, \"quoted\".\n`, 400) + `"}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}
