// Package api holds the wire types shared by the server, the client, the
// worker agent and the dashboard, and the error type every layer returns.
package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error types sent in error.type (or detail.error.type). Clients branch on
// these, never on message text.
const (
	TypeInvalidRequest     = "invalid_request_error"
	TypeAuthentication     = "authentication_error"
	TypePermission         = "permission_error"
	TypeNotFound           = "not_found_error"
	TypeConflict           = "conflict_error"
	TypeRateLimit          = "rate_limit_exceeded"
	TypeServer             = "server_error"
	TypeNotSupported       = "not_supported_error"
	TypeUpstream           = "upstream_error"
	TypeServiceUnavailable = "service_unavailable"
	TypeTimeout            = "timeout_error"
	TypeInsufficientMemory = "insufficient_memory_error"
	// TypeContextLengthExceeded is an input longer than the model's
	// context window takes, whoever found it (the gateway, the fleet, the
	// engine).
	TypeContextLengthExceeded = "context_length_exceeded"

	// Private-inference types travel in the nested shape.
	TypeE2ERequired             = "e2e_required"
	TypePlanRequired            = "plan_required"
	TypeInvalidEncryptedRequest = "invalid_encrypted_request"
)

// Codes sent in error.code when no worker takes a request, or the one that
// took it fails it. The moderation table and clients branch on them; a
// model no connected worker has is CodeModelNotFound.
const (
	CodeCapacityExceeded = "capacity_exceeded"   // every worker serving the model is busy
	CodeWorkersUnhealthy = "workers_unhealthy"   // the workers that could serve it are held back
	CodeNoWorkerOnline   = "no_worker_online"    // the organisation has no worker connected
	CodeNoWorkerForModel = "no_worker_for_model" // the workers that have the model are not connected
	CodeWorkerNotFound   = "worker_not_found"    // X-Svc-Worker-Id names no worker of the organisation
	CodeWorkerOffline    = "worker_offline"      // the pinned worker is not connected
	CodeWorkerDraining   = "worker_draining"     // the pinned worker is shutting down
	CodeApprovalPending  = "approval_pending"    // the workers that could serve it await the organisation's approval
	CodeWrongEndpoint    = "wrong_endpoint"      // the model does not do what the endpoint asks
	CodeModelIncomplete  = "model_incomplete"    // the model is not fully installed on the workers serving it
	CodeWorkerLost       = "worker_lost"         // the worker went away while handling the request
	CodeBadWorkerReply   = "bad_worker_reply"    // the worker's answer is not one the gateway can use
	CodeTimeout          = "timeout"             // the request ran longer than it may
	CodeNotHome          = "not_home"            // this replica of a cluster does not serve the organisation; its home does
	CodeRateLimited      = "rate_limited"        // the organisation is over its limit of requests a minute
	CodeShuttingDown     = "shutting_down"       // the gateway stopped before the request was done
	// CodeEngineUnreachable is a worker's failure to connect to its
	// engine at all: nothing listens at the engine's address.
	CodeEngineUnreachable = "engine_unreachable"
)

// Error is an error with everything needed to answer it over HTTP. Domain
// packages return it for failures the caller must see, naming their Kind;
// the status follows from the kind alone (see Kind.Status). Anything else
// is answered as KindInternal by the server.
type Error struct {
	Kind    Kind
	Type    string // defaults from Kind when empty
	Code    string // machine-readable code; also sent as X-Svc-Error-Code when CodeHeader is set
	Param   string
	Message string
	// Fields lists the validation failures of a KindValidation.
	Fields []FieldError
	// RetryAfter is sent as the Retry-After header on 429 and 503.
	RetryAfter time.Duration
	// CodeHeader sends Code in the X-Svc-Error-Code header as well.
	CodeHeader bool
	// Envelope sends the envelope beside a string detail wherever the
	// error is answered, as a compatible route does, and never nested: for
	// an error whose type the contract promises outside the compatible and
	// private-inference routes.
	Envelope bool
	// QueueDepth is how many requests were already waiting when a
	// KindCapacity was given (X-Svc-Queue-Depth).
	QueueDepth int
	// Sealed, when set, is the body to answer with instead of one the
	// gateway renders: a worker's own failure of a private request,
	// sealed to the client, which alone can read it (e2ee.ContentType).
	Sealed []byte
	Err    error
	// relayed is the status of a worker's failed result, for KindRelayed.
	relayed int
}

// FieldError is one entry of a 422's errors list.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

