package openai

import (
	"context"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/sse"
)

type nopSink struct{}

func (nopSink) Event(context.Context, []byte) error { return nil }
func (nopSink) Body(context.Context, []byte) error  { return nil }

// BenchmarkStream reads and handles a stream of content chunks, the common
// case the fast path exists for, and one of reasoning chunks, which are
// rewritten.
func BenchmarkStream(b *testing.B) {
	for name, chunk := range map[string]string{"content": vllmContent1, "reasoning": vllmReasoning} {
		b.Run(name, func(b *testing.B) {
			in := strings.Repeat("data: "+chunk+"\n\n", 1000)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				s := &stream{sink: nopSink{}}
				rd := sse.NewReader(strings.NewReader(in), maxEvent)
				for {
					ev, err := rd.Next()
					if err != nil {
						break
					}
					if _, done := s.event(context.Background(), ev); done {
						b.Fatal("stream ended")
					}
				}
			}
		})
	}
}

// BenchmarkStreamBody prepares a typical streaming request for the engine.
func BenchmarkStreamBody(b *testing.B) {
	body := []byte(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"system","content":"` + strings.Repeat("You are a helpful assistant. ", 40) +
		`"},{"role":"user","content":"Write a haiku about the sea."}],"stream":true,"temperature":0.7,"max_tokens":256}`)
	for name, f := range map[string]func([]byte) ([]byte, error){"plain": streamBody, "decoded": streamBodyDecoded} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMapReasoning maps reasoning_effort onto vLLM's switch for a
// conversation of 24 KB, in place and by decoding the whole body.
func BenchmarkMapReasoning(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","reasoning_effort":"low","messages":[{"role":"system","content":"You are a helpful assistant."}`)
	for range 80 {
		sb.WriteString(`,{"role":"user","content":"The quick brown fox jumps over the lazy dog, 日本語. ` +
			`The quick brown fox jumps over the lazy dog, \"quoted\".\n"},{"role":"assistant","content":"The quick ` +
			`brown fox jumps over the lazy dog, once more. The quick brown fox jumps over the lazy dog, and again."}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	for name, f := range map[string]func([]byte, flavour) []byte{"in place": mapReasoning, "decoded": mapReasoningDecoded} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				f(body, flavourVLLM)
			}
		})
	}
}
