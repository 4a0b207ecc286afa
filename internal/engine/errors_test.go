package engine

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestErrorResult(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		want      int
		typ       string
		msg       string
		retryable bool
	}{
		{"openai envelope", 400, `{"error":{"message":"bad temperature","type":"invalid_request_error","code":null}}`, 400, "invalid_request_error", "bad temperature", false},
		{"vllm flat", 404, `{"object":"error","message":"The model x does not exist.","type":"NotFoundError","code":404}`, 404, "not_found_error", "The model x does not exist.", false},
		{"llama.cpp context", 400, `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}`, 400, "context_length_exceeded", "the request exceeds the available context size", false},
		{"ollama plain", 500, `{"error":"llama runner process has terminated: cudaMalloc failed: out of memory"}`, 507, "insufficient_memory_error", "llama runner process has terminated: cudaMalloc failed: out of memory", false},
		{"ollama too big", 500, `{"error":"model requires more system memory (12.3 GiB) than is available (4.0 GiB)"}`, 507, "insufficient_memory_error", "model requires more system memory (12.3 GiB) than is available (4.0 GiB)", false},
		{"not supported", 501, `{"error":{"message":"embeddings are not supported","type":"not_supported_error"}}`, 501, "not_supported_error", "embeddings are not supported", false},
		{"server error", 500, `{"error":{"message":"boom","type":"server_error"}}`, 500, "server_error", "boom", true},
		{"unavailable", 503, `{"error":{"message":"Loading model","type":"unavailable_error","code":503}}`, 503, "upstream_error", "Loading model", true},
		{"vllm's own type", 400, `{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice","type":"BadRequestError","code":400}`, 400, "invalid_request_error", "\"auto\" tool choice requires --enable-auto-tool-choice", false},
		{"an engine's 429", 429, `{"error":{"message":"too many","type":"too_many_requests"}}`, 429, "rate_limit_exceeded", "too many", false},
		{"an engine's 429 without a type", 429, `{"error":"busy"}`, 429, "rate_limit_exceeded", "busy", false},
		{"an engine's 409 without a type", 409, `{"error":{"message":"loading"}}`, 409, api.TypeConflict, "loading", false},
		{"an engine's 401", 401, `{"error":{"message":"bad key","type":"AuthenticationError"}}`, 401, "authentication_error", "bad key", false},
		{"not json", 502, "Bad Gateway", 502, "upstream_error", "Bad Gateway", true},
		{"empty", 500, "", 500, "upstream_error", "Internal Server Error", true},
		{"a status of its own, empty", 550, "", 550, "server_error", "The engine answered status 550 and said nothing more", false},
		{"detail", 422, `{"detail":"field required"}`, 422, "invalid_request_error", "field required", false},
		{"a proxy's page", 502, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>", 502, "upstream_error",
			"an HTML page instead of the engine's error (a proxy in front of the engine?): 502 Bad Gateway", true},
		{"a page without a title", 503, "<!DOCTYPE html><html><body>down</body></html>", 503, "upstream_error",
			"an HTML page instead of the engine's error (a proxy in front of the engine?)", true},
		{"a long text", 500, strings.Repeat("x", 2000), 500, "upstream_error", strings.Repeat("x", 512) + "...", true},
		{"a page in a JSON error", 502, `{"error":{"message":"<html><head><title>Bad &amp; gone</title></head><body>x</body></html>"}}`, 502, "upstream_error",
			"an HTML page instead of the engine's error (a proxy in front of the engine?): Bad & gone", true},
		{"a long JSON error", 500, `{"error":{"message":"` + strings.Repeat("y", 3000) + `"}}`, 500, "upstream_error", strings.Repeat("y", 512) + "...", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ErrorResult(tt.status, []byte(tt.body))
			if r.Status != tt.want || r.Error.Type != tt.typ || r.Error.Message != tt.msg || r.Retryable != tt.retryable {
				t.Fatalf("got %d %+v retryable=%v", r.Status, *r.Error, r.Retryable)
			}
		})
	}
}

