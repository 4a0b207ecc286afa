// Package peer is the link between the replicas of a cluster: each
// replica keeps one link session (internal/link: multiplexed,
// flow-controlled, resumable) to each peer it forwards requests to, and a
// forwarded request is one stream on it.
//
// The replica that forwards (the front) dials the one that serves (the
// home) and opens the streams; the home accepts them. Both prove, before
// any stream crosses, that they hold the cluster's secret: a front must not
// hand a client's key to an impostor, and a home must not run requests
// nobody vouched for. See docs/link.md, "Replica links".
package peer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// Path is where a replica accepts its peers' links, on its public port.
const Path = "/api/v1/peers/connect"

// Protocol is the version of the replicas' handshake.
const Protocol = 1

// nonceSize is the length of each side's challenge.
const nonceSize = 32

// Hello is the front's first message: who it is, whom it means to reach,
// its session, and its challenge to the home.
type Hello struct {
	Protocol  int    `json:"protocol"`
	From      string `json:"from"`
	To        string `json:"to"`
	SessionID string `json:"session_id"`
	Nonce     []byte `json:"nonce"`
}

// Challenge is the home's answer to a hello: its proof that it holds the
// secret, bound to the front's challenge, and its own challenge; or why
// it refuses.
type Challenge struct {
	Nonce []byte `json:"nonce,omitempty"`
	Proof []byte `json:"proof,omitempty"`
	Error string `json:"error,omitempty"`
}

// Proof is the front's answer to the home's challenge, with how far it
// has received each stream it holds, for a resume.
type Proof struct {
	Proof   []byte          `json:"proof"`
	Streams []api.StreamSeq `json:"streams,omitempty"`
}

// Welcome ends the handshake: whether the home resumed the front's
// session, and how far it has received each of its streams; or why it
// refuses.
type Welcome struct {
	Resumed bool            `json:"resumed,omitempty"`
	Streams []api.StreamSeq `json:"streams,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// Errors of the handshake.
var (
	// ErrProof means the other side does not hold the cluster's secret, or
	// answered a challenge other than this connection's.
	ErrProof = errors.New("peer: the other replica's proof does not match the cluster's secret")
	// ErrRefused means the home refused the front.
	ErrRefused = errors.New("peer: refused")
)

// proof is the MAC one side sends: over both replicas' ids, the session
// and both challenges, under a label naming the side, so that neither
// side's proof can be sent back as the other's, nor one connection's
// replayed on another (each side's challenge is fresh).
func proofMAC(secret []byte, side string, h *Hello, homeNonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, part := range [][]byte{[]byte("svc peer link " + side), []byte(h.From), []byte(h.To), []byte(h.SessionID), h.Nonce, homeNonce} {
		// Each part with its length: no two different lists of parts
		// are MACed as the same bytes.
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		m.Write(part)
	}
	return m.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, nonceSize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return b
}

// write sends one handshake message as a frame of type typ.
func write(conn link.Conn, typ link.Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return conn.WriteMessage(link.AppendFrame(nil, &link.Frame{Type: typ, Payload: b}))
}

// read receives one handshake message, which must be a frame of type typ.
func read(conn link.Conn, typ link.Type, v any) error {
	msg, err := conn.ReadMessage()
	if err != nil {
		return err
	}
	f, n, err := link.DecodeFrame(msg)
	if err != nil || n != len(msg) || f.Type != typ {
		return fmt.Errorf("%w: expected one %s frame", link.ErrInvalid, typ)
	}
	return json.Unmarshal(f.Payload, v)
}

// Dial is the front's side of the handshake on a fresh connection: it
// sends hello (its nonce is made here) and, once the home has proved it
// holds secret, the front's own proof and recv, how far the front has
// received each of its session's streams (called only then, so that it is
// read as late as possible). It returns the home's welcome.
func Dial(conn link.Conn, secret []byte, hello Hello, recv func() []api.StreamSeq) (Welcome, error) {
	hello.Protocol = Protocol
	hello.Nonce = nonce()
	if err := write(conn, link.TypeHello, hello); err != nil {
		return Welcome{}, fmt.Errorf("send hello: %w", err)
	}
	var ch Challenge
	if err := read(conn, link.TypeWelcome, &ch); err != nil {
		return Welcome{}, fmt.Errorf("read challenge: %w", err)
	}
	if ch.Error != "" {
		return Welcome{}, fmt.Errorf("%w: %s", ErrRefused, ch.Error)
	}
	if len(ch.Nonce) != nonceSize || !hmac.Equal(ch.Proof, proofMAC(secret, "home", &hello, ch.Nonce)) {
		return Welcome{}, ErrProof
	}
	if err := write(conn, link.TypeHello, Proof{Proof: proofMAC(secret, "front", &hello, ch.Nonce), Streams: recv()}); err != nil {
		return Welcome{}, fmt.Errorf("send proof: %w", err)
	}
	var w Welcome
	if err := read(conn, link.TypeWelcome, &w); err != nil {
		return Welcome{}, fmt.Errorf("read welcome: %w", err)
	}
	if w.Error != "" {
		return Welcome{}, fmt.Errorf("%w: %s", ErrRefused, w.Error)
	}
	return w, nil
}

// Accept is the home's side of the handshake, up to the welcome, which
// the caller sends (Welcome) once it has found or made the session: it
// reads the hello, proves the home holds secret, and checks the front's
// proof. me is the home's replica id, which the front must have meant.
func Accept(conn link.Conn, secret []byte, me string) (Hello, Proof, error) {
	var h Hello
	if err := read(conn, link.TypeHello, &h); err != nil {
		return h, Proof{}, fmt.Errorf("read hello: %w", err)
	}
	var refusal string
	switch {
	case h.Protocol != Protocol:
		refusal = fmt.Sprintf("replica link protocol %d is not supported; this replica speaks %d", h.Protocol, Protocol)
	case h.To != me:
		refusal = fmt.Sprintf("this is replica %s, not %s", me, h.To)
	case h.From == "" || h.From == me || h.SessionID == "" || len(h.Nonce) != nonceSize:
		refusal = "malformed hello"
	}
	if refusal != "" {
		_ = write(conn, link.TypeWelcome, Challenge{Error: refusal})
		return h, Proof{}, fmt.Errorf("%w: %s", ErrRefused, refusal)
	}
	mine := nonce()
	if err := write(conn, link.TypeWelcome, Challenge{Nonce: mine, Proof: proofMAC(secret, "home", &h, mine)}); err != nil {
		return h, Proof{}, fmt.Errorf("send challenge: %w", err)
	}
	var p Proof
	if err := read(conn, link.TypeHello, &p); err != nil {
		return h, Proof{}, fmt.Errorf("read proof: %w", err)
	}
	if !hmac.Equal(p.Proof, proofMAC(secret, "front", &h, mine)) {
		_ = write(conn, link.TypeWelcome, Welcome{Error: "the proof does not match the cluster's secret"})
		return h, Proof{}, ErrProof
	}
	return h, p, nil
}

// SendWelcome ends the home's handshake.
func SendWelcome(conn link.Conn, w Welcome) error { return write(conn, link.TypeWelcome, w) }
