package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/anthropic"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsontext"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/transcription"
)

// toAPIError is what a call's client is told of err. Domain packages
// return *api.Error for what the caller must see; anything else is an
// internal error whose cause is logged, not sent.
func (s *Server) toAPIError(c *call, err error) *api.Error {
	ae := asAPIError(err, c.requestID)
	if ae.Kind == api.KindInternal && ae.Err == err && s.cluster != nil && pgstore.Unreachable(err) {
		// Only a cluster's replica has a database to lose. The bare
		// errors that reach here come from its stores: the paths to a
		// client, a peer or a worker answer with errors of their own.
		ae = errStoreUnreachable
	}
	switch {
	case ae.Kind == api.KindInternal && ae.Err == err:
		s.log.Error("request failed", "request_id", c.requestID, "path", string(c.ctx.Path()), "err", err)
	case ae == errStoreUnreachable:
		s.log.Warn("request failed: the database is out of reach", "request_id", c.requestID, "path", string(c.ctx.Path()), "err", err)
	}
	return ae
}

// errStoreUnreachable answers a request that failed because the cluster's
// database could not be reached: nothing was wrong with it, and a retry
// once the database is back succeeds.
var errStoreUnreachable = &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: 5 * time.Second,
	Message: "Service temporarily unavailable, please retry"}

func asAPIError(err error, requestID string) *api.Error {
	ae := api.ErrorOf(err)
	if ae.Kind == api.KindInternal && ae.Err == err && requestID != "" {
		quoted := *ae
		quoted.Message += ", and quote request id " + requestID + " if it persists"
		return &quoted
	}
	return ae
}

// writeError answers a call with err, in the form its route calls for.
func (s *Server) writeError(c *call, err error) {
	f := formCompatible
	switch {
	case c.route != nil && c.route.anthropic,
		// A method or path the Messages API does not have (GET
		// /v1/messages, /v1/messages/batches): its SDKs read the answer.
		c.route == nil && anthropicPath(c.ctx.Path()):
		f = formAnthropic
	case c.route != nil && !c.route.compatible:
		f = formPlain
	}
	if f == formAnthropic {
		// Its SDKs read the request id from their own header, which a
		// refusal before the route was known has not set.
		c.ctx.Response.Header.Set("Request-Id", c.requestID)
	}
	ae := s.toAPIError(c, err)
	if c.route != nil && c.route.codeHeader && !ae.CodeHeader {
		// A copy: ae may be one of the shared errors (errNoKey). An error
		// without a code of its own (a malformed body, a 422) has its type
		// for one: the route promises every error a code, in the body and
		// in the header.
		withHeader := *ae
		withHeader.CodeHeader = true
		withHeader.Code = cmp.Or(ae.Code, ae.ErrorType())
		ae = &withHeader
	}
	answerError(c.ctx, ae, f)
}

func (s *Server) notFound(m *mux, method, path string, console bool) error {
	msg := "No route for " + method + " " + path + "."
	if console {
		msg += " The admin socket serves /api/v1/console/ only."
	} else {
		msg += " API paths start with /api/v1/; chat and text completions, messages, responses, embeddings, reranking, image generation, models, audio and moderations are also served under /v1/."
	}
	if hint := m.suggest(path); hint != "" {
		msg += " Did you mean " + hint + "?"
	}
	return &api.Error{Kind: api.KindNotFound, Code: "route_not_found", Message: msg}
}

func methodNotAllowed(method, path string, allow []string) error {
	return &api.Error{Kind: api.KindMethodNotAllowed, Code: "method_not_allowed",
		Message: method + " is not allowed on " + path + "; use " + strings.Join(allow, " or ")}
}

// parseError answers requests fasthttp could not parse, before any route.
func (s *Server) parseError(ctx *fasthttp.RequestCtx, m *mux, console bool, err error) {
	ae := &api.Error{Kind: api.KindInvalidRequest, Message: "Malformed HTTP request"}
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ae = s.tooLarge(ctx, m, console)
	case errors.As(err, &small):
		ae = &api.Error{Kind: api.KindHeadersTooLarge,
			Message: "Request headers too large; the limit is " + strconv.Itoa(headerLimit>>10) + " KB"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		// fasthttp's own reads: the head, and a small body's first part.
		ae = errRequestTimeout
	}
	writeEarly(ctx, ae)
	// Counted as requests no route matched: a client sending broken
	// requests shows in the metrics, as one sending unknown paths does.
	s.metrics.observe("unmatched", string(ctx.Method()), ctx.Response.StatusCode(), time.Since(ctx.Time()))
}