// An input over the model's limit is 413 on embeddings and rerank (too
// large: shorten or split) and 400 on a chat or text-completion prompt
// (too long for the context window), whatever status and wording the
// engine used; the type is context_length_exceeded and the engine's
// message and code are kept. Other failures keep their status whatever
// the kind.
func TestContextLengthByKind(t *testing.T) {
	engines := []struct {
		name   string
		status int
		body   string
		msg    string
		code   string
		tooBig bool // a context-length failure
	}{
		{"openai", 400, `{"error":{"message":"This model's maximum context length is 8192 tokens, however you requested 9000 tokens. Please reduce your prompt.","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`,
			"This model's maximum context length is 8192 tokens, however you requested 9000 tokens. Please reduce your prompt.", "context_length_exceeded", true},
		{"vllm flat", 400, `{"object":"error","message":"This model's maximum context length is 512 tokens. However, you requested 75000 tokens in the input for embedding generation. Please reduce the length of the input.","type":"BadRequestError","param":null,"code":400}`,
			"This model's maximum context length is 512 tokens. However, you requested 75000 tokens in the input for embedding generation. Please reduce the length of the input.", "400", true},
		{"vllm nested", 400, `{"error":{"message":"This model's maximum context length is 512 tokens. However, your request has 751 input tokens.","type":"BadRequestError","param":null,"code":400}}`,
			"This model's maximum context length is 512 tokens. However, your request has 751 input tokens.", "400", true},
		{"llama-server", 400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":751,"n_ctx":512}}`,
			"the request exceeds the available context size, try increasing it", "400", true},
		{"ollama", 400, `{"error":"input exceeds maximum context length"}`, "input exceeds maximum context length", "", true},
		{"ollama runner", 500, `{"error":"the input length exceeds the context length"}`, "the input length exceeds the context length", "", true},
		{"too many tokens", 413, `{"error":{"message":"too many tokens in the input","type":"invalid_request_error"}}`, "too many tokens in the input", "", true},
		{"tei", 413, "{\"message\":\"Input validation error: `inputs` must have less than 512 tokens. Given: 75000\",\"code\":413,\"type\":\"Validation\"}",
			"Input validation error: `inputs` must have less than 512 tokens. Given: 75000", "413", true},
		{"tei 422", 422, "{\"error\":\"Input validation error: `inputs` must have less than 512 tokens. Given: 75000\",\"error_type\":\"Validation\"}",
			"Input validation error: `inputs` must have less than 512 tokens. Given: 75000", "", true},
		{"llama-server batch", 500, `{"error":{"code":500,"message":"input is too large to process. increase the physical batch size","type":"server_error"}}`,
			"input is too large to process. increase the physical batch size", "500", true},
		{"sim", 413, `{"error":{"message":"input[0] is 75000 tokens, more than the model's maximum context length of 512 tokens","type":"context_length_exceeded","code":"context_length_exceeded"}}`,
			"input[0] is 75000 tokens, more than the model's maximum context length of 512 tokens", "context_length_exceeded", true},
		// Not context-length failures: the kind changes nothing.
		{"bad field", 400, `{"error":{"message":"bad encoding_format","type":"invalid_request_error"}}`, "bad encoding_format", "", false},
		{"body too large", 413, `{"error":{"message":"Maximum content size limit exceeded","type":"invalid_request_error"}}`, "Maximum content size limit exceeded", "", false},
		{"out of memory", 500, `{"error":"CUDA error: out of memory"}`, "CUDA error: out of memory", "", false},
	}
	kinds := []struct {
		kind string
		want int // for a context-length failure
	}{
		{api.KindChat, 400},
		{api.KindCompletion, 400},
		{api.KindEmbeddings, 413},
		{api.KindRerank, 413},
	}
	for _, e := range engines {
		for _, k := range kinds {
			t.Run(e.name+"/"+k.kind, func(t *testing.T) {
				plain := ErrorResult(e.status, []byte(e.body))
				r := ForKind(k.kind, ErrorResult(e.status, []byte(e.body)))
				if r.Error.Message != e.msg || r.Error.Code != e.code {
					t.Fatalf("message %q code %q", r.Error.Message, r.Error.Code)
				}
				if !e.tooBig {
					if r.Status != plain.Status || r.Error.Type == TypeContextLengthExceeded {
						t.Fatalf("got %d %+v, want %d as without the kind", r.Status, *r.Error, plain.Status)
					}
					return
				}
				if r.Status != k.want || r.Error.Type != TypeContextLengthExceeded || r.Retryable {
					t.Fatalf("got %d %+v retryable=%v, want %d context_length_exceeded", r.Status, *r.Error, r.Retryable, k.want)
				}
			})
		}
	}
}

