package e2ee_test

import (
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/svc-dev/svc/e2ee"
)

// An OpenAI Go SDK client whose chat completions, embeddings, reranking,
// image generations, speech and transcriptions are sealed to a worker of
// the organisation: the gateway relays them without reading them. Only the
// HTTP client changes.
func ExampleNewTransport() {
	hc := &http.Client{Transport: e2ee.NewTransport(nil, nil)}
	client := openai.NewClient(
		option.WithBaseURL("http://127.0.0.1:8080/v1"),
		option.WithAPIKey("svc_..."),
		option.WithHTTPClient(hc),
	)
	_ = client
}

// Pinned keys: only workers whose key fingerprints are listed are sealed
// to, whatever the gateway's key directory says.
func ExamplePinned() {
	keys := e2ee.Pinned(e2ee.Directory{}, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	hc := &http.Client{Transport: e2ee.NewTransport(nil, keys)}
	_ = hc
}
