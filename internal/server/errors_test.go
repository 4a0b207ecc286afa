package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
)

func TestErrorBodyShapes(t *testing.T) {
	tests := []struct {
		name       string
		err        *api.Error
		compatible bool
		want       string
	}{
		{
			name: "plain",
			err:  api.NotFound("no such worker"),
			want: `{"detail":"no such worker"}`,
		},
		{
			name:       "compatible envelope beside detail",
			err:        &api.Error{Kind: api.KindUnauthenticated, Code: "invalid_api_key", Message: "Invalid API key"},
			compatible: true,
			want:       `{"detail":"Invalid API key","error":{"message":"Invalid API key","type":"authentication_error","code":"invalid_api_key","param":null}}`,
		},
		{
			name:       "nested private-inference shape, whatever the route",
			err:        &api.Error{Kind: api.KindForbidden, Type: api.TypeE2ERequired, Message: "encrypt"},
			compatible: true,
			want:       `{"detail":{"error":{"message":"encrypt","type":"e2e_required","code":null,"param":null}}}`,
		},
		{
			name: "plan_required is nested on plain routes too",
			err:  api.PlanRequired("upgrade"),
			want: `{"detail":{"error":{"message":"upgrade","type":"plan_required","code":null,"param":null}}}`,
		},
		{
			name: "validation",
			err: api.Invalid(
				api.FieldError{Field: "messages.0.role", Message: "one of system, user", Type: api.FieldEnum},
				api.FieldError{Field: "model", Message: "required", Type: api.FieldMissing}),
			want: `{"detail":"Invalid request: 2 fields failed validation: messages.0.role: one of system, user; model: required",` +
				`"error":{"message":"Invalid request: 2 fields failed validation: messages.0.role: one of system, user; model: required","type":"invalid_request_error","code":null,"param":"messages.0.role"},` +
				`"errors":[{"field":"messages.0.role","message":"one of system, user","type":"enum"},{"field":"model","message":"required","type":"missing"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(errorBody(tt.err, tt.compatible))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("body\n got %s\nwant %s", got, tt.want)
			}
			// Whatever the shape, a client reading it the spec's way finds the message.
			var b api.Body
			if err := json.Unmarshal(got, &b); err != nil {
				t.Fatal(err)
			}
			if b.Message() == "" {
				t.Fatal("no message found in body")
			}
		})
	}
}

func TestToAPIError(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	c := &call{ctx: &fasthttp.RequestCtx{}, requestID: "rid-1"}
	tests := []struct {
		name   string
		err    error
		status int
		leak   string // text that must not reach the client
	}{
		{"api error passes through", api.Conflict("exists"), http.StatusConflict, ""},
		{"wrapped api error", fmt.Errorf("create org: %w", api.NotFound("gone")), http.StatusNotFound, ""},
		{"deadline", fmt.Errorf("call worker: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, ""},
		{"anything else is a 500 without internals", errors.New("open /var/lib/secret.db: permission denied"), http.StatusInternalServerError, "secret.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ae := s.toAPIError(c, tt.err)
			if ae.HTTPStatus() != tt.status {
				t.Fatalf("status = %d, want %d", ae.HTTPStatus(), tt.status)
			}
			if tt.leak != "" && strings.Contains(ae.Message, tt.leak) {
				t.Fatalf("message %q leaks %q", ae.Message, tt.leak)
			}
			if tt.status == 500 && !strings.Contains(ae.Message, "rid-1") {
				t.Fatalf("500 message %q does not quote the request id", ae.Message)
			}
		})
	}
}

func TestWriteErrorHeaders(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	var ctx fasthttp.RequestCtx
	c := &call{ctx: &ctx, route: &route{compatible: true}}
	s.writeError(c, &api.Error{Kind: api.KindCapacity, Code: "moderation_capacity", CodeHeader: true, RetryAfter: 1500 * time.Millisecond, QueueDepth: 3, Message: "busy"})
	if got := string(ctx.Response.Header.Peek("Retry-After")); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (rounded up)", got)
	}
	if got := string(ctx.Response.Header.Peek("X-Svc-Queue-Depth")); got != "3" {
		t.Errorf("X-Svc-Queue-Depth = %q, want 3", got)
	}
	if got := string(ctx.Response.Header.Peek("X-Svc-Error-Code")); got != "moderation_capacity" {
		t.Errorf("X-Svc-Error-Code = %q", got)
	}
	if ctx.Response.StatusCode() != 429 || string(ctx.Response.Header.ContentType()) != "application/json" {
		t.Errorf("status %d, content type %s", ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
	}
}
