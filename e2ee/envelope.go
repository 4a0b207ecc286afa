package e2ee

import (
	"bytes"
	"crypto/hpke"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Envelope is what the gateway may read of a sealed request: the routing
// fields. The sealed body stays inside.
type Envelope struct {
	Version int
	Suite   Suite
	KeyID   string
	Model   string
	Stream  bool

	enc, ct []byte
}

// wireEnvelope is the JSON form. Numbers stay raw so a bad version is
// reported as such rather than as a JSON type error, and a number sent as
// a string is refused (json.Number would take "1").
type wireEnvelope struct {
	Version json.RawMessage `json:"svc_e2e"`
	KEM     json.RawMessage `json:"kem_id"`
	KDF     json.RawMessage `json:"kdf_id"`
	AEAD    json.RawMessage `json:"aead_id"`
	KeyID   *string         `json:"key_id"`
	Model   *string         `json:"model"`
	Stream  *bool           `json:"stream"`
	Enc     *string         `json:"enc"`
	CT      *string         `json:"ct"`
}

// ReplayKey identifies the sealed request whatever bytes carry it: the
// encapsulation, fresh randomness at every seal, to which the ciphertext
// is bound (a different one does not open). The envelope's JSON can be
// respelt (spacing, member order, members added) without changing it.
func (e Envelope) ReplayKey() [32]byte { return sha256.Sum256(e.enc) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidEnvelope, fmt.Sprintf(format, args...))
}

// ParseEnvelope reads and checks a sealed request's envelope without
// opening it: version, suite, key id form, model, base64 and sizes. Its
// errors wrap ErrInvalidEnvelope and quote no bytes of the body.
func ParseEnvelope(body []byte) (Envelope, error) {
	if len(body) > MaxEnvelope {
		return Envelope{}, invalid("envelope larger than %d bytes", MaxEnvelope)
	}
	var w wireEnvelope
	// The decoder's own messages can quote the body, so they are dropped.
	if err := json.Unmarshal(body, &w); err != nil {
		// Another version may shape its fields differently: say so rather
		// than call it malformed.
		var probe struct {
			Version json.RawMessage `json:"svc_e2e"`
		}
		if json.Unmarshal(body, &probe) == nil && len(probe.Version) > 0 && !isVersion(probe.Version) {
			return Envelope{}, errUnsupportedVersion()
		}
		return Envelope{}, invalid("envelope is not a JSON object of the expected shape")
	}
	if len(w.Version) == 0 || string(w.Version) == "null" {
		return Envelope{}, invalid("missing svc_e2e (envelope version)")
	}
	if !isVersion(w.Version) {
		return Envelope{}, errUnsupportedVersion()
	}
	e := Envelope{Version: Version}
	for _, f := range []struct {
		name string
		num  json.RawMessage
		dst  *uint16
	}{{"kem_id", w.KEM, &e.Suite.KEM}, {"kdf_id", w.KDF, &e.Suite.KDF}, {"aead_id", w.AEAD, &e.Suite.AEAD}} {
		if len(f.num) == 0 || string(f.num) == "null" {
			return Envelope{}, invalid("missing %s", f.name)
		}
		// A JSON number's digits alone: ParseUint takes no quotes, sign
		// or exponent.
		n, err := strconv.ParseUint(string(f.num), 10, 16)
		if err != nil {
			return Envelope{}, invalid("%s is not a 16-bit identifier", f.name)
		}
		*f.dst = uint16(n)
	}
	if _, _, _, err := e.Suite.algorithms(); err != nil {
		return Envelope{}, invalid("%v", err)
	}
	switch {
	case w.KeyID == nil:
		return Envelope{}, invalid("missing key_id")
	case !isKeyID(*w.KeyID):
		return Envelope{}, invalid("key_id is not %d lower-case hex digits", 2*keyIDSize)
	case w.Model == nil:
		return Envelope{}, invalid("missing model")
	case w.Stream == nil:
		return Envelope{}, invalid("missing stream")
	case w.Enc == nil:
		return Envelope{}, invalid("missing enc")
	case w.CT == nil:
		return Envelope{}, invalid("missing ct")
	}
	if err := checkModel(*w.Model); err != nil {
		return Envelope{}, invalid("%v", err)
	}
	e.KeyID, e.Model, e.Stream = *w.KeyID, *w.Model, *w.Stream
	var err error
	if e.enc, err = decode64(*w.Enc); err != nil || len(e.enc) != xwingEncSize {
		return Envelope{}, invalid("enc is not %d bytes of standard base64", xwingEncSize)
	}
	if e.ct, err = decode64(*w.CT); err != nil || len(e.ct) < aeadTagSize {
		return Envelope{}, invalid("ct is not standard base64 of at least %d bytes", aeadTagSize)
	}
	return e, nil
}

