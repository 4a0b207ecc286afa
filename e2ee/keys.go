package e2ee

import (
	"bytes"
	"crypto/hpke"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
)

// KeyPair is a worker's long-term key.
type KeyPair struct {
	priv hpke.PrivateKey
	pub  []byte
	id   string
}

// GenerateKeyPair makes a fresh key.
func GenerateKeyPair() (*KeyPair, error) {
	return NewKeyPair(randomBytes(seedSize))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails since Go 1.24
	return b
}

// NewKeyPair rebuilds a key from its 32-byte seed (the X-Wing private key
// encoding), so the same seed always gives the same key.
func NewKeyPair(seed []byte) (*KeyPair, error) {
	if len(seed) != seedSize {
		return nil, fmt.Errorf("e2ee: key seed is %d bytes, want %d", len(seed), seedSize)
	}
	kem, _, _, err := DefaultSuite().algorithms()
	if err != nil {
		return nil, err
	}
	priv, err := kem.NewPrivateKey(seed)
	if err != nil {
		return nil, fmt.Errorf("e2ee: key seed: %w", err)
	}
	pub := priv.PublicKey().Bytes()
	return &KeyPair{priv: priv, pub: pub, id: KeyID(pub)}, nil
}

// LoadOrCreateKeyPair reads the key seed at path, creating the file with a
// new key when there is none. A file others could read is refused rather
// than used: its key may already be known to them.
func LoadOrCreateKeyPair(path string) (*KeyPair, error) {
	seed, err := readSeed(path)
	if errors.Is(err, fs.ErrNotExist) {
		seed = randomBytes(seedSize)
		err = writeSeed(path, seed, os.Link)
		if errors.Is(err, fs.ErrExist) {
			// Another process created it first: use theirs, so both agree.
			seed, err = readSeed(path)
		}
	}
	if err != nil {
		return nil, err
	}
	return NewKeyPair(seed)
}

func readSeed(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("e2ee: key file: %w", err)
	}
	defer f.Close()
	// Stat the open file, not the path, so the mode checked is the mode of
	// the bytes read.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("e2ee: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("e2ee: key file %s is not a regular file", path)
	}
	// Windows reports no group or other bits; its ACLs are not checked.
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		return nil, fmt.Errorf("e2ee: key file %s has mode %04o; it must be readable by its owner only (chmod 600)", path, perm)
	}
	seed, err := io.ReadAll(io.LimitReader(f, seedSize+1))
	if err != nil {
		return nil, fmt.Errorf("e2ee: key file: %w", err)
	}
	if len(seed) != seedSize {
		return nil, fmt.Errorf("e2ee: key file %s is not a %d-byte key seed", path, seedSize)
	}
	return seed, nil
}

// writeSeed writes the seed to a temporary file and links it into place
// (link is os.Link but for tests), so no reader ever sees a partly written
// key and an existing key is never replaced.
func writeSeed(path string, seed []byte, link func(oldname, newname string) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("e2ee: key file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".e2e-key-*") // mode 0600
	if err != nil {
		return fmt.Errorf("e2ee: key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := writeClose(tmp, seed); err != nil {
		return fmt.Errorf("e2ee: key file: %w", err)
	}
	err = link(tmp.Name(), path)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	// A filesystem without hard links: create the file exclusively, which
	// still never replaces a key, at the cost of a short window in which a
	// concurrent reader may find it empty and fail.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("e2ee: key file: %w", err)
	}
	if err := writeClose(f, seed); err != nil {
		os.Remove(path)
		return fmt.Errorf("e2ee: key file: %w", err)
	}
	return nil
}

// writeClose writes b to f, syncs and closes it: the key is on disk
// before anything names it.
func writeClose(f *os.File, b []byte) error {
	_, err := f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// KeyID names a key in envelopes and the key directory: the first 8 bytes
// of SHA-256 of the serialized public key, in lower-case hex. It is a
// routing label, not an identity check; see Fingerprint.
func KeyID(pub []byte) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:keyIDSize])
}

// Fingerprint is the whole SHA-256 of the serialized public key in
// lower-case hex. Pin keys by fingerprint, not by key id: 64 bits are
// cheap enough to collide for someone able to publish keys.
func Fingerprint(pub []byte) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// KeyID returns the key's id.
func (k *KeyPair) KeyID() string { return k.id }

// Public returns the key as the key directory publishes it; the gateway
// fills in the worker and its models.
func (k *KeyPair) Public() PublicKeyInfo {
	s := DefaultSuite()
	return PublicKeyInfo{
		KeyID:     k.id,
		Version:   Version,
		KEMID:     s.KEM,
		KDFID:     s.KDF,
		AEADID:    s.AEAD,
		PublicKey: bytes.Clone(k.pub),
	}
}

// PublicKeyInfo is one entry of the key directory,
// GET /api/v1/e2e/keys → {"keys": [PublicKeyInfo...]}.
type PublicKeyInfo struct {
	KeyID     string `json:"key_id"`
	Version   int    `json:"version"`
	KEMID     uint16 `json:"kem_id"`
	KDFID     uint16 `json:"kdf_id"`
	AEADID    uint16 `json:"aead_id"`
	PublicKey []byte `json:"public_key"` // standard base64 in JSON
	// Filled by the gateway: the worker holding the key and the models it
	// serves privately.
	WorkerID   string   `json:"worker_id,omitempty"`
	WorkerName string   `json:"worker_name,omitempty"`
	Models     []string `json:"models,omitempty"`
}

// Suite returns the key's algorithms.
func (p PublicKeyInfo) Suite() Suite {
	return Suite{KEM: p.KEMID, KDF: p.KDFID, AEAD: p.AEADID}
}

// Serves reports whether the key's worker serves model.
func (p PublicKeyInfo) Serves(model string) bool {
	return slices.Contains(p.Models, model)
}

// publicKey checks the entry and returns its key. The key id is
// recomputed, so a directory entry cannot name one key and carry another.
func (p PublicKeyInfo) publicKey() (hpke.PublicKey, error) {
	if p.Version != Version {
		return nil, fmt.Errorf("e2ee: key %s: unsupported version %d", p.KeyID, p.Version)
	}
	kem, _, _, err := p.Suite().algorithms()
	if err != nil {
		return nil, fmt.Errorf("e2ee: key %s: %w", p.KeyID, err)
	}
	if KeyID(p.PublicKey) != p.KeyID {
		return nil, fmt.Errorf("e2ee: key %s: key id does not match the public key", p.KeyID)
	}
	pk, err := kem.NewPublicKey(p.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("e2ee: key %s: %w", p.KeyID, err)
	}
	return pk, nil
}
