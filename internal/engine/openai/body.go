package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/jsontext"
)

const embeddingsPath = "/v1/embeddings"

// chat serves a non-streaming chat request. The body is forwarded as the
// client sent it, with the engine's own thinking switches added.
func (e *Engine) chat(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	resp, res := e.post(ctx, chatPath, mapReasoning(req.Body, e.detected()), "application/json")
	if res != nil {
		return res
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	var st stats
	out, res := normaliseCompletion(validUTF8(b), &st)
	if res != nil {
		return res
	}
	if err := sink.Body(ctx, out); err != nil {
		return engine.Cancelled()
	}
	return st.result()
}

// normaliseCompletion captures usage (which stays in the body: clients
// read it there; usage that holds no counts the worker believes is
// removed), removes llama.cpp timings and vLLM metrics, and mirrors
// the reasoning fields of each choice's message. A body that needs no
// change is returned as it came.
func normaliseCompletion(b []byte, st *stats) ([]byte, *api.Result) {
	if !bytes.Contains(b, []byte(keyTimings)) && !bytes.Contains(b, []byte(keyMetrics)) &&
		!bytes.Contains(b, []byte(keyReasoning)) {
		if res, ok := readPlainCompletion(b, st); ok {
			return b, res
		}
	}
	return normaliseGeneral(b, st)
}

// validUTF8 is b with every byte that is not UTF-8 replaced by U+FFFD.
// JSON is UTF-8, and a client's decoder may refuse a reply that is not;
// such bytes can only be inside strings of JSON that is otherwise valid,
// where the replacement (one for each run of such bytes) keeps it valid.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

// normaliseGeneral is normaliseCompletion for any body: decoded into its
// top-level members, edited, encoded again when it changed.
func normaliseGeneral(b []byte, st *stats) ([]byte, *api.Result) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, invalidResponse(fmt.Errorf("decode completion: %v", err))
	}
	choices, hasChoices := m["choices"]
	if !hasChoices && !isNull(m["error"]) {
		// An error reported with status 200.
		return nil, engine.ErrorResult(errorStatus(b), b)
	}
	changed, _ := takeStats(m, st, false)
	if !isNull(m["usage"]) && st.usage == nil {
		// Counts the worker does not believe (negative, past any context,
		// no object at all) are not the client's either: the gateway
		// writes the usage it accounts in their place.
		delete(m, "usage")
		changed = true
	}
	st.finish = lastFinishReason(choices)
	if bytes.Contains(choices, []byte(keyReasoning)) {
		if c, ok := mirrorChoices(choices, "message"); ok {
			m["choices"], changed = c, true
		}
	}
	if !changed {
		return b, nil
	}
	return encodeObject(m), nil
}

// readPlainCompletion captures what normaliseCompletion does from a valid
// completion that needs no change, in one pass over it that also checks
// it is JSON. ok is false when the general path must decide: not JSON, not
// an object, or a member's name with an escape, which a map holds decoded.
func readPlainCompletion(b []byte, st *stats) (res *api.Result, ok bool) {
	var choices, usage, errVal []byte
	hasChoices := false
	var sc jsontext.Scanner
	sc.Reset(b)
	if sc.Peek() != '{' {
		return nil, false
	}
	sc.Open()
	for n := 0; sc.Next(n, '}'); n++ {
		key, kind := sc.Key()
		if kind == jsontext.Escaped {
			return nil, false
		}
		val := sc.Raw()
		switch string(key) {
		case "choices":
			choices, hasChoices = val, true
		case "usage":
			usage = val
		case "error":
			errVal = val
		}
	}
	if sc.End(); sc.Bad() {
		return nil, false
	}
	if !hasChoices && !isNull(errVal) {
		return engine.ErrorResult(errorStatus(b), b), true
	}
	if !isNull(usage) {
		if st.captureUsage(usage); st.usage == nil {
			return nil, false // not believed: the general path removes it
		}
	}
	st.finish = lastFinishReason(choices)
	return nil, true
}

// embeddings serves an embeddings request. The response goes to the sink
// unchanged; only its usage is read.
func (e *Engine) embeddings(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	resp, res := e.post(ctx, embeddingsPath, req.Body, "application/json")
	if res != nil {
		return res
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	var st stats
	st.captureUsage(lastValue(b, keyUsage))
	if err := sink.Body(ctx, b); err != nil {
		return engine.Cancelled()
	}
	return st.result()
}

// lastValue decodes the value of the last occurrence of quotedKey in b without
// decoding the rest: an embeddings response is megabytes of floats with
// usage at the end.
func lastValue(b []byte, quotedKey string) json.RawMessage {
	var raw json.RawMessage
	eachValue(b, quotedKey, func(v []byte) bool {
		var r json.RawMessage
		if json.NewDecoder(bytes.NewReader(v)).Decode(&r) == nil {
			raw = r
		}
		return true
	})
	return raw
}

// readBody reads a whole successful response for sink, telling it as the
// bytes come when it is an engine.Receiver.
func (e *Engine) readBody(ctx context.Context, body io.Reader, sink engine.Sink) ([]byte, *api.Result) {
	recv, _ := sink.(engine.Receiver)
	b, err := readLimitedFor(body, e.maxBody, recv)
	switch {
	case errors.Is(err, errTooLarge):
		return nil, engine.Failure(http.StatusBadGateway, api.TypeUpstream,
			fmt.Sprintf("response too large: the inference engine's answer exceeds %d bytes", e.maxBody))
	case err != nil && ctx.Err() != nil:
		return nil, engine.Cancelled()
	case err != nil:
		return nil, engine.Unreachable(fmt.Errorf("read response: %w", err))
	}
	return b, nil
}

// invalidResponse is the result for an answer that is not what the OpenAI
// API promises. Nothing reached the client, so another worker may do
// better.
func invalidResponse(err error) *api.Result {
	r := engine.Failure(http.StatusBadGateway, api.TypeUpstream, "invalid response from the inference engine: "+err.Error())
	r.Retryable = true
	return r
}
