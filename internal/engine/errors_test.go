package engine

import "testing"

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
		{"unavailable", 503, `{"error":{"message":"Loading model","type":"unavailable_error","code":503}}`, 503, "unavailable_error", "Loading model", true},
		{"not json", 502, "Bad Gateway", 502, "upstream_error", "Bad Gateway", true},
		{"empty", 500, "", 500, "upstream_error", "Internal Server Error", true},
		{"detail", 422, `{"detail":"field required"}`, 422, "invalid_request_error", "field required", false},
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