// expectContinue answers Expect: 100-continue: a body over the route's
// limit is refused before the client sends it.
func (s *Server) expectContinue(ctx *fasthttp.RequestCtx, m *mux, console bool) int {
	limit := maxBodySize
	if r := m.bodyLimit(ctx.Request.Header.RequestURI()); r != nil {
		limit = r.maxBody
	}
	if !console && s.keyError(&ctx.Request.Header) != nil {
		limit = anonymousBodyLimit
	}
	if ctx.Request.Header.ContentLength() <= limit {
		return fasthttp.StatusContinue
	}
	ae := s.tooLarge(ctx, m, console)
	writeEarly(ctx, ae)
	return ae.HTTPStatus()
}

// tooLarge is the 413 for a body over its route's limit, or the 401 of a
// caller without a valid key, whose limit is far lower: told 413, it
// would shrink a request that can never succeed.
func (s *Server) tooLarge(ctx *fasthttp.RequestCtx, m *mux, console bool) *api.Error {
	// fasthttp resets the request when a chunked body runs over, so its
	// headers, the key among them, are known only while some remain.
	if !console && ctx.Request.Header.Len() > 0 {
		var ae *api.Error
		if errors.As(s.refusedKey(ctx, m), &ae) {
			return ae
		}
	}
	return overLimit(ctx, m)
}

// overLimit is the 413 of a body over its route's limit, for a caller the
// route admits.
func overLimit(ctx *fasthttp.RequestCtx, m *mux) *api.Error {
	if r := m.bodyLimit(ctx.Request.Header.RequestURI()); r != nil && r.tooLarge != nil {
		return r.tooLarge
	}
	// A chunked body over its route's limit gets here with its headers
	// forgotten, so the message names every limit.
	return &api.Error{Kind: api.KindTooLarge,
		Message: "Request body too large; the limit is " + strconv.Itoa(maxBodySize>>20) + " MB, and " + strconv.Itoa(transcription.MaxBody>>20) + " MB for an audio upload"}
}

// refusedKey is why the request's key may not call its route at all, as
// authorize would find it, or nil: a key that may not send the request is
// told that before it is told to shrink the body.
func (s *Server) refusedKey(ctx *fasthttp.RequestCtx, m *mux) error {
	key := keyOf(&ctx.Request.Header)
	if key == "" {
		return errNoKey
	}
	p, err := s.accounts.Authenticate(key)
	if err != nil {
		return err
	}
	var ps params
	r, _ := m.match(string(ctx.Method()), string(ctx.Path()), &ps)
	switch {
	case r == nil:
		return nil
	case r.access == accessConsole:
		return errConsoleOnly
	case r.access != accessKey:
		return nil
	}
	if err := p.Require(r.perm); err != nil {
		return err
	}
	if r.operator != "" {
		return p.RequireOperator(r.operator)
	}
	return nil
}

// writeEarly answers a request refused before its route ran, which has
// no request id yet and is answered as if on a compatible route.
func writeEarly(ctx *fasthttp.RequestCtx, ae *api.Error) {
	ctx.Response.Header.Set("X-Request-Id", uuid.NewString())
	answerError(ctx, ae, formCompatible)
}

// writeJSON answers with v as JSON. HTML escaping is off: these bodies are
// read by programs and terminals, where \u003c is noise.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.Response.ResetBody()
	enc := json.NewEncoder(ctx.Response.BodyWriter())
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types reach here; failing to encode them is a bug.
		answerError(ctx, &api.Error{Kind: api.KindInternal, Message: "Internal server error: response encoding failed", Err: err}, formPlain)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
}

// errorForm is where an error is answered, which decides what it looks
// like: before anything was sent it is a response of its own; after a
// reply started it can only be part of that reply's body, a 200 whose
// status and headers are gone.
type errorForm uint8

