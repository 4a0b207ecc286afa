// Package auth provides the credentials of svc (API keys and worker tokens),
// their hashing, and the permission checks made on every request.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// Kind tells an API key from a worker token by its prefix.
type Kind string

const (
	KindAPIKey      Kind = "svc_k_"
	KindWorkerToken Kind = "svc_w_"
)

const (
	idLen     = 12 // public part: names the credential in lists and logs
	secretLen = 40 // private part: about 238 bits of entropy
	alphabet  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// Hash is the SHA-256 of a whole credential. The credentials are long random
// strings, so a fast hash is enough; the point is that the store never holds
// anything that can be presented.
type Hash [sha256.Size]byte

// HashSecret hashes a presented credential.
func HashSecret(secret string) Hash { return sha256.Sum256([]byte(secret)) }

// Matches compares in constant time.
func (h Hash) Matches(secret string) bool {
	got := HashSecret(secret)
	return subtle.ConstantTimeCompare(h[:], got[:]) == 1
}

// Credential is a freshly generated secret. Secret is shown once and then
// only its Hash is kept.
type Credential struct {
	Kind   Kind
	ID     string // the public identifier
	Secret string
	Hash   Hash
}

// PrefixOf is the part of a credential shown for identification: its kind
// and id, never any of the secret.
func PrefixOf(kind Kind, id string) string { return string(kind) + id }

// NewCredential generates a credential of the given kind:
// <kind><12-char id>_<40-char secret>.
func NewCredential(kind Kind) Credential {
	id := randomString(idLen)
	secret := string(kind) + id + "_" + randomString(secretLen)
	return Credential{Kind: kind, ID: id, Secret: secret, Hash: HashSecret(secret)}
}

// Parse splits a presented credential into its kind and id. ok is false for
// anything not shaped like one of ours; the caller still compares the hash.
func Parse(secret string) (kind Kind, id string, ok bool) {
	for _, k := range []Kind{KindAPIKey, KindWorkerToken} {
		rest, found := strings.CutPrefix(secret, string(k))
		if !found {
			continue
		}
		if len(rest) != idLen+1+secretLen || rest[idLen] != '_' {
			return "", "", false
		}
		if !inAlphabet(rest[:idLen]) || !inAlphabet(rest[idLen+1:]) {
			return "", "", false
		}
		return k, rest[:idLen], true
	}
	return "", "", false
}

// Redact masks the secret part of every credential in s, keeping its kind
// and id: for text that may quote what a client sent, such as a parser's
// error message, before it is logged.
func Redact(s string) string {
	if !strings.Contains(s, "svc_") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "svc_")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i:]
		kind := Kind("")
		for _, k := range []Kind{KindAPIKey, KindWorkerToken} {
			if strings.HasPrefix(s, string(k)) {
				kind = k
			}
		}
		if kind == "" {
			b.WriteString("svc_")
			s = s[len("svc_"):]
			continue
		}
		// The id, then '_' and the secret: whatever of them is there.
		n := len(kind)
		for n < len(s) && n-len(kind) < idLen && strings.IndexByte(alphabet, s[n]) >= 0 {
			n++
		}
		b.WriteString(s[:n])
		s = s[n:]
		if rest, ok := strings.CutPrefix(s, "_"); ok {
			m := 0
			for m < len(rest) && strings.IndexByte(alphabet, rest[m]) >= 0 {
				m++
			}
			b.WriteString("_[redacted]")
			s = rest[m:]
		}
	}
}

func inAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(alphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}

// randomString draws n characters uniformly from alphabet.
func randomString(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		// crypto/rand.Read never fails on supported platforms.
		_, _ = rand.Read(buf)
		for _, b := range buf {
			// Rejection sampling keeps the draw uniform: 248 = 4*62.
			if b < 248 && len(out) < n {
				out = append(out, alphabet[b%62])
			}
		}
	}
	return string(out)
}

// MarshalText stores the hash as hex.
func (h Hash) MarshalText() ([]byte, error) {
	out := make([]byte, hex.EncodedLen(len(h)))
	hex.Encode(out, h[:])
	return out, nil
}

// UnmarshalText reads a hex hash.
func (h *Hash) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(h) {
		return fmt.Errorf("hash: want %d hex characters, got %d", 2*len(h), len(b))
	}
	_, err := hex.Decode(h[:], b)
	return err
}
