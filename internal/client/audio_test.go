package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc/internal/transcription"
)

// zeros reads n zero bytes.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

// TestTranscribeRefusesAFileOverTheLimit: a file over the gateway's limit
// gets the gateway's 413 from the client, not a reset connection: a file
// of known length before anything is sent, one read from a pipe once it
// passes the limit.
func TestTranscribeRefusesAFileOverTheLimit(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"text":"ok"}`))
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	over := int64(transcription.MaxFileBytes + 1)
	for name, tr := range map[string]Transcription{
		"known length": {Model: "m", File: &zeros{n: over}, Size: over},
		"a pipe":       {Model: "m", File: &zeros{n: over}, Size: -1},
	} {
		_, _, err := c.Transcribe(context.Background(), tr)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge || ae.Code != "file_too_large" {
			t.Fatalf("%s: %v, want the 413", name, err)
		}
	}
	if n := hits.Load(); n > 1 {
		t.Fatalf("%d uploads answered, want none whole", n)
	}
	// At the limit, both go through.
	at := int64(transcription.MaxFileBytes)
	for _, size := range []int64{at, -1} {
		if _, _, err := c.Transcribe(context.Background(), Transcription{Model: "m", File: &zeros{n: at}, Size: size}); err != nil {
			t.Fatalf("a file at the limit, size %d: %v", size, err)
		}
	}
}