const (
	// formPlain is a response on a route that answers errors with detail
	// alone.
	formPlain errorForm = iota
	// formCompatible is a response with the OpenAI-compatible envelope
	// beside detail, on a compatible route or before any route ran.
	formCompatible
	// formLate is the body of a kept-alive reply whose answer failed: the
	// error object, with detail beside it.
	formLate
	// formLateModeration is formLate for a moderation check, in the
	// moderation table's terms: code is the status the check would have
	// had, moderation_code the table's code.
	formLateModeration
	// formStreamEvent is the data of a started stream's error event.
	formStreamEvent
	// formAnthropic is a response on the Messages API, in Anthropic's
	// shape (type error, and error's type named as Anthropic names it for
	// the status), which its SDKs and tools read; detail beside it.
	formAnthropic
)

// renderError is the one writer of errors: what a client is told of ae in
// form f. A response gets its headers on h and its status returned; the
// forms inside a started reply have neither (h is nil), so what a client
// needs of them (status, retry_after, queue_depth) rides in the body.
func renderError(h *fasthttp.ResponseHeader, ae *api.Error, f errorForm) (status int, body []byte) {
	status = ae.HTTPStatus()
	retryAfter := retryAfterSeconds(ae)
	switch f {
	case formPlain, formCompatible, formAnthropic:
		if ae.RetryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(retryAfter))
		}
		if ae.Kind == api.KindCapacity {
			h.Set("X-Svc-Queue-Depth", strconv.Itoa(ae.QueueDepth))
		}
		if ae.CodeHeader && ae.Code != "" {
			h.Set("X-Svc-Error-Code", ae.Code)
		}
		if !worthRetrying(ae, status) {
			h.Set("X-Should-Retry", "false")
		}
		if status == http.StatusUnauthorized {
			// RFC 6750: a credential that was sent and refused says so;
			// a request that sent none gets the challenge alone.
			if ae.Code == "missing_api_key" || ae.Code == "missing_metrics_token" {
				h.Set("WWW-Authenticate", `Bearer realm="svc"`)
			} else {
				h.Set("WWW-Authenticate", `Bearer realm="svc", error="invalid_token"`)
			}
		}
		if f == formAnthropic {
			return status, anthropicError(ae, status)
		}
		return status, responseJSON(ae, f == formCompatible)
	case formLateModeration:
		e := map[string]any{"message": ae.Message, "type": ae.ErrorType(), "code": status, "moderation_code": ae.Code}
		if ae.RetryAfter > 0 {
			e["retry_after"] = retryAfter
		}
		return http.StatusOK, encodeError(map[string]any{"error": e, "detail": ae.Message}, true)
	}
	e := map[string]any{"message": ae.Message, "type": ae.ErrorType(), "code": ae.Code, "status": status}
	if ae.Code == "" {
		e["code"] = strconv.Itoa(status)
	}
	if ae.RetryAfter > 0 {
		e["retry_after"] = retryAfter
	}
	if ae.Kind == api.KindCapacity {
		e["queue_depth"] = ae.QueueDepth
	}
	if f == formStreamEvent {
		return http.StatusOK, encodeError(map[string]any{"error": e}, true)
	}
	return http.StatusOK, encodeError(map[string]any{"error": e, "detail": ae.Message}, true)
}

// worthRetrying reports whether a client's retry of a failure with status,
// soon and unchanged, could succeed. The OpenAI and Anthropic SDKs retry
// every 408, 409, 429 and 5xx unless X-Should-Retry says false, and the
// spec says a retry does not help a lasting limitation (501), a model too
// large (507), a model not installed (409) or a moderation verdict the
// model will give again (502 moderation_invalid_verdict); nor does one in
// the same HTTP version (505).
func worthRetrying(ae *api.Error, status int) bool {
	switch status {
	case http.StatusConflict, http.StatusNotImplemented, http.StatusInsufficientStorage, http.StatusHTTPVersionNotSupported:
		return false
	case http.StatusBadGateway:
		return ae.Code != api.CodeModerationInvalidVerdict
	}
	return true
}

// retryAfterSeconds is ae's Retry-After in whole seconds, rounded up.
func retryAfterSeconds(ae *api.Error) int {
	return int((ae.RetryAfter + time.Second - 1) / time.Second)
}

