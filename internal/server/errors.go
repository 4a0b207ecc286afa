package server

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

// toAPIError is the one place errors become HTTP answers. Domain packages
// return *api.Error for what the caller must see; anything else is a 500
// whose cause is logged, not sent.
func (s *Server) toAPIError(c *call, err error) *api.Error {
	ae := asAPIError(err, c.requestID)
	if ae.Kind == api.KindInternal && ae.Err == err {
		s.log.Error("request failed", "request_id", c.requestID, "path", string(c.ctx.Path()), "err", err)
	}
	return ae
}

func asAPIError(err error, requestID string) *api.Error {
	ae := api.ErrorOf(err)
	if ae.Kind == api.KindInternal && ae.Err == err && requestID != "" {
		quoted := *ae
		quoted.Message += ", and quote request id " + requestID + " if it persists"
		return &quoted
	}
	return ae
}

// writeError answers with err in the body shape the route and error call
// for: validation (422 with errors[]), nested private-inference, the
// compatible envelope beside detail, or plain detail.
func (s *Server) writeError(c *call, err error) {
	ae := s.toAPIError(c, err)
	h := &c.ctx.Response.Header
	if ae.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(ae.RetryAfter.Seconds()))))
	}
	if ae.Kind == api.KindCapacity {
		h.Set("X-Svc-Queue-Depth", strconv.Itoa(ae.QueueDepth))
	}
	if ae.CodeHeader && ae.Code != "" {
		h.Set("X-Svc-Error-Code", ae.Code)
	}
	if ae.HTTPStatus() == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="svc"`)
	}
	compatible := c.route == nil || c.route.compatible
	writeJSON(c.ctx, ae.HTTPStatus(), errorBody(ae, compatible))
}

func errorBody(ae *api.Error, compatible bool) api.Body {
	payload := &api.ErrorPayload{Message: ae.Message, Type: ae.ErrorType()}
	if ae.Code != "" {
		payload.Code = &ae.Code
	}
	if ae.Param != "" {
		payload.Param = &ae.Param
	}
	switch {
	case len(ae.Fields) > 0:
		if payload.Param == nil {
			payload.Param = &ae.Fields[0].Field
		}
		return api.Body{Detail: ae.Message, Error: payload, Errors: ae.Fields}
	case ae.Nested():
		return api.Body{Detail: map[string]any{"error": payload}}
	case compatible:
		return api.Body{Detail: ae.Message, Error: payload}
	default:
		return api.Body{Detail: ae.Message}
	}
}

func (s *Server) notFound(m *mux, method, path string, console bool) error {
	msg := "No route for " + method + " " + path + "."
	if console {
		msg += " The admin socket serves /api/v1/console/ only."
	} else {
		msg += " API paths start with /api/v1/; chat completions, embeddings, models, audio and moderations are also served under /v1/."
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
	}
	writeEarly(ctx, ae)
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
		if errors.As(s.keyError(&ctx.Request.Header), &ae) {
			return ae
		}
	}
	if r := m.bodyLimit(ctx.Request.Header.RequestURI()); r != nil && r.tooLarge != nil {
		return r.tooLarge
	}
	// A chunked body over its route's limit gets here with its headers
	// forgotten, so the message names every limit.
	return &api.Error{Kind: api.KindTooLarge,
		Message: "Request body too large; the limit is " + strconv.Itoa(maxBodySize>>20) + " MB, and 25 MB for an audio file"}
}

// writeEarly answers a request refused before its route ran.
func writeEarly(ctx *fasthttp.RequestCtx, ae *api.Error) {
	ctx.Response.Header.Set("X-Request-Id", uuid.NewString())
	if ae.HTTPStatus() == http.StatusUnauthorized {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="svc"`)
	}
	writeJSON(ctx, ae.HTTPStatus(), errorBody(ae, true))
}

// writeJSON answers with v as JSON. HTML escaping is off: these bodies are
// read by programs and terminals, where \u003c is noise.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.Response.ResetBody()
	enc := json.NewEncoder(ctx.Response.BodyWriter())
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types reach here; failing to encode them is a bug.
		ctx.Response.ResetBody()
		status = http.StatusInternalServerError
		ctx.Response.SetBodyString(`{"detail":"Internal server error: response encoding failed"}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
}

// lateErrorBody is the body of a failure after a kept-alive reply started:
// a 200 whose JSON is the error object, with detail beside it.
func lateErrorBody(err error) []byte {
	ae := asAPIError(err, "")
	b, _ := json.Marshal(map[string]any{"error": lateError(ae), "detail": ae.Message})
	return b
}

// streamErrorPayload is the error frame of a stream.
func streamErrorPayload(err error) []byte {
	b, _ := json.Marshal(map[string]any{"error": lateError(asAPIError(err, ""))})
	return b
}

// lateError is the error object of a failure after the response started
// (a stream's error frame, a kept-alive non-streaming reply): message,
// type and code, plus retry_after and queue_depth for a capacity 429.
func lateError(ae *api.Error) map[string]any {
	payload := map[string]any{"message": ae.Message, "type": ae.ErrorType(), "code": ae.Code, "status": ae.HTTPStatus()}
	if ae.Code == "" {
		payload["code"] = strconv.Itoa(ae.HTTPStatus())
	}
	if ae.RetryAfter > 0 {
		payload["retry_after"] = int((ae.RetryAfter + time.Second - 1) / time.Second)
	}
	if ae.Kind == api.KindCapacity {
		payload["queue_depth"] = ae.QueueDepth
	}
	return payload
}
