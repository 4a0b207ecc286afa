package e2ee

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/svc-dev/svc/internal/sse"
)

// NewStreamReader reads a sealed SSE stream from r and yields the clear
// one: a "data: <plaintext>" event per chunk, ending with "data: [DONE]".
//
// Chunks are passed on as they open, so a consumer sees tokens as they
// arrive; only their completeness waits for the end. Anything that does
// not open in order fails the read, and a stream that ends before its
// final chunk fails with ErrTruncated, so a consumer that reads to the end
// (or to [DONE]) never takes a cut or altered reply for a whole one.
// Keep-alive comments and clear events without a chunk (the gateway's
// {"svc": ...}) are skipped. A clear error frame from the gateway is
// passed on, then the read fails: the gateway may end a stream, not
// extend it.
func (o *ResponseOpener) NewStreamReader(r io.Reader) io.Reader {
	return &streamReader{opener: o, src: sse.NewReader(r, maxStreamEvent)}
}

type streamReader struct {
	opener *ResponseOpener
	src    *sse.Reader
	c      *chunkCipher // nil until the header event
	next   uint64
	final  bool
	out    []byte // clear bytes not yet read
	err    error  // sticky
}

func (s *streamReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 && s.err == nil {
		s.err = s.step()
	}
	if len(s.out) > 0 {
		n := copy(p, s.out)
		s.out = s.out[n:]
		return n, nil
	}
	return 0, s.err
}

// streamEvent is any JSON event of a sealed stream; which fields are
// present says which kind it is.
type streamEvent struct {
	Version json.Number     `json:"svc_e2e"`
	Nonce   *string         `json:"response_nonce"`
	C       *string         `json:"c"`
	Final   bool            `json:"final"`
	Error   json.RawMessage `json:"error"`
}

// step handles one event, appending any clear output.
func (s *streamReader) step() error {
	ev, err := s.src.Next()
	if err == io.EOF {
		if s.final {
			return io.EOF
		}
		return fmt.Errorf("%w: the stream ended after %d chunks", ErrTruncated, s.next)
	}
	if err != nil {
		return fmt.Errorf("e2ee: reading stream: %w", err)
	}
	if s.final {
		// After the final chunk only the clear terminator, keep-alives and
		// gateway annotations may follow; a chunk is refused below.
		if string(ev.Data) == doneData {
			return nil
		}
	} else if string(ev.Data) == doneData {
		return fmt.Errorf("%w: [DONE] after %d chunks without a final chunk", ErrTruncated, s.next)
	}
	if ev.Type == "error" {
		return s.clearError(ev.Data)
	}
	var e streamEvent
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return replyError("the stream has an event that is neither sealed nor a known clear event")
	}
	switch {
	case e.C != nil:
		return s.chunk(*e.C, e.Final)
	case e.Version != "" || e.Nonce != nil:
		return s.header(e)
	case len(e.Error) > 0 && string(e.Error) != "null":
		return s.clearError(ev.Data)
	}
	return nil // clear annotation, e.g. {"svc": {...}}
}

func (s *streamReader) header(e streamEvent) error {
	if s.c != nil {
		return replyError("the stream has a second header")
	}
	if v, err := strconv.ParseUint(string(e.Version), 10, 8); err != nil || v != Version {
		return replyError("unsupported stream version")
	}
	if e.Nonce == nil {
		return replyError("the stream header has no response_nonce")
	}
	nonce, err := decode64(*e.Nonce)
	if err != nil || len(nonce) != nonceSize {
		return replyError("response_nonce is not %d bytes of standard base64", nonceSize)
	}
	if s.c, err = newChunkCipher(s.opener.secret, s.opener.enc, nonce); err != nil {
		return replyError("%v", err)
	}
	return nil
}

func (s *streamReader) chunk(b64 string, final bool) error {
	switch {
	case s.c == nil:
		return replyError("a chunk came before the stream header")
	case s.final:
		return replyError("a chunk came after the final chunk")
	}
	ct, err := decode64(b64)
	if err != nil {
		return replyError("chunk %d is not standard base64", s.next)
	}
	pt, err := s.c.open(s.next, final, ct)
	if err != nil {
		return replyError("chunk %d does not open", s.next)
	}
	s.next++
	if final {
		s.final = true
		if string(pt) != doneData && len(pt) > 0 {
			s.out = appendEvent(s.out, pt)
		}
		s.out = append(s.out, doneEvent...)
		return nil
	}
	s.out = appendEvent(s.out, pt)
	return nil
}

// clearError passes the gateway's clear error frame on, so an SSE client
// reports it as it would on a clear stream, and ends the read: the reply
// is incomplete. After the final chunk the reply is whole and the frame
// is ignored. Only the frame's error object goes on: the gateway may end
// a stream, and anything else in its frame (choices with text) would be
// read as the model's.
func (s *streamReader) clearError(data []byte) error {
	if s.final {
		return nil
	}
	s.out = appendEvent(s.out, errorFrame(data))
	msg := clearMessage(data)
	if msg == "" {
		return fmt.Errorf("%w: the stream failed after %d chunks", ErrTruncated, s.next)
	}
	return fmt.Errorf("%w: the stream failed after %d chunks: %s", ErrTruncated, s.next, msg)
}

// errorFrame is the event a clear error frame becomes: its error object
// alone, or one made from its message when it has none.
func errorFrame(data []byte) []byte {
	var b struct {
		Error json.RawMessage `json:"error"`
	}
	var obj bytes.Buffer
	if json.Unmarshal(data, &b) == nil && bytes.HasPrefix(bytes.TrimSpace(b.Error), []byte("{")) && json.Compact(&obj, b.Error) == nil {
		return append(append([]byte(`{"error":`), obj.Bytes()...), '}')
	}
	msg := clearMessage(data)
	if msg == "" {
		msg = "the stream failed"
	}
	out, _ := json.Marshal(map[string]map[string]string{"error": {"message": msg, "type": "server_error"}})
	return out
}

// appendEvent frames a clear payload as one event, a data line per line,
// so a payload with line breaks still arrives whole.
func appendEvent(dst, data []byte) []byte {
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		dst = append(append(append(dst, "data: "...), data[:i]...), '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(append(append(dst, "data: "...), data...), '\n')
	return append(dst, '\n')
}

// clearMessage finds the human message in a clear error body of any of
// the gateway's shapes (error.message, detail.error.message, detail,
// error), shortened and stripped of control characters for an error
// string. Clear error bodies come from the gateway, which sees only
// routing fields, so they hold nothing secret.
func clearMessage(body []byte) string {
	var b struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	var msg string
	for _, raw := range []json.RawMessage{b.Error, b.Detail} {
		if msg = messageOf(raw); msg != "" {
			break
		}
	}
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > 300 {
		msg = strings.ToValidUTF8(msg[:300], "") + "…"
	}
	return msg
}

func messageOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return ""
	}
	if o.Message != "" {
		return o.Message
	}
	if len(o.Error) > 0 {
		return messageOf(o.Error)
	}
	return ""
}
