package ollama

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestPull(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	var got []api.PullProgress
	if err := e.Pull(context.Background(), "good", func(p api.PullProgress) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	want := []api.PullProgress{
		{Status: "pulling manifest"},
		{Status: "pulling sha256:abc", Digest: "sha256:abc", Total: 100},
		{Status: "pulling sha256:abc", Digest: "sha256:abc", Total: 100, Completed: 50},
		{Status: "pulling sha256:abc", Digest: "sha256:abc", Total: 100, Completed: 100},
		{Status: "verifying sha256 digest"},
		{Status: "writing manifest"},
		{Status: "success"},
	}
	if jsonOf(t, got) != jsonOf(t, want) {
		t.Fatalf("progress:\n got %s\nwant %s", jsonOf(t, got), jsonOf(t, want))
	}
	if g := jsonOf(t, f.last(t, "/api/pull")); g != `{"model":"good","stream":true}` {
		t.Fatalf("sent %s", g)
	}
}

func TestPullFailures(t *testing.T) {
	tests := []struct {
		model string
		msg   string
		is    error
	}{
		{"bad", "pull bad: pull model manifest: file does not exist", nil},
		{"denied", "pull denied: ollama answered 500: pull model manifest: 401 unauthorized", nil},
		{"cut", "pull cut: progress stream ended before success", io.ErrUnexpectedEOF},
	}
	e := newFake(t).engine(t)
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			err := e.Pull(context.Background(), tt.model, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %q", err, tt.msg)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want it to wrap %v", err, tt.is)
			}
		})
	}
}

func TestPullCancelled(t *testing.T) {
	e := newFake(t).engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Pull(ctx, "good", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
