package ollama

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// TestChatStream checks the chunks relayed for each scripted model: the
// deltas (role on the first only), then one finish chunk with an empty
// delta, and never a usage chunk.
func TestChatStream(t *testing.T) {
	tests := []struct {
		model  string
		deltas []string // every chunk's delta, in order, the finish one last
		finish string
	}{
		{"plain", []string{`{"role":"assistant","content":"Hel"}`, `{"content":"lo"}`, `{}`}, "stop"},
		{"thinker", []string{
			`{"role":"assistant","reasoning_content":"Let me","reasoning":"Let me"}`,
			`{"reasoning_content":" think.","reasoning":" think."}`,
			`{"content":"42"}`,
			`{}`,
		}, "stop"},
		{"tooler", []string{
			`{"role":"assistant","tool_calls":[{"index":0,"id":"*","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]}`,
			`{"tool_calls":[{"index":1,"id":"*","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"CET\"}"}}]}`,
			`{}`,
		}, "tool_calls"},
		{"long", []string{`{"role":"assistant","content":"abc"}`, `{}`}, "length"},
		{"blank", []string{`{"role":"assistant","content":"Hi"}`, `{}`}, "stop"},
		{"html", []string{`{"role":"assistant","content":"<b>&</b>"}`, `{}`}, "stop"},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			sink := &recordSink{}
			r := e.Serve(context.Background(), chatReq(tt.model, true, ""), sink)
			if r.Status != 200 || r.FinishReason != tt.finish {
				t.Fatalf("result %d %q %+v, want 200 %q", r.Status, r.FinishReason, r.Error, tt.finish)
			}
			if len(sink.events) != len(tt.deltas) {
				t.Fatalf("%d chunks, want %d:\n%s", len(sink.events), len(tt.deltas), strings.Join(sink.raw, "\n"))
			}
			if tt.model == "html" && !strings.Contains(sink.raw[0], `"<b>&</b>"`) {
				t.Fatalf("markup escaped: %s", sink.raw[0])
			}
			id := sink.events[0]["id"].(string)
			if !strings.HasPrefix(id, "chatcmpl-") {
				t.Fatalf("id %q", id)
			}
			for i, ev := range sink.events {
				if ev["id"] != id || ev["object"] != "chat.completion.chunk" || ev["created"] != float64(1700000000) || ev["model"] != tt.model {
					t.Fatalf("chunk %d envelope: %s", i, sink.raw[i])
				}
				if _, ok := ev["usage"]; ok {
					t.Fatalf("chunk %d carries usage: %s", i, sink.raw[i])
				}
				choices := ev["choices"].([]any)
				if len(choices) != 1 {
					t.Fatalf("chunk %d choices: %s", i, sink.raw[i])
				}
				c := choices[0].(map[string]any)
				last := i == len(sink.events)-1
				if c["index"] != float64(0) {
					t.Fatalf("chunk %d index: %s", i, sink.raw[i])
				}
				if fr, ok := c["finish_reason"]; !ok || (last && fr != tt.finish) || (!last && fr != nil) {
					t.Fatalf("chunk %d finish_reason: %s", i, sink.raw[i])
				}
				d := c["delta"].(map[string]any)
				// Tool call ids are random: check the form, then mask.
				if calls, ok := d["tool_calls"].([]any); ok {
					for _, call := range calls {
						m := call.(map[string]any)
						if !strings.HasPrefix(m["id"].(string), "call_") {
							t.Fatalf("tool call id %v", m["id"])
						}
						m["id"] = "*"
					}
				}
				if g, w := jsonOf(t, d), canon(t, tt.deltas[i]); g != w {
					t.Errorf("chunk %d delta:\n got %s\nwant %s", i, g, w)
				}
			}
		})
	}
}

