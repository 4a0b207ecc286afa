// Package e2ee seals inference requests to a worker's public key and the
// worker's replies back to the client, so that the gateway relaying them
// learns only the routing fields (envelope version, suite, key id, model,
// stream) and message sizes.
//
// A request is one HPKE (RFC 9180, base mode) message whose info string
// binds the clear routing fields; the reply is sealed chunk by chunk in the
// style of chunked OHTTP under a key exported from the request's HPKE
// context, with a "final" marker so truncation is detected. docs/e2e.md
// describes the wire format byte by byte and testdata/vectors.json holds
// test vectors for other implementations.
//
// Go applications import it as github.com/svc-dev/svc/e2ee: NewTransport
// under any HTTP client (the OpenAI Go SDK's, for one) makes its inference
// requests private. The worker opens them with OpenRequest, and the
// gateway checks the envelope with ParseEnvelope without opening it.
package e2ee

import (
	"crypto/hpke"
	"errors"
	"fmt"
)

// Version is the envelope version this package writes and accepts.
const Version = 1

// ContentType marks a sealed request or a sealed non-streaming reply.
const ContentType = "application/vnd.svc.e2e+json"

// Algorithm identifiers of the one suite version 1 supports. They travel
// in every envelope and published key, so a later version can change them
// without guessing.
const (
	KEMXWing      uint16 = 0x647a // MLKEM768-X25519 (X-Wing)
	KDFHKDFSHA256 uint16 = 0x0001
	AEADAES256GCM uint16 = 0x0002
)

// Limits. A sealed request must fit the gateway's 32 MB body limit; the
// reply limit leaves room for base64 around the relay's 64 MB answers.
const (
	MaxEnvelope = 32 << 20
	// MaxUpload is the gateway's limit on a whole transcription upload
	// (the 25 MB file and 1 MB of form), which holds for a sealed one's
	// envelope too.
	MaxUpload = 26 << 20
	MaxReply  = 96 << 20
	// MaxModel bounds the clear model name, which the gateway logs and
	// routes on.
	MaxModel = 256
	// maxStreamEvent bounds one sealed SSE event: base64 of the largest
	// clear event a stream may carry (16 MB) plus framing.
	maxStreamEvent = 24 << 20
)

// Labels and sizes fixed by version 1.
const (
	requestLabel  = "svc e2e v1 request"
	responseLabel = "svc e2e v1 response"
	finalAAD      = "final"
	seedSize      = 32 // X-Wing private key seed
	keyIDSize     = 8
	nonceSize     = 32 // response_nonce: max(Nk, Nn) of AES-256-GCM
	secretSize    = 32 // exported response secret: max(Nk, Nn)
	aeadKeySize   = 32
	aeadNonceSize = 12
	aeadTagSize   = 16
	// xwingEncSize is the encapsulated key: ML-KEM-768 ciphertext and
	// X25519 share.
	xwingEncSize = 1088 + 32
)

// Errors callers branch on. Messages wrapping them never quote a request
// body or sealed content (at most the gateway's own clear error message),
// so they can be returned to a client or logged as they are.
var (
	// ErrInvalidEnvelope: malformed request envelope, unsupported version
	// or suite, or a request that does not open. The gateway and worker
	// answer it with 400 invalid_encrypted_request.
	ErrInvalidEnvelope = errors.New("invalid encrypted request")
	// ErrUnknownKey: the request is sealed to a key the worker does not
	// hold; the gateway answers 503 no_private_inference_worker.
	ErrUnknownKey = errors.New("request sealed to an unknown key")
	// ErrInvalidReply: a reply that fails to open, is reordered or
	// modified, or is not sealed where it must be.
	ErrInvalidReply = errors.New("invalid encrypted reply")
	// ErrTruncated: a reply that ended before its final chunk.
	ErrTruncated = errors.New("encrypted reply ended before its final chunk")
	// ErrNoKey: the key directory lists no usable key for the model.
	ErrNoKey = errors.New("no private inference key for the model")
	// ErrClearOnly: the request is inference the gateway has no sealed
	// form of (text completions, the Responses and Messages APIs,
	// moderations, translations): through a Transport it would go in the
	// clear, so it is refused unless the Transport's AllowClear is set.
	ErrClearOnly = errors.New("inference with no private form")
)

// Suite names the HPKE algorithms of an envelope or a published key.
type Suite struct {
	KEM  uint16
	KDF  uint16
	AEAD uint16
}

// DefaultSuite is X-Wing, HKDF-SHA256, AES-256-GCM: the only suite of
// version 1.
func DefaultSuite() Suite {
	return Suite{KEM: KEMXWing, KDF: KDFHKDFSHA256, AEAD: AEADAES256GCM}
}

// algorithms returns the HPKE components of a supported suite. The
// response key schedule (SHA-256, AES-256-GCM) is tied to this suite, so
// accepting another one needs more than a new case here.
func (s Suite) algorithms() (hpke.KEM, hpke.KDF, hpke.AEAD, error) {
	if s != DefaultSuite() {
		return nil, nil, nil, fmt.Errorf("unsupported suite kem 0x%04x, kdf 0x%04x, aead 0x%04x", s.KEM, s.KDF, s.AEAD)
	}
	return hpke.MLKEM768X25519(), hpke.HKDFSHA256(), hpke.AES256GCM(), nil
}
