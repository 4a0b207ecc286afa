package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/jsontext"
	"github.com/svc-dev/svc/internal/sse"
)

const chatPath = "/v1/chat/completions"

// After [DONE] the rest of the body (normally just the end of the chunked
// encoding) is read so the connection can be reused, but not for longer
// than this: a server that keeps the stream open costs a connection, not
// the request's latency.
const (
	drainWait = 50 * time.Millisecond
	drainMax  = 64 << 10
)

var errNoDone = errors.New("stream ended before [DONE]")

// stream is one streaming chat or text completion request in flight.
type stream struct {
	sink      engine.Sink
	st        stats
	forwarded bool // a chunk reached the sink: failures can no longer be retried
	finished  bool // a finish_reason was seen
	// held are the chunks with nothing in them (the role, an empty
	// content) that came before the first with output: sent with it, so
	// that an engine failing after them is still retried elsewhere.
	held [][]byte
	// text marks a text completion's stream, whose chunks carry their
	// output in choices[].text.
	text bool
}

func (e *Engine) streamChat(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	body, err := streamBody(mapReasoning(req.Body, e.detected()))
	if err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	return e.relayStream(ctx, chatPath, body, &stream{sink: sink, st: stats{start: time.Now()}})
}

// relayStream posts a streaming request's body to path and passes its
// chunks on to s's sink, normalised.
func (e *Engine) relayStream(ctx context.Context, path string, body []byte, s *stream) *api.Result {
	// The adapter's own cancel lets it end the exchange after [DONE]
	// without waiting on the server (see drain).
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, res := e.post(reqCtx, path, body, "text/event-stream")
	if res != nil {
		return res
	}
	defer resp.Close()
	if isJSON(resp.contentType()) {
		return s.whole(ctx, e, resp)
	}
	rd := sse.NewReader(resp, maxEvent)
	for {
		ev, err := rd.Next()
		if err != nil {
			return s.ended(ctx, err)
		}
		res, done := s.event(ctx, ev)
		if done {
			if res.Status == http.StatusOK {
				drain(resp, cancel)
			}
			return res
		}
	}
}

// streamBody forces streaming with usage on the client's request, keeping
// everything else, other stream_options included: usage is how the worker
// accounts, and the gateway writes the client's usage chunk itself.
func streamBody(body []byte) ([]byte, error) {
	if out, ok := streamBodyPlain(body); ok {
		return out, nil
	}
	return streamBodyDecoded(body)
}

// streamBodyDecoded is streamBody for any body: its top level and
// stream_options are decoded into maps, edited and encoded again.
func streamBodyDecoded(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := m["stream_options"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			opts = map[string]json.RawMessage{}
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	m["stream"] = json.RawMessage("true")
	m["stream_options"] = encodeObject(opts)
	return encodeObject(m), nil
}

// member is a JSON object's member as it stands in the text.
type member struct{ key, val []byte }

// streamBodyPlain is streamBody for a body whose keys are plain ASCII,
// the common case, without decoding it into maps: it writes the same
// bytes. ok is false when streamBody must decide.
func streamBodyPlain(body []byte) (out []byte, ok bool) {
	if !jsontext.Valid(body) {
		return nil, false
	}
	var buf [24]member
	ms, ok := plainMembers(body, members(buf[:0]))
	if !ok {
		return nil, false
	}
	var optBuf [8]member
	opts := members(optBuf[:0])
	if raw := ms.last("stream_options"); len(raw) > 0 && raw[0] == '{' {
		// Anything but an object is dropped, as a failed decode is.
		if opts, ok = plainMembers(raw, opts); !ok {
			return nil, false
		}
	}
	yes := []byte("true")
	opts = opts.set("include_usage", yes)
	ms = ms.set("stream", yes)
	ms = ms.set("stream_options", opts.appendObject(nil))
	return ms.appendObject(make([]byte, 0, len(body)+64)), true
}

type members []member

// plainMembers appends the members of the JSON object b, which must be
// valid, to ms, sorted by key, the last of a repeated key kept: a map's
// view of the object. ok is false when b is not an object or a key is not
// plain ASCII, which a map would hold decoded.
func plainMembers(b []byte, ms members) (_ members, ok bool) {
	plain := true
	if !topMembers(b, func(key, val []byte) bool {
		for _, c := range key {
			if c >= utf8.RuneSelf {
				plain = false
				return false
			}
		}
		ms = append(ms, member{key, val})
		return true
	}) || !plain {
		return nil, false
	}
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	out := ms[:0]
	for i, m := range ms {
		if i+1 < len(ms) && bytes.Equal(ms[i+1].key, m.key) {
			continue
		}
		out = append(out, m)
	}
	return out, true
}

// last is the value of key; nil when there is none.
func (ms members) last(key string) []byte {
	for _, m := range ms {
		if string(m.key) == key {
			return m.val
		}
	}
	return nil
}

// set sets key to val, keeping ms sorted.
func (ms members) set(key string, val []byte) members {
	i := 0
	for i < len(ms) && string(ms[i].key) < key {
		i++
	}
	if i < len(ms) && string(ms[i].key) == key {
		ms[i].val = val
		return ms
	}
	return slices.Insert(ms, i, member{[]byte(key), val})
}

// appendObject writes ms as encodeObject writes a map.
func (ms members) appendObject(b []byte) []byte {
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, m.key...)
		b = append(b, '"', ':')
		b = append(b, m.val...)
	}
	return append(b, '}')
}