// TestChatComplete checks the non-streamed chat.completion body.
func TestChatComplete(t *testing.T) {
	tests := []struct {
		model   string
		message string
		finish  string
	}{
		{"plain", `{"role":"assistant","content":"Hello"}`, "stop"},
		{"thinker", `{"role":"assistant","content":"42","reasoning_content":"Let me think.","reasoning":"Let me think."}`, "stop"},
		{"tooler", `{"role":"assistant","content":null,"tool_calls":[
			{"id":"*","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}},
			{"id":"*","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"CET\"}"}}]}`, "tool_calls"},
		{"long", `{"role":"assistant","content":"abc"}`, "length"},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			sink := &recordSink{}
			r := e.Serve(context.Background(), chatReq(tt.model, false, ""), sink)
			if r.Status != 200 || r.FinishReason != tt.finish {
				t.Fatalf("result %d %q %+v", r.Status, r.FinishReason, r.Error)
			}
			if len(sink.events) != 0 {
				t.Fatalf("non-streamed request got %d events", len(sink.events))
			}
			b := sink.body
			if !strings.HasPrefix(b["id"].(string), "chatcmpl-") || b["object"] != "chat.completion" || b["created"] != float64(1700000000) || b["model"] != tt.model {
				t.Fatalf("envelope: %s", jsonOf(t, b))
			}
			c := b["choices"].([]any)[0].(map[string]any)
			if c["index"] != float64(0) || c["finish_reason"] != tt.finish {
				t.Fatalf("choice: %s", jsonOf(t, c))
			}
			msg := c["message"].(map[string]any)
			if calls, ok := msg["tool_calls"].([]any); ok {
				for _, call := range calls {
					m := call.(map[string]any)
					if !strings.HasPrefix(m["id"].(string), "call_") {
						t.Fatalf("tool call id %v", m["id"])
					}
					m["id"] = "*"
				}
			}
			if g, w := jsonOf(t, msg), canon(t, tt.message); g != w {
				t.Errorf("message:\n got %s\nwant %s", g, w)
			}
			if g := jsonOf(t, b["usage"]); g != `{"completion_tokens":5,"prompt_tokens":10,"total_tokens":15}` {
				t.Errorf("usage %s", g)
			}
		})
	}
}

// TestChatUsageTiming checks usage and timings, and that a load counts as
// a cold start only for a model known not to be loaded before.
func TestChatUsageTiming(t *testing.T) {
	f := newFake(t)
	f.tags = []fakeModel{{name: "plain:latest", digest: "a"}, {name: "cold:latest", digest: "b"}}
	f.ps = []string{"plain:latest"}
	e := f.engine(t)

	// Before any /api/ps the loaded set is unknown: no claim either way.
	r := e.Serve(context.Background(), chatReq("cold", true, ""), &recordSink{})
	if r.Status != 200 || r.Timing.ColdStart != nil || r.Timing.ModelLoadMs != nil {
		t.Fatalf("unknown loaded state: %d %+v", r.Status, r.Timing)
	}

	if _, err := e.Models(context.Background()); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		model  string
		stream bool
		coldMs float64 // 0: not a cold start
	}{
		{"plain", true, 0},   // loaded per /api/ps; its 3 ms load_duration is no cold start
		{"cold", true, 2500}, // not loaded: cold
		{"cold", false, 0},   // served just now, so loaded
		{"plain", false, 0},
	}
	for i, s := range steps {
		r := e.Serve(context.Background(), chatReq(s.model, s.stream, ""), &recordSink{})
		if r.Status != 200 {
			t.Fatalf("step %d: %d %+v", i, r.Status, r.Error)
		}
		if g := jsonOf(t, r.Usage); g != `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}` {
			t.Errorf("step %d usage %s", i, g)
		}
		tm := r.Timing
		if tm.TTFTMs == nil || *tm.TTFTMs != 120 || tm.TokensPerSecond == nil || *tm.TokensPerSecond != 20 {
			t.Errorf("step %d timing %s", i, jsonOf(t, tm))
		}
		switch {
		case s.coldMs == 0 && (tm.ColdStart != nil || tm.ModelLoadMs != nil):
			t.Errorf("step %d: warm model reported %s", i, jsonOf(t, tm))
		case s.coldMs != 0 && (tm.ColdStart == nil || !*tm.ColdStart || tm.ModelLoadMs == nil || *tm.ModelLoadMs != s.coldMs):
			t.Errorf("step %d: cold start not reported: %s", i, jsonOf(t, tm))
		}
	}
}

