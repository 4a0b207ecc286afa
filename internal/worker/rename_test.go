package worker

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/internal/jsontext"
)

func TestRenameModel(t *testing.T) {
	want := jsontext.AppendString(nil, "my-chat")
	for _, tt := range []struct{ in, out string }{
		{`{"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3:8b","choices":[{"delta":{"content":"\"model\":\"x\""}}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":1,"model":"my-chat","choices":[{"delta":{"content":"\"model\":\"x\""}}]}`},
		// Only the top-level member; nested ones and later text are left.
		{`{"data":[{"model":"inner"}], "model" : "qwen3:8b" ,"usage":{}}`, `{"data":[{"model":"inner"}], "model" : "my-chat" ,"usage":{}}`},
		{`{"model":"my-chat","x":1}`, `{"model":"my-chat","x":1}`},
		{`{"id":"no model"}`, `{"id":"no model"}`},
		{`{"model":null}`, `{"model":null}`},
		{`[1,2]`, `[1,2]`},
		{`{"model":"unterminated`, `{"model":"unterminated`},
		{``, ``},
	} {
		if got := renameModel([]byte(tt.in), want); string(got) != tt.out {
			t.Errorf("%s:\n got %s\nwant %s", tt.in, got, tt.out)
		}
	}
}

type recordingSink struct{ events, bodies []string }

func (s *recordingSink) Event(_ context.Context, b []byte) error {
	s.events = append(s.events, string(b))
	return nil
}

func (s *recordingSink) Body(_ context.Context, b []byte) error {
	s.bodies = append(s.bodies, string(b))
	return nil
}

func TestRenamingSink(t *testing.T) {
	var rec recordingSink
	s := newRenamingSink(&rec, "my-chat")
	ctx := context.Background()
	_ = s.Event(ctx, []byte(`{"model":"local","choices":[]}`))
	_ = s.Body(ctx, []byte(`{"object":"list","model":"local"}`))
	if rec.events[0] != `{"model":"my-chat","choices":[]}` || rec.bodies[0] != `{"object":"list","model":"my-chat"}` {
		t.Fatalf("%+v", rec)
	}
}

// The rewrite is paid only by aliased requests, once per chunk.
func BenchmarkRenameModel(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-8f2a","object":"chat.completion.chunk","created":1767225600,"model":"qwen3:8b","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}`)
	want := jsontext.AppendString(nil, "my-chat")
	b.ReportAllocs()
	for b.Loop() {
		renameModel(chunk, want)
	}
}
