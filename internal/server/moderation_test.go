package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Every failure a moderation check can meet ends as a row of the spec's
// moderation error table.
func TestShapeModeration(t *testing.T) {
	tests := []struct {
		name   string
		in     error
		status int
		code   string
		retry  bool
	}{
		{"no worker has the model", &api.Error{Status: 404, Code: "model_not_found"}, 409, api.CodeModerationUnavailable, false},
		{"no worker online", &api.Error{Status: 503, Code: "no_worker_online", RetryAfter: 5 * time.Second}, 409, api.CodeModerationUnavailable, false},
		{"workers offline", &api.Error{Status: 503, Code: "no_worker_for_model"}, 409, api.CodeModerationUnavailable, false},
		{"too old", &api.Error{Status: 409, Code: api.CodeModerationUnavailable}, 409, api.CodeModerationUnavailable, false},
		{"busy", &api.Error{Status: 429, Code: "capacity_exceeded", Capacity: true, RetryAfter: 3 * time.Second}, 429, api.CodeModerationCapacity, true},
		{"held back", &api.Error{Status: 503, Code: "workers_unhealthy", RetryAfter: 2 * time.Second}, 503, api.CodeModerationUnavailable, true},
		{"worker lost", &api.Error{Status: 503, Code: "worker_lost"}, 503, api.CodeModerationUnavailable, true},
		{"engine failed", &api.Error{Status: 502, Code: ""}, 503, api.CodeModerationUnavailable, true},
		{"timed out", &api.Error{Status: 504}, 503, api.CodeModerationUnavailable, true},
		{"bad verdict", &api.Error{Status: 502, Code: api.CodeModerationInvalidVerdict}, 502, api.CodeModerationInvalidVerdict, false},
		{"client left", &api.Error{Status: 499}, 499, "", false},
		{"refused image", &api.Error{Status: 400, Code: "remote_image_refused"}, 400, "remote_image_refused", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ae *api.Error
			if !errors.As(shapeModeration(tt.in), &ae) || ae.Status != tt.status || ae.Code != tt.code || (ae.RetryAfter > 0) != tt.retry {
				t.Fatalf("got %+v, want %d %s", ae, tt.status, tt.code)
			}
			if ae.Code != "" && !ae.CodeHeader {
				t.Fatal("the code is not sent as X-Svc-Error-Code")
			}
		})
	}
}

func TestLateModerationBody(t *testing.T) {
	var b struct {
		Results []any `json:"results"`
		Detail  string
		Error   map[string]any
	}
	in := &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeModerationUnavailable, Message: "down", RetryAfter: 1500 * time.Millisecond}
	if err := json.Unmarshal(lateModerationBody(in), &b); err != nil {
		t.Fatal(err)
	}
	if b.Results != nil || b.Detail != "down" || b.Error["code"] != 503.0 || b.Error["moderation_code"] != "moderation_unavailable" || b.Error["retry_after"] != 2.0 {
		t.Fatalf("%+v", b)
	}
}
