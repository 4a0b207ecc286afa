package e2ee

import (
	"testing"
)

// BenchmarkRequest is a request's fixed cost: the client seals (X-Wing
// encapsulation, HPKE setup, AES-GCM) and the worker opens.
func BenchmarkRequest(b *testing.B) {
	kp, err := GenerateKeyPair()
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello there, how are you today?"}]}`)
	b.Run("seal", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := SealRequest(kp.Public(), "m", false, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	env, _, _ := SealRequest(kp.Public(), "m", false, body)
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			if _, err := OpenRequest(kp, env); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkChunk is what one streamed chunk costs: sealed on the worker,
// as the event payload the relay sends.
func BenchmarkChunk(b *testing.B) {
	kp, _ := GenerateKeyPair()
	env, _, _ := SealRequest(kp.Public(), "m", true, []byte(`{"model":"m","stream":true,"messages":[]}`))
	req, err := OpenRequest(kp, env)
	if err != nil {
		b.Fatal(err)
	}
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"}}]}`)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		_ = req.Sealer.EventData(chunk)
	}
}
