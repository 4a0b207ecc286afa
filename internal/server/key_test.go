package server

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// The key comes from Authorization: Bearer, else x-api-key, else, on a
// WebSocket handshake alone, a subprotocol svc-key.<KEY>; an Authorization
// header of another scheme is not a key.
func TestKeyOf(t *testing.T) {
	tests := []struct {
		name    string
		headers [][2]string
		want    string
	}{
		{"bearer", [][2]string{{"Authorization", "Bearer svc_k_1"}}, "svc_k_1"},
		{"bearer any case", [][2]string{{"Authorization", "bEaReR  svc_k_1 "}}, "svc_k_1"},
		{"bearer and a tab", [][2]string{{"Authorization", "Bearer\tsvc_k_1"}}, "svc_k_1"},
		{"bearer run into its token", [][2]string{{"Authorization", "Bearersvc_k_1"}}, ""},
		// A proxy or a client library may put its own credentials there.
		{"another scheme hides no x-api-key", [][2]string{{"Authorization", "Basic abc"}, {"X-Api-Key", "svc_k_2"}}, "svc_k_2"},
		{"another scheme is no key", [][2]string{{"Authorization", "Basic abc"}}, ""},
		{"an empty bearer hides no x-api-key", [][2]string{{"Authorization", "Bearer  "}, {"X-Api-Key", "svc_k_2"}}, "svc_k_2"},
		{"a bearer wins over x-api-key", [][2]string{{"Authorization", "Bearer svc_k_1"}, {"X-Api-Key", "svc_k_2"}}, "svc_k_1"},
		{"x-api-key", [][2]string{{"X-Api-Key", " svc_k_2 "}}, "svc_k_2"},
		{"subprotocol on a handshake", [][2]string{{"Upgrade", "websocket"}, {"Sec-WebSocket-Protocol", "svc.live, svc-key.svc_k_3"}}, "svc_k_3"},
		{"subprotocol without a handshake", [][2]string{{"Sec-WebSocket-Protocol", "svc.live, svc-key.svc_k_3"}}, ""},
		{"a header wins over the subprotocol", [][2]string{{"X-Api-Key", "svc_k_2"}, {"Upgrade", "WebSocket"}, {"Sec-WebSocket-Protocol", "svc-key.svc_k_3"}}, "svc_k_2"},
		{"none", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			for _, kv := range tt.headers {
				h.Set(kv[0], kv[1])
			}
			if got := keyOf(&h); got != tt.want {
				t.Fatalf("keyOf = %q, want %q", got, tt.want)
			}
		})
	}
}
