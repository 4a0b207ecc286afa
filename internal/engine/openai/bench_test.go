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