// Field error types.
const (
	FieldMissing      = "missing"
	FieldInvalid      = "value_error"
	FieldWrongType    = "type_error"
	FieldEnum         = "enum"
	FieldOutOfRange   = "out_of_range"
	FieldTooLong      = "too_long"
	FieldUnknown      = "extra_forbidden"
	FieldDuplicate    = "duplicate"
	FieldNotSupported = "not_supported"
	FieldNotAllowed   = "not_allowed"
)

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorOf is the answer owed for err: the *Error it carries, a timeout for
// a deadline, or else an internal error that keeps err as its cause, to be
// logged and never sent.
func ErrorOf(err error) *Error {
	// Most errors are an *Error itself, as every refusal's is: errors.As's
	// reflection would cost them 150 ns and an allocation.
	if ae, ok := err.(*Error); ok {
		return ae
	}
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindTimeout, Message: "The request timed out", Err: err}
	default:
		return &Error{Kind: KindInternal, Err: err, Message: "Internal server error; retry once"}
	}
}

// HTTPStatus is the status e is answered with: its kind's, or for
// KindRelayed the worker's own.
func (e *Error) HTTPStatus() int {
	if e.Kind == KindRelayed && e.relayed != 0 {
		return e.relayed
	}
	return e.Kind.Status()
}

// ErrorType returns the type to send: Type, else its kind's.
func (e *Error) ErrorType() string {
	switch {
	case e.Type != "":
		return e.Type
	case e.Kind == KindRelayed && e.relayed != 0:
		return TypeForStatus(e.relayed)
	}
	return e.Kind.answer().typ
}

// Nested reports whether the error travels in the private-inference shape,
// where detail is an object holding the envelope.
func (e *Error) Nested() bool {
	if e.Envelope {
		return false
	}
	switch e.ErrorType() {
	case TypeE2ERequired, TypePlanRequired, TypeInvalidEncryptedRequest:
		return true
	}
	// The contract lists it among the private-inference errors, whose
	// shape it takes; its type is the 503's own.
	return e.Code == CodeNoPrivateInferenceWorker
}

// ServerFault reports whether the failure is the service's or a worker's
// rather than the request's: its status is 5xx.
func (e *Error) ServerFault() bool { return e.HTTPStatus() >= 500 }

// Relayed is a worker's failed result, answered with the worker's own
// status: the one status that does not come from Kind's table, because
// the engine behind the worker chose it. A status that is no failure is
// one the gateway cannot use: 502.
func Relayed(status int, typ, code, msg string) *Error {
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	return &Error{Kind: KindRelayed, relayed: status, Type: typ, Code: code, Message: msg}
}

// TypeForStatus is the error type of a status, for a result that names
// none.
func TypeForStatus(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return TypeAuthentication
	case status == http.StatusForbidden:
		return TypePermission
	case status == http.StatusNotFound:
		return TypeNotFound
	case status == http.StatusConflict:
		return TypeConflict
	case status == http.StatusTooManyRequests:
		return TypeRateLimit
	case status == http.StatusNotImplemented, status == http.StatusHTTPVersionNotSupported:
		return TypeNotSupported
	case status == http.StatusBadGateway:
		return TypeUpstream
	case status == http.StatusServiceUnavailable:
		return TypeServiceUnavailable
	case status == http.StatusGatewayTimeout:
		return TypeTimeout
	case status == http.StatusInsufficientStorage:
		return TypeInsufficientMemory
	case status >= 500:
		return TypeServer
	default:
		return TypeInvalidRequest
	}
}

// Errorf builds an Error of kind k with a formatted message.
func Errorf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// BadRequest is a KindInvalidRequest.
func BadRequest(format string, args ...any) *Error {
	return Errorf(KindInvalidRequest, format, args...)
}

// NotFound is a KindNotFound.
func NotFound(format string, args ...any) *Error {
	return Errorf(KindNotFound, format, args...)
}

// Forbidden is a KindForbidden.
func Forbidden(format string, args ...any) *Error {
	return Errorf(KindForbidden, format, args...)
}

// Conflict is a KindConflict.
func Conflict(format string, args ...any) *Error {
	return Errorf(KindConflict, format, args...)
}

// NotImplemented is a KindNotImplemented, for capabilities the service
// does not offer yet.
func NotImplemented(format string, args ...any) *Error {
	return Errorf(KindNotImplemented, format, args...)
}

