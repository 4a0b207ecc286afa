package moderation

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Every failure a moderation check can meet ends as a row of the spec's
// moderation error table.
func TestShapeError(t *testing.T) {
	tests := []struct {
		name   string
		in     error
		status int
		code   string
		retry  bool
	}{
		{"no worker has the model", &api.Error{Kind: api.KindNotFound, Code: api.CodeModelNotFound}, 409, api.CodeModerationUnavailable, false},
		{"no worker online", &api.Error{Kind: api.KindUnavailable, Code: api.CodeNoWorkerOnline, RetryAfter: 5 * time.Second}, 409, api.CodeModerationUnavailable, false},
		{"workers offline", &api.Error{Kind: api.KindUnavailable, Code: api.CodeNoWorkerForModel}, 409, api.CodeModerationUnavailable, false},
		{"the pinned worker offline", &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerOffline, RetryAfter: 5 * time.Second}, 409, api.CodeModerationUnavailable, false},
		{"workers await approval", &api.Error{Kind: api.KindUnavailable, Code: api.CodeApprovalPending, RetryAfter: 30 * time.Second}, 409, api.CodeModerationUnavailable, false},
		{"model still installing", &api.Error{Kind: api.KindConflict, Code: api.CodeModelIncomplete}, 409, api.CodeModerationUnavailable, false},
		{"a worker without the model", api.Relayed(404, api.TypeNotFound, api.CodeModelNotFound, "missing"), 409, api.CodeModerationUnavailable, false},
		{"too old", &api.Error{Kind: api.KindConflict, Code: api.CodeModerationUnavailable}, 409, api.CodeModerationUnavailable, false},
		{"busy", &api.Error{Kind: api.KindCapacity, Code: api.CodeCapacityExceeded, RetryAfter: 3 * time.Second}, 429, api.CodeModerationCapacity, true},
		{"held back", &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkersUnhealthy, RetryAfter: 2 * time.Second}, 503, api.CodeModerationUnavailable, true},
		{"worker lost", &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost}, 503, api.CodeModerationUnavailable, true},
		{"engine failed", api.Relayed(502, "", "", "engine down"), 503, api.CodeModerationUnavailable, true},
		{"worker cannot run it", &api.Error{Kind: api.KindNotImplemented, Message: "no"}, 409, api.CodeModerationUnavailable, false},
		{"model too large", &api.Error{Kind: api.KindInsufficientMemory, Message: "no room"}, 409, api.CodeModerationUnavailable, false},
		{"timed out", &api.Error{Kind: api.KindTimeout}, 503, api.CodeModerationUnavailable, true},
		{"bad verdict", api.Relayed(502, "", api.CodeModerationInvalidVerdict, "neither"), 502, api.CodeModerationInvalidVerdict, false},
		{"client left", &api.Error{Kind: api.KindClientGone}, 499, "", false},
		{"refused image", api.Relayed(400, "", api.CodeRemoteImageRefused, "refused"), 400, api.CodeRemoteImageRefused, false},
		{"an image that could not be fetched", api.Relayed(502, api.TypeUpstream, api.CodeRemoteImageUnavailable, "fetch image: the server answered 404"), 502, api.CodeRemoteImageUnavailable, false},
		{"a busy worker", api.Relayed(429, api.TypeRateLimit, "", "slow down"), 429, api.CodeModerationCapacity, true},
		{"a worker's refusal", api.Relayed(400, api.TypeInvalidRequest, "", "too long"), 409, api.CodeModerationUnavailable, false},
		{"a worker's conflict", api.Relayed(409, api.TypeConflict, "", "busy loading"), 409, api.CodeModerationUnavailable, false},
		{"a worker's 422", api.Relayed(422, api.TypeInvalidRequest, "", "bad"), 409, api.CodeModerationUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ae *api.Error
			if !errors.As(ShapeError(tt.in), &ae) || ae.HTTPStatus() != tt.status || ae.Code != tt.code || (ae.RetryAfter > 0) != tt.retry {
				t.Fatalf("got %+v, want %d %s", ae, tt.status, tt.code)
			}
			if ae.ErrorType() != api.TypeForStatus(tt.status) {
				t.Fatalf("type %s for a %d", ae.ErrorType(), tt.status)
			}
			if ae.Code != "" && !ae.CodeHeader {
				t.Fatal("the code is not sent as X-Svc-Error-Code")
			}
		})
	}
}

