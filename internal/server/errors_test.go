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
			f := formPlain
			if tt.compatible {
				f = formCompatible
			}
			var h fasthttp.ResponseHeader
			_, got := renderError(&h, tt.err, f)
			if string(got) != tt.want+"\n" {
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

// The SDKs retry 408, 409, 429 and 5xx unless told not to: a failure the
// spec says a retry does not help says so.
func TestShouldRetryHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *api.Error
		want string // X-Should-Retry; "" for none
	}{
		{"capacity", &api.Error{Kind: api.KindCapacity, RetryAfter: time.Second}, ""},
		{"a worker lost", &api.Error{Kind: api.KindUnavailable}, ""},
		{"no usable answer", api.Relayed(http.StatusBadGateway, "", "", "lost"), ""},
		{"unexpected", &api.Error{Kind: api.KindInternal}, ""},
		{"a lasting limitation", api.Relayed(http.StatusNotImplemented, "", "", "no vision"), "false"},
		{"too large for the GPU", api.Relayed(http.StatusInsufficientStorage, "", "", "out of memory"), "false"},
		{"not installed", api.Conflict("downloading"), "false"},
		{"moderation unavailable", &api.Error{Kind: api.KindConflict, Code: api.CodeModerationUnavailable}, "false"},
		{"moderation's verdict", api.Relayed(http.StatusBadGateway, "", api.CodeModerationInvalidVerdict, "neither"), "false"},
		{"validation", api.BadRequest("bad"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []errorForm{formPlain, formCompatible, formAnthropic} {
				var h fasthttp.ResponseHeader
				renderError(&h, tc.err, f)
				if got := string(h.Peek("X-Should-Retry")); got != tc.want {
					t.Fatalf("form %d: X-Should-Retry %q, want %q", f, got, tc.want)
				}
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

// The Messages API's errors are in Anthropic's envelope, error types as
// Anthropic names them for the status, with the gateway's code, failed
// fields and headers kept.
func TestAnthropicErrors(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	tests := []struct {
		err     error
		status  int
		typ     string
		code    string
		headers map[string]string
	}{
		{api.Invalid(api.FieldError{Field: "messages.0.content.0.type", Type: api.FieldEnum, Message: "one of text, image"}), 422, "invalid_request_error", "invalid_request_error", nil},
		{api.BadRequest("Malformed JSON"), 400, "invalid_request_error", "invalid_request_error", nil},
		{&api.Error{Kind: api.KindNotFound, Code: api.CodeModelNotFound, Message: "no such model"}, 404, "not_found_error", "model_not_found", nil},
		{&api.Error{Kind: api.KindCapacity, Code: api.CodeCapacityExceeded, RetryAfter: time.Second, QueueDepth: 2, Message: "busy"}, 429, "rate_limit_error", "capacity_exceeded",
			map[string]string{"Retry-After": "1", "X-Svc-Queue-Depth": "2"}},
		{&api.Error{Kind: api.KindUnavailable, Code: api.CodeNoWorkerOnline, RetryAfter: 5 * time.Second, Message: "no worker"}, 503, "overloaded_error", "no_worker_online",
			map[string]string{"Retry-After": "5"}},
		{&api.Error{Kind: api.KindInternal, Message: "boom"}, 500, "api_error", "server_error", nil},
	}
	for _, tt := range tests {
		var ctx fasthttp.RequestCtx
		s.writeError(&call{ctx: &ctx, route: &route{compatible: true, anthropic: true}}, tt.err)
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message, Code, Param string
			} `json:"error"`
			Errors []api.FieldError `json:"errors"`
			Detail string           `json:"detail"`
		}
		if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
			t.Fatalf("%v: %s", err, ctx.Response.Body())
		}
		if ctx.Response.StatusCode() != tt.status || body.Type != "error" || body.Error.Type != tt.typ || body.Error.Code != tt.code ||
			body.Error.Message == "" || body.Detail != body.Error.Message {
			t.Errorf("%v: %d %s", tt.err, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if tt.status == 422 && (len(body.Errors) != 1 || body.Error.Param != "messages.0.content.0.type") {
			t.Errorf("validation: %s", ctx.Response.Body())
		}
		for k, v := range tt.headers {
			if got := string(ctx.Response.Header.Peek(k)); got != v {
				t.Errorf("%v: %s = %q, want %q", tt.err, k, got, v)
			}
		}
	}
}

// A failure after a reply started is part of its body: the status and
// headers it would have had ride in the error object.
func TestInReplyErrorForms(t *testing.T) {
	busy := &api.Error{Kind: api.KindCapacity, Code: api.CodeCapacityExceeded, Message: "Every worker serving m<1> is busy",
		RetryAfter: 2500 * time.Millisecond, QueueDepth: 4}
	tests := []struct {
		name string
		err  error
		form errorForm
		want string
	}{
		{"late reply", busy, formLate,
			`{"detail":"Every worker serving m\u003c1\u003e is busy","error":{"code":"capacity_exceeded","message":"Every worker serving m\u003c1\u003e is busy","queue_depth":4,"retry_after":3,"status":429,"type":"rate_limit_exceeded"}}`},
		{"stream event", busy, formStreamEvent,
			`{"error":{"code":"capacity_exceeded","message":"Every worker serving m\u003c1\u003e is busy","queue_depth":4,"retry_after":3,"status":429,"type":"rate_limit_exceeded"}}`},
		{"late moderation", busy, formLateModeration,
			`{"detail":"Every worker serving m\u003c1\u003e is busy","error":{"code":429,"message":"Every worker serving m\u003c1\u003e is busy","moderation_code":"capacity_exceeded","retry_after":3,"type":"rate_limit_exceeded"}}`},
		{"a worker's status, no code", api.Relayed(507, "", "", "does not fit"), formLate,
			`{"detail":"does not fit","error":{"code":"507","message":"does not fit","status":507,"type":"insufficient_memory_error"}}`},
		{"an internal error keeps its cause to itself", errors.New("open /var/lib/secret.db"), formStreamEvent,
			`{"error":{"code":"500","message":"Internal server error; retry once","status":500,"type":"server_error"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(inReplyError(tt.err, tt.form)); got != tt.want {
				t.Fatalf("body\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// A request refused before its route ran is answered like any other, in
// the compatible shape, with a request id of its own.
func TestWriteEarly(t *testing.T) {
	var ctx fasthttp.RequestCtx
	writeEarly(&ctx, &api.Error{Kind: api.KindUnauthenticated, Code: "missing_api_key", Message: "Missing API key"})
	if ctx.Response.StatusCode() != 401 || len(ctx.Response.Header.Peek("X-Request-Id")) == 0 ||
		string(ctx.Response.Header.Peek("WWW-Authenticate")) != `Bearer realm="svc"` {
		t.Fatalf("%s", ctx.Response.Header.String())
	}
	want := `{"detail":"Missing API key","error":{"message":"Missing API key","type":"authentication_error","code":"missing_api_key","param":null}}` + "\n"
	if got := string(ctx.Response.Body()); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	// A key sent and refused is named invalid, as RFC 6750 has it.
	var bad fasthttp.RequestCtx
	writeEarly(&bad, &api.Error{Kind: api.KindUnauthenticated, Code: "invalid_api_key", Message: "Invalid API key"})
	if got := string(bad.Response.Header.Peek("WWW-Authenticate")); got != `Bearer realm="svc", error="invalid_token"` {
		t.Fatalf("WWW-Authenticate for a refused key: %q", got)
	}
}

// FuzzResponseJSON holds the hand-written error bodies to encoding/json's
// encoding of the same body, every kind and form.
func FuzzResponseJSON(f *testing.F) {
	f.Add(uint8(api.KindCapacity), "Every worker serving sim-chat is busy", "", "", "", true, false)
	f.Add(uint8(api.KindCapacity), "busy <&> \u2028 \xff", "", "capacity", "", false, false)
	f.Add(uint8(api.KindNotFound), "no model \"x\"\n", "", "model_not_found", "model", true, false)
	f.Add(uint8(api.KindPlanRequired), "upgrade", "", "", "", true, false)
	f.Add(uint8(api.KindPlanRequired), "upgrade", "", "", "", false, false)
	f.Add(uint8(128+api.KindPlanRequired), "upgrade", "", "", "", false, false)
	f.Add(uint8(api.KindInvalidRequest), "bad", api.TypeE2ERequired, "", "", true, false)
	f.Add(uint8(api.KindValidation), "invalid", "", "", "", true, true)
	f.Add(uint8(api.KindInternal), "", "", "", "", true, false)
	f.Fuzz(func(t *testing.T, kind uint8, msg, typ, code, param string, compatible, fields bool) {
		ae := &api.Error{Kind: api.Kind(kind % uint8(api.KindRelayed+1)), Message: msg, Type: typ, Code: code, Param: param,
			Envelope: kind >= 128}
		if fields {
			ae.Fields = []api.FieldError{{Field: param, Message: msg, Type: api.FieldInvalid}}
		}
		want := encodeError(ae.Body(compatible), false)
		if got := responseJSON(ae, compatible); string(got) != string(want) {
			t.Fatalf("%+v, compatible %v:\n got %s\nwant %s", ae, compatible, got, want)
		}
	})
}
