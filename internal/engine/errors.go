package engine

import (
	"encoding/json"
	"errors"
	"html"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/svc-dev/svc/internal/api"
)

// OK is a successful result.
func OK() *api.Result { return &api.Result{Status: http.StatusOK} }

// Failure is a result with status and a message.
func Failure(status int, typ, msg string) *api.Result {
	return &api.Result{Status: status, Error: &api.ResultError{Message: msg, Type: typ}}
}

// Unreachable is the result when the engine could not be reached at all:
// another worker may well succeed, so the gateway retries elsewhere. Its
// message says what failed but not where: the engine's address is the
// worker's business, not the client's. A connection the engine refused
// (Refused) has the code CodeEngineUnreachable.
func Unreachable(err error) *api.Result {
	r := Failure(http.StatusBadGateway, api.TypeUpstream, "inference engine unreachable: "+cause(err))
	r.Retryable = true
	if Refused(err) {
		r.Error.Code = api.CodeEngineUnreachable
	}
	return r
}

// Refused reports whether err is a failure to connect to the engine:
// nothing listens at its address (an engine that crashed or is
// restarting), or nothing answers there. Every request to it fails the
// same way until it listens again.
func Refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// cause is err told without the addresses a network error names, and
// without the URL net/http's errors quote.
func cause(err error) string {
	var op *net.OpError
	if !errors.As(err, &op) {
		msg := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = strings.ReplaceAll(msg, " "+strconv.Quote(ue.URL), "")
		}
		return msg
	}
	var errno syscall.Errno
	var dns *net.DNSError
	switch {
	case errors.As(op.Err, &errno):
		return op.Op + ": " + errno.Error()
	case errors.As(op.Err, &dns):
		return op.Op + ": the engine's host name did not resolve"
	case op.Timeout():
		return op.Op + ": timed out"
	}
	return op.Op + " failed"
}

// Cancelled is the result of a request the client gave up on.
func Cancelled() *api.Result {
	return Failure(499, "cancelled", "Client disconnected")
}

// CutOff is the result when the engine's answer broke off after output
// had been sent: the rest of the response was lost in transit.
func CutOff(err error) *api.Result {
	msg := "the inference engine's response was cut off"
	if err != nil {
		msg += ": " + err.Error()
	}
	return Failure(http.StatusBadGateway, api.TypeUpstream, msg+"; part of the response was lost in transit")
}

// TypeContextLengthExceeded is the error type of an input longer than the
// model takes, whatever the engine called it.
const TypeContextLengthExceeded = api.TypeContextLengthExceeded

