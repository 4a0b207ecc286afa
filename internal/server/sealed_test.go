package server

import (
	"testing"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/transcription"
)

// The clients hold a sealed upload to the limit the gateway reads it
// within: lower, they refuse what would pass; higher, they send what is
// refused.
func TestSealedUploadLimitIsTheGateways(t *testing.T) {
	if e2ee.MaxUpload != transcription.MaxBody {
		t.Fatalf("e2ee.MaxUpload %d, the gateway reads a sealed upload within %d", e2ee.MaxUpload, transcription.MaxBody)
	}
}
