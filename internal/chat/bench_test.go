package chat

import (
	"fmt"
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

// BenchmarkParseManyToolResults parses a conversation of 20,000 tool calls
// and as many results, each matched against the calls before it: linear
// in their number, as a key holder may send tens of thousands.
func BenchmarkParseManyToolResults(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[`)
	const n = 20000
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}`, i)
	}
	sb.WriteString(`]}`)
	for i := range n {
		fmt.Fprintf(&sb, `,{"role":"tool","tool_call_id":"call_%d","content":"x"}`, n-1-i)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(body, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