// PlanRequired is a KindPlanRequired, for a feature outside the
// organisation's plan.
func PlanRequired(format string, args ...any) *Error {
	return Errorf(KindPlanRequired, format, args...)
}

// Invalid is a KindValidation listing every field that failed validation.
func Invalid(fields ...FieldError) *Error {
	return &Error{Kind: KindValidation, Message: summarize(fields), Fields: fields}
}

func summarize(fields []FieldError) string {
	switch len(fields) {
	case 0:
		return "Invalid request"
	case 1:
		return "Invalid request: " + fields[0].Field + ": " + fields[0].Message
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Invalid request: %d fields failed validation: ", len(fields))
	for i, f := range fields {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Message)
	}
	return b.String()
}

// Validator collects field errors; Err returns nil when there are none.
type Validator struct {
	fields []FieldError
}

// Add records a failure of field.
func (v *Validator) Add(field, typ, format string, args ...any) {
	v.fields = append(v.fields, FieldError{Field: field, Type: typ, Message: fmt.Sprintf(format, args...)})
}

// AddAt records a failure of the value at p, whose path is spelled out
// only here: a check that passes builds none (see Path).
func (v *Validator) AddAt(p *Path, typ, format string, args ...any) {
	v.Add(p.String(), typ, format, args...)
}

// Unique reports whether name, the i-th of list's, is the first of its
// name, recording it in seen; a repeat is a failure at p naming the first.
func (v *Validator) Unique(seen map[string]int, p *Path, list, name string, i int) bool {
	if first, dup := seen[name]; dup {
		v.AddAt(p, FieldInvalid, "must be unique: %s.%d has this name too", list, first)
		return false
	}
	seen[name] = i
	return true
}

// Err is the KindValidation for the collected failures, or nil.
func (v *Validator) Err() error {
	if len(v.fields) == 0 {
		return nil
	}
	return Invalid(v.fields...)
}

// Body is the body e is answered with: validation (errors[] beside
// the envelope), nested private-inference, the compatible envelope beside
// detail, or detail alone.
func (e *Error) Body(compatible bool) Body {
	payload := &ErrorPayload{Message: e.Message, Type: e.ErrorType()}
	if e.Code != "" {
		payload.Code = &e.Code
	}
	if e.Param != "" {
		payload.Param = &e.Param
	}
	switch {
	case len(e.Fields) > 0:
		if payload.Param == nil {
			payload.Param = &e.Fields[0].Field
		}
		return Body{Detail: e.Message, Error: payload, Errors: e.Fields}
	case e.Nested():
		return Body{Detail: map[string]any{"error": payload}}
	case compatible || e.Envelope:
		return Body{Detail: e.Message, Error: payload}
	default:
		return Body{Detail: e.Message}
	}
}

// Body is what every error response decodes into, whatever its shape: plain
// ({"detail": "..."}), compatible ({"error": {...}} beside detail), nested
// private-inference ({"detail": {"error": {...}}}) or validation (errors[]).
type Body struct {
	Detail any           `json:"detail,omitempty"`
	Error  *ErrorPayload `json:"error,omitempty"`
	Errors []FieldError  `json:"errors,omitempty"`
}

// ErrorPayload is the compatible error envelope.
type ErrorPayload struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    *string `json:"code"`
	Param   *string `json:"param"`
}

// Message reads a body the way the spec tells clients to: error.message,
// then detail.error.message, then detail when it is a string.
func (b *Body) Message() string {
	if b.Error != nil && b.Error.Message != "" {
		return b.Error.Message
	}
	switch d := b.Detail.(type) {
	case string:
		return d
	case map[string]any:
		if inner, ok := d["error"].(map[string]any); ok {
			if m, ok := inner["message"].(string); ok {
				return m
			}
		}
	}
	return ""
}

// ErrorType returns error.type, else detail.error.type, else "".
func (b *Body) ErrorType() string {
	if b.Error != nil && b.Error.Type != "" {
		return b.Error.Type
	}
	if d, ok := b.Detail.(map[string]any); ok {
		if inner, ok := d["error"].(map[string]any); ok {
			if t, ok := inner["type"].(string); ok {
				return t
			}
		}
	}
	return ""
}

// RetrySeconds is a wait in whole seconds, rounded up and at least one:
// what a Retry-After header, a welcome's retry_after_s and the messages
// that quote them say.
func RetrySeconds(wait time.Duration) int {
	return max(1, int((wait+time.Second-1)/time.Second))
}