// TestChatErrors checks failures before and after output.
func TestChatErrors(t *testing.T) {
	tests := []struct {
		model     string
		stream    bool
		status    int
		typ       string
		msg       string
		retryable bool
		events    int
	}{
		{"missing", true, 404, api.TypeNotFound, `model "missing" not found`, false, 0},
		{"missing", false, 404, api.TypeNotFound, `model "missing" not found`, false, 0},
		{"oom", true, 507, api.TypeInsufficientMemory, "requires more system memory", false, 0},
		{"earlyfail", true, 507, api.TypeInsufficientMemory, "out of memory", false, 0},
		{"earlyfail", false, 507, api.TypeInsufficientMemory, "out of memory", false, 0},
		{"midfail", true, 502, api.TypeUpstream, "cut off: an error was encountered", false, 1},
		{"truncated", true, 502, api.TypeUpstream, "cut off", false, 1},
		{"truncated-early", true, 502, api.TypeUpstream, "unreachable", true, 0},
		{"garbage", true, 502, api.TypeUpstream, "unreadable answer", true, 0},
		{"garbage", false, 502, api.TypeUpstream, "unreadable answer", true, 0},
	}
	f := newFake(t)
	e := f.engine(t)
	for _, tt := range tests {
		name := tt.model
		if !tt.stream {
			name += "/complete"
		}
		t.Run(name, func(t *testing.T) {
			sink := &recordSink{}
			r := e.Serve(context.Background(), chatReq(tt.model, tt.stream, ""), sink)
			if r.Status != tt.status || r.Error == nil || r.Error.Type != tt.typ || r.Retryable != tt.retryable || !strings.Contains(r.Error.Message, tt.msg) {
				t.Fatalf("got %d %+v retryable=%v, want %d %s %q retryable=%v", r.Status, r.Error, r.Retryable, tt.status, tt.typ, tt.msg, tt.retryable)
			}
			if len(sink.events) != tt.events {
				t.Fatalf("%d events, want %d", len(sink.events), tt.events)
			}
		})
	}
}

func TestChatUnreachable(t *testing.T) {
	srv := newFake(t).srv
	srv.Close()
	e, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{api.KindChat, api.KindEmbeddings, api.KindCompletion} {
		req := chatReq("plain", true, "")
		req.Kind = kind
		switch kind {
		case api.KindEmbeddings:
			req.Body = []byte(`{"model":"e","input":"x"}`)
		case api.KindCompletion:
			req.Stream, req.Body = false, []byte(`{"model":"g","prompt":"x"}`)
		}
		r := e.Serve(context.Background(), req, &recordSink{})
		if r.Status != 502 || !r.Retryable || !strings.Contains(r.Error.Message, "unreachable") {
			t.Fatalf("%s: got %d %+v retryable=%v", kind, r.Status, r.Error, r.Retryable)
		}
	}
}

func TestUnknownKind(t *testing.T) {
	e := newFake(t).engine(t)
	r := e.Serve(context.Background(), &engine.Request{Kind: "speech", Model: "x", Body: []byte(`{}`)}, &recordSink{})
	if r.Status != 501 || r.Error.Type != api.TypeNotSupported {
		t.Fatalf("got %d %+v", r.Status, r.Error)
	}
}

// TestChatCancel cancels mid-stream: Serve returns at once with
// Cancelled, and Ollama sees its client go away.
func TestChatCancel(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &recordSink{first: make(chan struct{})}
	done := make(chan *api.Result, 1)
	go func() { done <- e.Serve(ctx, chatReq("hang", true, ""), sink) }()

	select {
	case <-sink.first:
	case <-time.After(5 * time.Second):
		t.Fatal("no first chunk")
	}
	cancel()
	select {
	case r := <-done:
		if r.Status != 499 || r.Error.Type != "cancelled" {
			t.Fatalf("got %d %+v", r.Status, r.Error)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	select {
	case <-f.cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("Ollama did not see the cancel")
	}
}

// TestChatSinkFailure stops relaying when the sink fails, and Ollama
// sees its client go away.
func TestChatSinkFailure(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	done := make(chan *api.Result, 1)
	go func() { done <- e.Serve(context.Background(), chatReq("hang", true, ""), &recordSink{failAt: 1}) }()
	select {
	case r := <-done:
		if r.Status != 499 {
			t.Fatalf("got %d %+v", r.Status, r.Error)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return")
	}
	select {
	case <-f.cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("Ollama did not see the sink failure")
	}

	sink := &recordSink{failAt: 2}
	if r := e.Serve(context.Background(), chatReq("plain", true, ""), sink); r.Status != 499 || len(sink.events) != 1 {
		t.Fatalf("got %d with %d events", r.Status, len(sink.events))
	}
}

// Ollama serves neither reranking nor image generation: a 501 that says
// which engines do, without asking Ollama.
func TestRerankAndImagesNotServed(t *testing.T) {
	f := newFake(t)
	e := f.engine(t)
	for kind, body := range map[string]string{
		api.KindRerank: `{"model":"bge-reranker","query":"q","documents":["a"]}`,
		api.KindImages: `{"model":"x/z-image-turbo","prompt":"a fox"}`,
	} {
		r := e.Serve(context.Background(), &engine.Request{Kind: kind, Model: "m", Body: []byte(body)}, &recordSink{})
		if r.Status != 501 || r.Error.Type != api.TypeNotSupported || r.Retryable || !strings.Contains(r.Error.Message, "--engine openai=URL") {
			t.Fatalf("%s: %d %+v", kind, r.Status, r.Error)
		}
	}
}
