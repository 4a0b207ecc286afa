package e2ee

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
)

// responseSchedule derives the reply's AEAD key and base nonce the way
// chunked OHTTP does: a fresh random nonce from the worker makes every
// reply's key unique even if a request is replayed to the worker.
//
//	prk = HKDF-Extract(salt = enc || response_nonce, ikm = secret)
//	key = HKDF-Expand(prk, "key", 32)
//	iv  = HKDF-Expand(prk, "nonce", 12)
func responseSchedule(secret, enc, nonce []byte) (prk, key, iv []byte, err error) {
	salt := append(bytes.Clone(enc), nonce...)
	if prk, err = hkdf.Extract(sha256.New, secret, salt); err != nil {
		return nil, nil, nil, err
	}
	if key, err = hkdf.Expand(sha256.New, prk, "key", aeadKeySize); err != nil {
		return nil, nil, nil, err
	}
	if iv, err = hkdf.Expand(sha256.New, prk, "nonce", aeadNonceSize); err != nil {
		return nil, nil, nil, err
	}
	return prk, key, iv, nil
}

// chunkCipher seals or opens the chunks of one reply.
type chunkCipher struct {
	aead cipher.AEAD
	iv   []byte
}

func newChunkCipher(secret, enc, nonce []byte) (*chunkCipher, error) {
	if len(nonce) != nonceSize {
		return nil, fmt.Errorf("response nonce is %d bytes, want %d", len(nonce), nonceSize)
	}
	_, key, iv, err := responseSchedule(secret, enc, nonce)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &chunkCipher{aead: aead, iv: iv}, nil
}

// chunkNonce is iv XOR i, i a 96-bit big-endian integer. The counter is
// 64 bits, so the first four bytes of iv pass through unchanged.
func chunkNonce(iv []byte, i uint64) []byte {
	n := bytes.Clone(iv)
	var ctr [8]byte
	binary.BigEndian.PutUint64(ctr[:], i)
	for j, b := range ctr {
		n[aeadNonceSize-8+j] ^= b
	}
	return n
}

func chunkAAD(final bool) []byte {
	if final {
		return []byte(finalAAD)
	}
	return nil
}

func (c *chunkCipher) seal(i uint64, final bool, plaintext []byte) []byte {
	return c.aead.Seal(nil, chunkNonce(c.iv, i), plaintext, chunkAAD(final))
}

func (c *chunkCipher) open(i uint64, final bool, ciphertext []byte) ([]byte, error) {
	return c.aead.Open(nil, chunkNonce(c.iv, i), ciphertext, chunkAAD(final))
}

// ResponseSealer seals one reply on the worker. It keeps a chunk counter,
// so it is for one goroutine.
type ResponseSealer struct {
	c     *chunkCipher
	nonce []byte
	next  uint64
	done  bool
}

func newResponseSealer(secret, enc, nonce []byte) (*ResponseSealer, error) {
	c, err := newChunkCipher(secret, enc, nonce)
	if err != nil {
		return nil, fmt.Errorf("e2ee: reply key: %w", err)
	}
	return &ResponseSealer{c: c, nonce: bytes.Clone(nonce)}, nil
}

// Nonce returns the reply's response_nonce, which travels in the clear
// ahead of the chunks.
func (s *ResponseSealer) Nonce() []byte { return bytes.Clone(s.nonce) }

// SealChunk seals the next chunk that is not the last.
func (s *ResponseSealer) SealChunk(plaintext []byte) []byte { return s.seal(false, plaintext) }

// SealFinal seals the last chunk. Nothing may be sealed after it.
func (s *ResponseSealer) SealFinal(plaintext []byte) []byte { return s.seal(true, plaintext) }

func (s *ResponseSealer) seal(final bool, plaintext []byte) []byte {
	if s.done {
		// The client would refuse the chunk; failing here finds the bug
		// where it is.
		panic("e2ee: chunk sealed after the final chunk")
	}
	ct := s.c.seal(s.next, final, plaintext)
	s.next++
	s.done = final
	return ct
}

