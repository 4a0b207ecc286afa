package chat

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
)

// BenchmarkParsePrepare is the gateway's work on a chat body before it is
// relayed: validation, then the body for the worker.
func BenchmarkParsePrepare(b *testing.B) {
	model := &api.Model{ContextWindow: 32768}
	for _, bc := range []struct{ name, body string }{
		{"short", `{"model":"sim-chat","messages":[{"role":"user","content":"hello\nsim: tokens=16"}]}`},
		{"conversation", `{"model":"qwen3-8b","temperature":0.7,"max_tokens":512,"stream":true,` +
			`"messages":[{"role":"system","content":"You are a helpful assistant."},` +
			`{"role":"user","content":"What is the capital of France?"},` +
			`{"role":"assistant","content":"Paris."},` +
			`{"role":"user","content":[{"type":"text","text":"And of Spain? Answer in one word."}]}]}`},
		// A conversation with its history: 20 KB, where what is done for
		// each byte outweighs what is done for each field.
		{"history", `{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."}` +
			strings.Repeat(`,{"role":"user","content":"The quick brown fox jumps over the lazy dog, 日本語. `+
				`The quick brown fox jumps over the lazy dog, \"quoted\".\n"},`+
				`{"role":"assistant","content":"The quick brown fox jumps over the lazy dog, once more. `+
				`The quick brown fox jumps over the lazy dog, and again."}`, 80) + `]}`},
	} {
		body := []byte(bc.body)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := Parse(body, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Prepare(model); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRuneCount counts a message's text, as the context window's
// estimate does for each message of a conversation, beside utf8.RuneCount.
func BenchmarkRuneCount(b *testing.B) {
	text := []byte("The quick brown fox jumps over the lazy dog, 日本語. The quick brown fox jumps over the lazy dog, and again.")
	for _, bc := range []struct {
		name  string
		count func([]byte) int
	}{{"utf8", utf8.RuneCount}, {"runeCount", runeCount}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if bc.count(text) != 105 {
					b.Fatal("miscounted")
				}
			}
		})
	}
}