// isVersion reports a version field that is the JSON number of this
// version: a string of it is not.
func isVersion(raw json.RawMessage) bool {
	v, err := strconv.ParseUint(string(raw), 10, 8)
	return err == nil && v == Version
}

func errUnsupportedVersion() error {
	return invalid("unsupported envelope version; this service supports svc_e2e %d", Version)
}

func isKeyID(s string) bool {
	if len(s) != 2*keyIDSize {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkModel keeps the clear model name something the gateway can route
// on and log safely.
func checkModel(m string) error {
	if m == "" {
		return errors.New("model is empty")
	}
	if len(m) > MaxModel {
		return fmt.Errorf("model is longer than %d bytes", MaxModel)
	}
	if !utf8.ValidString(m) {
		return errors.New("model is not UTF-8")
	}
	for _, r := range m {
		if unicode.IsControl(r) {
			return errors.New("model contains control characters")
		}
	}
	return nil
}

// decode64 is strict standard base64: padding required, no line breaks, no
// stray bits, so each value has exactly one encoding.
func decode64(s string) ([]byte, error) {
	return base64.StdEncoding.Strict().DecodeString(s)
}

var encode64 = base64.StdEncoding.EncodeToString

// header is the canonical encoding of the clear fields that the HPKE info
// binds, so the gateway cannot change any routing field unnoticed:
//
//	version u8 | kem u16 | kdf u16 | aead u16 | key_id [8] | stream u8 |
//	model length u16 | model
//
// Integers are big-endian.
func (e Envelope) header() []byte {
	id, _ := hex.DecodeString(e.KeyID) // checked by ParseEnvelope or taken from a key
	b := make([]byte, 0, 1+6+keyIDSize+1+2+len(e.Model))
	b = append(b, byte(e.Version))
	b = binary.BigEndian.AppendUint16(b, e.Suite.KEM)
	b = binary.BigEndian.AppendUint16(b, e.Suite.KDF)
	b = binary.BigEndian.AppendUint16(b, e.Suite.AEAD)
	b = append(b, id...)
	stream := byte(0)
	if e.Stream {
		stream = 1
	}
	b = append(b, stream)
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.Model)))
	return append(b, e.Model...)
}

// info is the HPKE info string: label, a zero byte, the header.
func (e Envelope) info() []byte {
	return append(append([]byte(requestLabel), 0), e.header()...)
}

func (e Envelope) marshal() ([]byte, error) {
	return json.Marshal(struct {
		Version int    `json:"svc_e2e"`
		KEM     uint16 `json:"kem_id"`
		KDF     uint16 `json:"kdf_id"`
		AEAD    uint16 `json:"aead_id"`
		KeyID   string `json:"key_id"`
		Model   string `json:"model"`
		Stream  bool   `json:"stream"`
		Enc     string `json:"enc"`
		CT      string `json:"ct"`
	}{e.Version, e.Suite.KEM, e.Suite.KDF, e.Suite.AEAD, e.KeyID, e.Model, e.Stream, encode64(e.enc), encode64(e.ct)})
}

// SealRequest seals body, the clear JSON request, to the key pub. model
// and stream are sent in the clear for routing and must match the body's;
// the worker refuses a mismatch. The opener opens the reply.
func SealRequest(pub PublicKeyInfo, model string, stream bool, body []byte) (envelope []byte, opener *ResponseOpener, err error) {
	pk, err := pub.publicKey()
	if err != nil {
		return nil, nil, err
	}
	if err := checkModel(model); err != nil {
		return nil, nil, fmt.Errorf("e2ee: %w", err)
	}
	if err := checkBody(body, model, stream); err != nil {
		return nil, nil, fmt.Errorf("e2ee: %w", err)
	}
	e := Envelope{Version: Version, Suite: pub.Suite(), KeyID: pub.KeyID, Model: model, Stream: stream}
	_, kdf, aead, err := e.Suite.algorithms()
	if err != nil {
		return nil, nil, fmt.Errorf("e2ee: %w", err)
	}
	enc, sender, err := hpke.NewSender(pk, kdf, aead, e.info())
	if err != nil {
		return nil, nil, fmt.Errorf("e2ee: seal: %w", err)
	}
	if e.ct, err = sender.Seal(nil, body); err != nil {
		return nil, nil, fmt.Errorf("e2ee: seal: %w", err)
	}
	secret, err := sender.Export(responseLabel, secretSize)
	if err != nil {
		return nil, nil, fmt.Errorf("e2ee: seal: %w", err)
	}
	e.enc = enc
	out, err := e.marshal()
	if err != nil {
		return nil, nil, fmt.Errorf("e2ee: seal: %w", err)
	}
	if len(out) > MaxEnvelope {
		return nil, nil, fmt.Errorf("e2ee: sealed request is %d bytes, over the %d-byte limit", len(out), MaxEnvelope)
	}
	return out, &ResponseOpener{secret: secret, enc: enc}, nil
}