// wireReply is a sealed non-streaming reply. The gateway may add clear
// fields beside these (svc, naming the worker); openers ignore them.
type wireReply struct {
	Version json.Number `json:"svc_e2e"`
	Nonce   string      `json:"response_nonce"`
	Chunks  []string    `json:"chunks"`
}

// ReplyBody seals a whole clear reply body (an OpenAI JSON response or an
// error body) as a non-streaming reply, in one final chunk.
func (s *ResponseSealer) ReplyBody(plaintext []byte) []byte {
	ct := s.SealFinal(plaintext)
	b, _ := json.Marshal(struct {
		Version int      `json:"svc_e2e"`
		Nonce   string   `json:"response_nonce"`
		Chunks  []string `json:"chunks"`
	}{Version, encode64(s.nonce), []string{encode64(ct)}})
	return b
}

// The streamed reply is a sequence of SSE data payloads, which the relay
// frames as "data: <payload>\n\n" events and ends with a clear
// "data: [DONE]".

// StartData is the first payload of a sealed stream: the clear header
// carrying the response nonce.
func (s *ResponseSealer) StartData() []byte {
	b, _ := json.Marshal(struct {
		Version int    `json:"svc_e2e"`
		Nonce   string `json:"response_nonce"`
	}{Version, encode64(s.nonce)})
	return b
}

// EventData seals one clear SSE data payload (a chunk JSON or an error
// frame) as the next payload.
func (s *ResponseSealer) EventData(data []byte) []byte {
	b, _ := json.Marshal(struct {
		C string `json:"c"`
	}{encode64(s.SealChunk(data))})
	return b
}

// FinalData is the last sealed payload of a successful stream: the final
// chunk, sealing "[DONE]". Without it the client reports the stream as
// cut short.
func (s *ResponseSealer) FinalData() []byte {
	b, _ := json.Marshal(struct {
		C     string `json:"c"`
		Final bool   `json:"final"`
	}{encode64(s.SealFinal([]byte(doneData))), true})
	return b
}

const (
	doneData  = "[DONE]"
	doneEvent = "data: [DONE]\n\n"
)

// ResponseOpener opens the reply to one sealed request on the client.
type ResponseOpener struct {
	secret []byte
	enc    []byte
}

func replyError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidReply, fmt.Sprintf(format, args...))
}

// OpenBody opens a sealed non-streaming reply and returns the clear body:
// the chunks' plaintexts in order. It fails unless every chunk opens in
// its place and the last is the final one.
func (o *ResponseOpener) OpenBody(reply []byte) ([]byte, error) {
	var w wireReply
	if err := json.Unmarshal(reply, &w); err != nil {
		return nil, replyError("reply is not a JSON object of the expected shape")
	}
	if v, err := strconv.ParseUint(string(w.Version), 10, 8); err != nil || v != Version {
		return nil, replyError("unsupported reply version")
	}
	nonce, err := decode64(w.Nonce)
	if err != nil || len(nonce) != nonceSize {
		return nil, replyError("response_nonce is not %d bytes of standard base64", nonceSize)
	}
	if len(w.Chunks) == 0 {
		return nil, fmt.Errorf("%w: the reply has no chunks", ErrTruncated)
	}
	c, err := newChunkCipher(o.secret, o.enc, nonce)
	if err != nil {
		return nil, replyError("%v", err)
	}
	var body []byte
	for i, s := range w.Chunks {
		ct, err := decode64(s)
		if err != nil {
			return nil, replyError("chunk %d is not standard base64", i)
		}
		final := i == len(w.Chunks)-1
		pt, err := c.open(uint64(i), final, ct)
		if err != nil {
			if final {
				if _, err := c.open(uint64(i), false, ct); err == nil {
					return nil, fmt.Errorf("%w: the reply's chunks stop at %d", ErrTruncated, len(w.Chunks))
				}
				return nil, replyError("chunk %d does not open as the final chunk", i)
			}
			return nil, replyError("chunk %d does not open", i)
		}
		body = append(body, pt...)
	}
	return body, nil
}