// A check refused because its workers are held back never reached one:
// its message does not say a worker failed it.
func TestShapeErrorHeldBack(t *testing.T) {
	var ae *api.Error
	in := &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkersUnhealthy, RetryAfter: 2 * time.Second, Message: "held back"}
	if !errors.As(ShapeError(in), &ae) || strings.Contains(ae.Message, "failed on the worker") || !strings.Contains(ae.Message, "held back") {
		t.Fatalf("held back: %+v", ae)
	}
}

// A worker's failed result is a row of the table by its status: one that
// cannot run the check at all (501) or has no memory for the model (507)
// is a lasting conflict, not worth a retry, and says so; any other 5xx is
// a failure worth a retry.
func TestShapeErrorWorkerStatus(t *testing.T) {
	tests := []struct {
		status int
		typ    string
		msg    string
		want   int
		retry  bool
		says   string
	}{
		{501, api.TypeNotSupported, "this feature is not supported", 409, false, "retrying will not help"},
		{507, api.TypeInsufficientMemory, "CUDA out of memory", 409, false, "retrying will not help"},
		{500, api.TypeServer, "engine crashed", 503, true, "retry"},
		{502, api.TypeUpstream, "bad gateway", 503, true, "retry"},
		{503, api.TypeServiceUnavailable, "engine busy", 503, true, "retry"},
		{504, api.TypeTimeout, "engine timed out", 503, true, "retry"},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			var ae *api.Error
			if !errors.As(ShapeError(api.Relayed(tt.status, tt.typ, "", tt.msg)), &ae) {
				t.Fatal("not an *api.Error")
			}
			if ae.HTTPStatus() != tt.want || ae.Code != api.CodeModerationUnavailable || !ae.CodeHeader {
				t.Fatalf("got %d %q (header %v), want %d %s", ae.HTTPStatus(), ae.Code, ae.CodeHeader, tt.want, api.CodeModerationUnavailable)
			}
			if (ae.RetryAfter > 0) != tt.retry {
				t.Fatalf("Retry-After %v on a %d", ae.RetryAfter, tt.want)
			}
			if ae.ErrorType() != api.TypeForStatus(tt.want) || ae.Param != "model" {
				t.Fatalf("type %q, param %q on a %d", ae.ErrorType(), ae.Param, tt.want)
			}
			if !strings.Contains(ae.Message, tt.msg) || !strings.Contains(ae.Message, tt.says) {
				t.Fatalf("message %q does not say what the worker said (%q) and %q", ae.Message, tt.msg, tt.says)
			}
			if !tt.retry && strings.Contains(ae.Message, "; retry") {
				t.Fatalf("message %q tells the client to retry a lasting failure", ae.Message)
			}
		})
	}
}

// An input over the guard model's context window is the client's to
// shorten: the spec's 413, as embeddings answer it, naming the input,
// whatever status the engine or an older worker gave it.
func TestShapeErrorInputTooLong(t *testing.T) {
	for _, in := range []error{
		api.Relayed(400, "context_length_exceeded", "context_length_exceeded", "your messages resulted in 50213 tokens"),
		api.Relayed(413, "context_length_exceeded", "", "your messages resulted in 50213 tokens"),
	} {
		var ae *api.Error
		if !errors.As(ShapeError(in), &ae) || ae.HTTPStatus() != 413 || ae.Code != "context_length_exceeded" || !ae.CodeHeader ||
			ae.Param != "input" || ae.RetryAfter != 0 || !strings.Contains(ae.Message, "shorten") || !strings.Contains(ae.Message, "50213 tokens") {
			t.Fatalf("ShapeError(%v) = %+v", in, ae)
		}
	}
}
