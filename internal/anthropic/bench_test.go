package anthropic

import (
	"strings"
	"testing"
)

// BenchmarkToChat is the gateway's work on a Messages body before it is
// relayed as a chat: a conversation of 24 KB with its history, as agents
// send, whose text is read at each level that holds it.
func BenchmarkToChat(b *testing.B) {
	turn := `{"role":"user","content":"The quick brown fox jumps over the lazy dog, 日本語. The quick brown fox jumps over the lazy dog, \"quoted\".\n"},` +
		`{"role":"assistant","content":[{"type":"text","text":"The quick brown fox jumps over the lazy dog, once more. The quick brown fox jumps over the lazy dog, and again."}]},`
	body := []byte(`{"model":"m","max_tokens":256,"system":"You are a helpful assistant.","messages":[` +
		strings.Repeat(turn, 80) + `{"role":"user","content":"hello"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := ToChat(body, remoteOK); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChunk translates a content chunk, as most of a stream's are.
func BenchmarkChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" fox"},"logprobs":null,"finish_reason":null}]}`)
	for name, general := range map[string]bool{"plain": false, "general": true} {
		b.Run(name, func(b *testing.B) {
			s := NewStream("r1", "m", 0)
			out := s.Chunk(nil, data)
			b.ReportAllocs()
			for b.Loop() {
				if general {
					out = s.chunk(out[:0], data)
				} else {
					out = s.Chunk(out[:0], data)
				}
			}
		})
	}
}
