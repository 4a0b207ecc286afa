package openai

import (
	"context"
	"net"
	"net/http"
	"reflect"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

func TestNewBaseURL(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "http://127.0.0.1:8000", want: "http://127.0.0.1:8000"},
		{in: "http://127.0.0.1:8000/", want: "http://127.0.0.1:8000"},
		{in: "http://127.0.0.1:8000/v1", want: "http://127.0.0.1:8000"},
		{in: "http://127.0.0.1:8000/v1/", want: "http://127.0.0.1:8000"},
		{in: " https://gpu.lan/llm/v1 ", want: "https://gpu.lan/llm"},
		{in: "http://host:8080/v10", want: "http://host:8080/v10"},
		{in: "", wantErr: true},
		{in: "localhost:8000", wantErr: true},
		{in: "ftp://host/", wantErr: true},
		{in: "http://", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := New(Config{BaseURL: tt.in})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("New(%q) = %v, want error", tt.in, e.base)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.base != tt.want {
				t.Fatalf("base = %q, want %q", e.base, tt.want)
			}
			if got := e.Info(); got != (api.EngineInfo{Kind: "openai", URL: tt.want}) {
				t.Fatalf("Info = %+v", got)
			}
			if e.Kind() != "openai" {
				t.Fatalf("Kind = %q", e.Kind())
			}
		})
	}
}

func TestBaseURLWithAndWithoutV1(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/models":           jsonHandler(200, vllmModels),
		"/v1/chat/completions": jsonHandler(200, vllmPlainCompletion),
	})
	for _, base := range []string{f.URL, f.URL + "/", f.URL + "/v1", f.URL + "/v1/"} {
		e := newEngine(t, base)
		if _, err := e.Models(context.Background()); err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		var s sink
		wantStatus(t, e.Serve(context.Background(), chatReq(false, `{"model":"m","messages":[]}`), &s), 200)
	}
	for _, r := range f.requests() {
		if r.Path != "/v1/models" && r.Path != "/v1/chat/completions" {
			t.Fatalf("unexpected path %q", r.Path)
		}
	}
}

func TestAPIKeyHeader(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"/v1/models":           jsonHandler(200, llamaModels),
		"/props":               jsonHandler(200, llamaProps),
		"/v1/chat/completions": sseHandler(0, append(frames(llamaContent, llamaFinish), done)...),
		"/v1/embeddings":       jsonHandler(200, embeddingsBody),
	})
	run := func(e *Engine) {
		ctx := context.Background()
		if _, err := e.Models(ctx); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, e.Serve(ctx, chatReq(true, chatRequest), &sink{}), 200)
		wantStatus(t, e.Serve(ctx, &engine.Request{Kind: api.KindEmbeddings, Body: []byte(`{"input":"x"}`)}, &sink{}), 200)
	}

	e, err := New(Config{BaseURL: f.URL, APIKey: "sk-local"})
	if err != nil {
		t.Fatal(err)
	}
	run(e)
	reqs := f.requests()
	if len(reqs) != 4 {
		t.Fatalf("got %d requests, want 4 (models, props, chat, embeddings)", len(reqs))
	}
	for _, r := range reqs {
		if got := r.Header.Get("Authorization"); got != "Bearer sk-local" {
			t.Errorf("%s %s: Authorization = %q", r.Method, r.Path, got)
		}
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type = %q", r.Path, r.Header.Get("Content-Type"))
		}
	}

	run(newEngine(t, f.URL))
	for _, r := range f.requests()[4:] {
		if got, ok := r.Header["Authorization"]; ok {
			t.Errorf("%s: Authorization sent without a key: %q", r.Path, got)
		}
	}
}

func TestEngineDownIsUnreachable(t *testing.T) {
	// A port nothing listens on: bind, then close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := newEngine(t, "http://"+addr)
	reqs := map[string]*engine.Request{
		"stream":     chatReq(true, chatRequest),
		"non-stream": chatReq(false, `{"model":"m"}`),
		"embeddings": {Kind: api.KindEmbeddings, Body: []byte(`{"input":"x"}`)},
		"completion": completionReq("m", guardRequest),
	}
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) {
			var s sink
			r := e.Serve(context.Background(), req, &s)
			wantStatus(t, r, http.StatusBadGateway)
			if !r.Retryable || r.Error.Type != api.TypeUpstream || !contains(r.Error.Message, "unreachable") {
				t.Fatalf("got %+v retryable=%v", *r.Error, r.Retryable)
			}
			if r.Error.Code != api.CodeEngineUnreachable || contains(r.Error.Message, addr) {
				t.Fatalf("got %+v, want the code %s and no address", *r.Error, api.CodeEngineUnreachable)
			}
			if len(s.got()) != 0 || s.body != nil {
				t.Fatal("sink written")
			}
		})
	}
	if _, err := e.Models(context.Background()); err == nil || !engine.Refused(err) {
		t.Fatalf("Models against a closed port: %v, want a refusal", err)
	}
}

func TestUnknownKind(t *testing.T) {
	e := newEngine(t, "http://127.0.0.1:1")
	r := e.Serve(context.Background(), &engine.Request{Kind: "moderation"}, &sink{})
	wantStatus(t, r, http.StatusNotImplemented)
	if r.Error.Type != api.TypeNotSupported {
		t.Fatalf("type = %q", r.Error.Type)
	}
}

func TestCustomDial(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"/v1/models": jsonHandler(200, vllmModels)})
	var called []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		called = append(called, network+" "+addr)
		var d net.Dialer
		return d.DialContext(ctx, network, f.Listener.Addr().String())
	}
	e, err := New(Config{BaseURL: "http://engine.invalid:8000", Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if _, err := e.Models(context.Background()); err != nil || !reflect.DeepEqual(called, []string{"tcp engine.invalid:8000"}) {
		t.Fatalf("err=%v dialled %q", err, called)
	}
	if got := f.last(t, "/v1/models").Header; got.Get("Accept") != "application/json" {
		t.Fatalf("headers %v", got)
	}
}