// responseJSON is ae.Body encoded as encodeError encodes it. The
// common bodies, a message with or without its envelope, are written by
// hand: every refusal under overload is one, and reflection was a few
// percent of what refusing cost.
func responseJSON(ae *api.Error, compatible bool) []byte {
	if len(ae.Fields) > 0 || ae.Nested() {
		return encodeError(ae.Body(compatible), false)
	}
	b := make([]byte, 0, 128+2*len(ae.Message)+len(ae.Code)+len(ae.Param))
	b = append(b, `{"detail":`...)
	b = jsontext.AppendStringNoHTML(b, ae.Message)
	if compatible || ae.Envelope {
		b = append(b, `,"error":{"message":`...)
		b = jsontext.AppendStringNoHTML(b, ae.Message)
		b = append(b, `,"type":`...)
		b = jsontext.AppendStringNoHTML(b, ae.ErrorType())
		b = append(b, `,"code":`...)
		b = appendOptional(b, ae.Code)
		b = append(b, `,"param":`...)
		b = appendOptional(b, ae.Param)
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

// anthropicError is the body of an error on the Messages API: Anthropic's
// envelope, with the gateway's own code (or type, where it has no code),
// field and failed fields beside its type and message, and detail.
func anthropicError(ae *api.Error, status int) []byte {
	b := make([]byte, 0, 128+2*len(ae.Message)+len(ae.Code)+len(ae.Param))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsontext.AppendStringNoHTML(b, anthropic.ErrorType(status))
	b = append(b, `,"message":`...)
	b = jsontext.AppendStringNoHTML(b, ae.Message)
	b = append(b, `,"code":`...)
	b = jsontext.AppendStringNoHTML(b, cmp.Or(ae.Code, ae.ErrorType()))
	param := ae.Param
	if param == "" && len(ae.Fields) > 0 {
		param = ae.Fields[0].Field
	}
	if param != "" {
		b = append(b, `,"param":`...)
		b = jsontext.AppendStringNoHTML(b, param)
	}
	b = append(b, '}')
	if len(ae.Fields) > 0 {
		if fields, err := json.Marshal(ae.Fields); err == nil {
			b = append(append(b, `,"errors":`...), fields...)
		}
	}
	b = append(b, `,"detail":`...)
	if ae.Nested() {
		// A private-inference error keeps the spec's nested shape beside
		// Anthropic's envelope: clients branch on detail.error.type.
		b = append(b, encodeError(ae.Body(false).Detail, true)...)
	} else {
		b = jsontext.AppendStringNoHTML(b, ae.Message)
	}
	return append(b, "}\n"...)
}

// appendOptional writes s, or null when it is empty.
func appendOptional(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsontext.AppendStringNoHTML(b, s)
}

// encodeError encodes an error body. A response ends in a newline and
// leaves HTML unescaped, as writeJSON does; the bodies inside a started
// reply are encoded as they always were, escaped and without one.
func encodeError(v any, inReply bool) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(inReply)
	// Only maps of strings and numbers, and api.Body, reach here.
	_ = enc.Encode(v)
	if inReply {
		return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	return b.Bytes()
}

// answerError answers the request with ae as a response of its own.
func answerError(ctx *fasthttp.RequestCtx, ae *api.Error, f errorForm) {
	status, body := renderError(&ctx.Response.Header, ae, f)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	if len(ae.Sealed) > 0 {
		// The worker's failure of a private request, which its client
		// opens; the headers are the gateway's all the same.
		body = ae.Sealed
		ctx.SetContentType(e2ee.ContentType)
	}
	ctx.Response.SetBody(body)
}

// inReplyError is the body of err inside a reply already started, in form
// f (formLate, formLateModeration or formStreamEvent).
func inReplyError(err error, f errorForm) []byte {
	_, b := renderError(nil, asAPIError(err, ""), f)
	return b
}

// anthropicPath reports whether path is under the Messages API's.
func anthropicPath(path []byte) bool {
	for _, prefix := range []string{"/v1/messages", "/api/v1/messages"} {
		if rest, ok := bytes.CutPrefix(path, []byte(prefix)); ok && (len(rest) == 0 || rest[0] == '/') {
			return true
		}
	}
	return false
}
