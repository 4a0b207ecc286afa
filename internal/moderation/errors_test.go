package moderation

import (
	"errors"
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
		{"a worker without the model", api.Relayed(404, api.TypeNotFound, api.CodeModelNotFound, "missing"), 409, api.CodeModerationUnavailable, false},
		{"too old", &api.Error{Kind: api.KindConflict, Code: api.CodeModerationUnavailable}, 409, api.CodeModerationUnavailable, false},
		{"busy", &api.Error{Kind: api.KindCapacity, Code: api.CodeCapacityExceeded, RetryAfter: 3 * time.Second}, 429, api.CodeModerationCapacity, true},
		{"held back", &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkersUnhealthy, RetryAfter: 2 * time.Second}, 503, api.CodeModerationUnavailable, true},
		{"worker lost", &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost}, 503, api.CodeModerationUnavailable, true},
		{"engine failed", api.Relayed(502, "", "", "engine down"), 503, api.CodeModerationUnavailable, true},
		{"timed out", &api.Error{Kind: api.KindTimeout}, 503, api.CodeModerationUnavailable, true},
		{"bad verdict", api.Relayed(502, "", api.CodeModerationInvalidVerdict, "neither"), 502, api.CodeModerationInvalidVerdict, false},
		{"client left", &api.Error{Kind: api.KindClientGone}, 499, "", false},
		{"refused image", api.Relayed(400, "", api.CodeRemoteImageRefused, "refused"), 400, api.CodeRemoteImageRefused, false},
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