// event handles one server-sent event. done is set when the stream is over,
// with res how it ended.
func (s *stream) event(ctx context.Context, ev sse.Event) (res *api.Result, done bool) {
	data := bytes.TrimSpace(ev.Data)
	if ev.Type == "error" || isErrorPayload(data) {
		return s.engineError(data), true
	}
	if len(data) == 0 {
		return nil, false
	}
	if string(data) == "[DONE]" {
		if err := s.flush(ctx); err != nil {
			return engine.Cancelled(), true
		}
		return s.st.result(), true
	}
	if bytes.IndexByte(data, '\n') >= 0 {
		// JSON spread over several data: lines. The gateway frames each
		// chunk as a single data: line, so it must be compacted.
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			return s.broken(fmt.Errorf("decode chunk: %w", err)), true
		}
		data = buf.Bytes()
	}
	// Every chunk the client gets is a JSON object, of UTF-8 text: an
	// engine's that is not cannot be passed on as a chunk. Its braces are
	// what is checked here, on every chunk; a full scan (0.6 µs a chunk)
	// would find besides only an object broken inside, which no engine's
	// JSON writer makes.
	data = validUTF8(data)
	if data[0] != '{' || data[len(data)-1] != '}' {
		return s.broken(errors.New("the engine sent a chunk that is not a JSON object")), true
	}
	output := carriesToken(data) || s.text && carriesText(data)
	if output {
		s.st.tokenAt(time.Now())
	}
	finish := lastFinishReason(data)
	if finish != "" {
		s.st.finish, s.finished = finish, true
	}
	out := data
	if needsRewrite(data) {
		var forward bool
		var err error
		out, forward, err = rewriteChunk(data, &s.st)
		if err != nil {
			return s.broken(err), true
		}
		if !forward {
			return nil, false
		}
	}
	if !s.forwarded && !output && finish == "" {
		// The rewrite may reuse data's bytes; what is held is a copy.
		s.held = append(s.held, bytes.Clone(out))
		return nil, false
	}
	if err := s.flush(ctx); err != nil {
		return engine.Cancelled(), true
	}
	if err := s.sink.Event(ctx, out); err != nil {
		return engine.Cancelled(), true
	}
	s.forwarded = true
	return nil, false
}

// flush sends the held chunks.
func (s *stream) flush(ctx context.Context) error {
	for _, h := range s.held {
		if err := s.sink.Event(ctx, h); err != nil {
			return err
		}
		s.forwarded = true
	}
	s.held = nil
	return nil
}

// engineError reports an error the engine sent inside the stream.
func (s *stream) engineError(payload []byte) *api.Result {
	r := engine.ErrorResult(errorStatus(payload), payload)
	if !s.forwarded {
		return r
	}
	return engine.CutOff(errors.New(r.Error.Message))
}

// ended reports a stream that stopped without [DONE].
func (s *stream) ended(ctx context.Context, err error) *api.Result {
	if ctx.Err() != nil {
		return engine.Cancelled()
	}
	if s.finished && s.st.usage != nil {
		// The usage chunk is the last an engine sends before [DONE]: the
		// answer is whole, whatever became of the connection after it.
		return s.st.result()
	}
	if errors.Is(err, io.EOF) {
		// A clean end of the body after the finish reason is a server that
		// does not send [DONE] (ik_llama.cpp, some proxies), not a loss;
		// a dropped connection shows up as an unexpected EOF instead.
		if s.finished {
			return s.st.result()
		}
		err = errNoDone
	}
	return s.broken(fmt.Errorf("read stream: %w", err))
}

// broken reports a stream that failed in transit: retryable elsewhere if
// the client has seen nothing yet, cut off otherwise.
func (s *stream) broken(err error) *api.Result {
	if s.forwarded {
		return engine.CutOff(err)
	}
	return engine.Unreachable(err)
}

// whole handles a server that answered a streaming request with one JSON
// completion, as some minimal OpenAI-compatible servers do: the completion
// is passed on as a single chunk.
func (s *stream) whole(ctx context.Context, e *Engine, body io.Reader) *api.Result {
	b, res := e.readBody(ctx, body, s.sink)
	if res != nil {
		return res
	}
	if isErrorPayload(b) {
		return s.engineError(b)
	}
	// A text_completion is its own chunk; a chat.completion is made one.
	chunk := b
	if !s.text {
		var err error
		if chunk, err = completionToChunk(b); err != nil {
			// The engine answered, with something else than it should.
			return invalidResponse(err)
		}
	}
	if res, done := s.event(ctx, sse.Event{Data: chunk}); done {
		return res
	}
	return s.st.result()
}

// completionToChunk turns a chat.completion into the equivalent
// chat.completion.chunk: each choice's message becomes its delta.
func completionToChunk(b []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode completion: %w", err)
	}
	var choices []map[string]json.RawMessage
	if err := json.Unmarshal(m["choices"], &choices); err != nil {
		return nil, fmt.Errorf("decode completion choices: %w", err)
	}
	for _, c := range choices {
		if msg, ok := c["message"]; ok {
			c["delta"] = msg
			delete(c, "message")
		}
	}
	m["choices"] = encodeObjects(choices)
	m["object"] = json.RawMessage(`"chat.completion.chunk"`)
	return encodeObject(m), nil
}

// drain reads what is left of a finished stream so that its connection
// can be reused, giving up after drainWait.
func drain(body io.Reader, cancel context.CancelFunc) {
	t := time.AfterFunc(drainWait, cancel)
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainMax))
}

// isJSON reports whether a Content-Type is JSON's. It is asked of every
// streamed answer, so it reads the header in place.
func isJSON(contentType []byte) bool {
	mt, _, _ := bytes.Cut(contentType, []byte(";"))
	return bytes.EqualFold(bytes.TrimSpace(mt), []byte("application/json"))
}