func TestForKind(t *testing.T) {
	if ForKind(api.KindEmbeddings, nil) != nil || ForKind(api.KindEmbeddings, OK()).Status != 200 {
		t.Fatal("a success or nil changed")
	}
	// A failure the adapter built itself, as the simulator does.
	r := Failure(400, TypeContextLengthExceeded, "too long")
	if ForKind(api.KindRerank, r).Status != 413 || ForKind(api.KindChat, r).Status != 400 {
		t.Fatalf("got %d", r.Status)
	}
	// A server failure that happens to name the type stays what it is.
	r = Failure(503, TypeContextLengthExceeded, "busy")
	if ForKind(api.KindEmbeddings, r).Status != 503 {
		t.Fatalf("got %d", r.Status)
	}
	for kind, want := range map[string]int{api.KindChat: 400, api.KindCompletion: 400, api.KindEmbeddings: 413, api.KindRerank: 413, api.KindImages: 400} {
		if got := ContextLengthStatus(kind); got != want {
			t.Errorf("ContextLengthStatus(%q) = %d, want %d", kind, got, want)
		}
	}
}

// An engine that cannot be reached is told to the client by what failed,
// never by the address the worker dialled; a connection refused or not
// answered at all has its own code, which the worker's watch reads.
func TestUnreachable(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8000}
	cases := []struct {
		name    string
		err     error
		msg     string
		refused bool
	}{
		{"refused", fmt.Errorf("POST /v1/chat/completions: %w", &net.OpError{Op: "dial", Net: "tcp", Addr: addr,
			Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), "inference engine unreachable: dial: connection refused", true},
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Addr: addr, Err: timeoutError{}},
			"inference engine unreachable: dial: timed out", true},
		{"host unknown", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "vllm.internal", Server: "10.0.0.2:53"}},
			"inference engine unreachable: dial: the engine's host name did not resolve", true},
		{"reset mid-answer", fmt.Errorf("read response: %w", &net.OpError{Op: "read", Net: "tcp", Addr: addr,
			Err: os.NewSyscallError("read", syscall.ECONNRESET)}), "inference engine unreachable: read: connection reset by peer", false},
		{"other", errors.New("start runner: the runner exited"), "inference engine unreachable: start runner: the runner exited", false},
		{"net/http's", fmt.Errorf("read chat: %w", &url.Error{Op: "Post", URL: "http://10.1.2.3:8000/api/chat", Err: io.EOF}),
			"inference engine unreachable: read chat: Post: EOF", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Unreachable(c.err)
			if r.Status != http.StatusBadGateway || !r.Retryable || r.Error.Type != api.TypeUpstream {
				t.Fatalf("result = %d %+v retryable %v", r.Status, r.Error, r.Retryable)
			}
			if r.Error.Message != c.msg {
				t.Errorf("message = %q, want %q", r.Error.Message, c.msg)
			}
			if strings.Contains(r.Error.Message, "10.1.2.3") || strings.Contains(r.Error.Message, "vllm.internal") {
				t.Errorf("message names the engine's address: %q", r.Error.Message)
			}
			if got := r.Error.Code == api.CodeEngineUnreachable; got != c.refused || Refused(c.err) != c.refused {
				t.Errorf("code %q, Refused %v; want refused %v", r.Error.Code, Refused(c.err), c.refused)
			}
		})
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