// Request is an opened request.
type Request struct {
	Envelope
	// Body is the clear request body.
	Body []byte
	// Sealer seals the reply; it is bound to this request.
	Sealer *ResponseSealer
}

// OpenRequest opens a sealed request addressed to kp. Errors wrap
// ErrUnknownKey when the request names another key and ErrInvalidEnvelope
// otherwise.
func OpenRequest(kp *KeyPair, envelope []byte) (*Request, error) {
	e, err := ParseEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	if e.KeyID != kp.id {
		return nil, fmt.Errorf("%w: sealed to key %s, this worker holds %s", ErrUnknownKey, e.KeyID, kp.id)
	}
	_, kdf, aead, err := e.Suite.algorithms()
	if err != nil {
		return nil, invalid("%v", err)
	}
	// One message for every failure to open: which step failed tells an
	// attacker nothing useful and the client nothing it can act on.
	r, err := hpke.NewRecipient(e.enc, kp.priv, kdf, aead, e.info())
	if err != nil {
		return nil, invalid("the request does not open with this worker's key")
	}
	body, err := r.Open(nil, e.ct)
	if err != nil {
		return nil, invalid("the request does not open with this worker's key")
	}
	if err := checkBody(body, e.Model, e.Stream); err != nil {
		return nil, invalid("%v", err)
	}
	secret, err := r.Export(responseLabel, secretSize)
	if err != nil {
		return nil, fmt.Errorf("e2ee: open: %w", err)
	}
	s, err := newResponseSealer(secret, e.enc, randomBytes(nonceSize))
	if err != nil {
		return nil, err
	}
	return &Request{Envelope: e, Body: body, Sealer: s}, nil
}

// checkBody holds a JSON object body to the clear routing fields. The
// gateway routes and bills on the clear model and relays by the clear
// stream flag, while the worker runs what the body says; without this a
// client could be billed for one model and served another.
//
// Bodies that are not JSON objects (none of the sealed endpoints takes
// one) are left to the endpoint's own parser.
func checkBody(body []byte, model string, stream bool) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil
	}
	got, err := routingFields(body)
	if err != nil {
		return err
	}
	if got.model != model {
		return errors.New("the request body's model differs from the envelope's")
	}
	if got.stream != stream {
		return errors.New("the request body's stream flag differs from the envelope's")
	}
	return nil
}

type bodyFields struct {
	model  string
	stream bool
	// upload marks a transcription, whose envelope the gateway holds to
	// its upload limit.
	upload bool
}

// routingFields reads model and stream from a JSON object body. It is
// stricter than encoding/json, which matches keys case-insensitively and
// keeps the last duplicate: a body with "model" twice, or with "Model",
// could mean one model to this check and another to an engine's parser,
// so such bodies are refused.
func routingFields(body []byte) (bodyFields, error) {
	var f bodyFields
	d := json.NewDecoder(bytes.NewReader(body))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return f, errors.New("the request body is not a JSON object")
	}
	seenModel, seenStream := false, false
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return f, errors.New("the request body is not valid JSON")
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := d.Decode(&val); err != nil {
			return f, errors.New("the request body is not valid JSON")
		}
		switch {
		case key == "model":
			if seenModel || json.Unmarshal(val, &f.model) != nil {
				return f, errors.New("the request body needs exactly one string model")
			}
			seenModel = true
		case key == "stream":
			var s *bool
			if seenStream || json.Unmarshal(val, &s) != nil {
				return f, errors.New("the request body needs at most one boolean stream")
			}
			f.stream = s != nil && *s
			seenStream = true
		case strings.EqualFold(key, "model") || strings.EqualFold(key, "stream"):
			return f, errors.New("the request body has a routing field in the wrong case")
		}
	}
	if _, err := d.Token(); err != nil {
		return f, errors.New("the request body is not valid JSON")
	}
	if _, err := d.Token(); err != io.EOF {
		return f, errors.New("the request body has data after its JSON object")
	}
	if !seenModel {
		return f, errors.New("the request body has no model")
	}
	return f, nil
}