// ContextLengthStatus is the status of an input over the model's limit in
// a request of kind: 413 for embeddings and rerank, whose input is too
// large for the model and is shortened or split, and 400 for a chat or
// completion prompt too long for the model's context window.
func ContextLengthStatus(kind string) int {
	switch kind {
	case api.KindEmbeddings, api.KindRerank:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// ForKind gives r, a result for a request of kind, the status its kind
// calls for: a context-length failure (see ErrorResult) gets
// ContextLengthStatus, its type, code and message kept. Adapters pass
// what they return through it, since ErrorResult does not know the kind.
func ForKind(kind string, r *api.Result) *api.Result {
	if r != nil && r.Error != nil && r.Error.Type == TypeContextLengthExceeded && r.Status >= 400 && r.Status < 500 {
		r.Status = ContextLengthStatus(kind)
	}
	return r
}

// ErrorResult turns an engine's error answer into a result. It reads the
// error bodies of OpenAI, vLLM (flat and nested), llama.cpp, Ollama and
// TEI, and maps their meaning onto the gateway's statuses: out-of-memory is
// 507 (Ollama's "model requires more system memory" too, on its native API
// and its /v1 alike), "not supported" is 501, an input over the model's
// context length is 400 context_length_exceeded, whatever status the
// engine gave it (ForKind makes that 413 for embeddings and rerank), and
// 5xx failures are retryable on another worker.
func ErrorResult(status int, body []byte) *api.Result {
	full, typ, code := parseErrorBody(body)
	if full == "" {
		full = string(body)
	}
	// What the client is told: a JSON error may wrap a page, or pages, of
	// its own. The whole of it is read for what it says.
	msg := bodyText([]byte(full))
	if msg == "" {
		msg = http.StatusText(status)
	}
	if msg == "" {
		// A status of the engine's own, with nothing said.
		msg = "The engine answered status " + strconv.Itoa(status) + " and said nothing more"
	}
	lower := strings.ToLower(full + " " + typ + " " + code)
	out := status
	switch {
	case containsAny(lower, "out of memory", "outofmemory", "failed to allocate", "cuda error 2", "insufficient memory", "not enough memory", "requires more system memory"):
		out, typ = http.StatusInsufficientStorage, api.TypeInsufficientMemory
	case containsAny(lower, "exceed_context_size", "context length", TypeContextLengthExceeded, "maximum context length", "too many tokens"),
		// TEI's (and TGI's) "`inputs` must have less than 512 tokens".
		strings.Contains(lower, "must have less than") && strings.Contains(lower, "tokens"),
		// llama-server's embeddings of an input longer than its batch,
		// sent as a 500: shortening the input is what helps, and another
		// worker of the same setup would refuse it too.
		strings.Contains(lower, "input is too large to process"):
		out, typ = http.StatusBadRequest, TypeContextLengthExceeded
	case status == http.StatusNotImplemented || containsAny(lower, "not_supported_error", "not supported", "unsupported"):
		if status >= 500 || status == http.StatusNotImplemented {
			out, typ = http.StatusNotImplemented, api.TypeNotSupported
		}
	case status == http.StatusNotFound:
		typ = api.TypeNotFound
	case status >= 400 && status < 500 && typ == "":
		// The status's own type: a 429 without one is a rate limit, not
		// an invalid request.
		typ = api.TypeForStatus(status)
	}
	if out < 400 {
		out = http.StatusBadGateway
	}
	retryable := false
	switch out {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		retryable = true
	}
	// Clients branch on the type (the spec's errors): an engine's own
	// (vLLM's BadRequestError, llama-server's unavailable_error) is the
	// gateway's for the status. The engine's code is kept as it sent it.
	if !knownType(typ) {
		typ = api.TypeForStatus(out)
		if retryable {
			typ = api.TypeUpstream
		}
	}
	return &api.Result{Status: out, Error: &api.ResultError{Message: msg, Type: typ, Code: code}, Retryable: retryable}
}

// knownType reports whether typ is one of the error types the gateway
// answers with.
func knownType(typ string) bool {
	switch typ {
	case api.TypeInvalidRequest, api.TypeAuthentication, api.TypePermission, api.TypeNotFound, api.TypeConflict,
		api.TypeRateLimit, api.TypeServer, api.TypeNotSupported, api.TypeUpstream, api.TypeServiceUnavailable,
		api.TypeTimeout, api.TypeInsufficientMemory, TypeContextLengthExceeded:
		return true
	}
	return false
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// parseErrorBody reads {"error":{"message","type","code"}},
// {"object":"error","message","type","code"}, {"error":"msg"} and
// {"detail":"msg"}.
func parseErrorBody(body []byte) (msg, typ, code string) {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return "", "", ""
	}
	if len(v.Error) > 0 {
		var s string
		if json.Unmarshal(v.Error, &s) == nil {
			return s, "", ""
		}
		var e struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(v.Error, &e) == nil {
			return e.Message, e.Type, rawCode(e.Code)
		}
	}
	if v.Message != "" {
		return v.Message, v.Type, rawCode(v.Code)
	}
	var d string
	if json.Unmarshal(v.Detail, &d) == nil {
		return d, "", ""
	}
	return "", "", ""
}

// rawCode reads a code that engines send as a string or a number.
func rawCode(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// maxBodyText bounds, in bytes, the message an engine's error makes: the
// client gets the engine's words, not a page of them.
const maxBodyText = 512

// bodyText is an error's text as its message: an HTML page (a proxy's,
// in front of the engine, bare or inside a JSON error) by its title,
// anything else trimmed and cut to maxBodyText.
func bodyText(body []byte) string {
	text := strings.TrimSpace(string(body))
	if lower := asciiLower(text[:min(len(text), 4096)]); strings.HasPrefix(lower, "<!doctype html") || strings.HasPrefix(lower, "<html") ||
		strings.Contains(lower, "<body") {
		title := ""
		if i := strings.Index(lower, "<title>"); i >= 0 {
			if j := strings.Index(lower[i:], "</title>"); j > 0 {
				title = strings.TrimSpace(text[i+len("<title>") : i+j])
			}
		}
		if title == "" {
			return "an HTML page instead of the engine's error (a proxy in front of the engine?)"
		}
		return "an HTML page instead of the engine's error (a proxy in front of the engine?): " + html.UnescapeString(strings.ToValidUTF8(title[:min(len(title), 200)], ""))
	}
	if len(text) > maxBodyText {
		text = strings.ToValidUTF8(text[:maxBodyText], "") + "..."
	}
	return text
}

// asciiLower is s with its ASCII letters in lower case, and of its length:
// indexes found in it stand in s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
