package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func chatGateway(t *testing.T) *fakeGateway {
	return newFakeGateway(t, map[string]fakeReply{
		"POST /v1/chat/completions stream": {body: "chat_stream.txt"},
		"POST /v1/chat/completions":        {body: "chat.json"},
		"POST /v1/embeddings":              {body: "embeddings.json"},
	})
}

// sentChat decodes the last chat request the gateway received.
func sentChat(t *testing.T, g *fakeGateway) map[string]any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal([]byte(g.last("/v1/chat/completions").Body), &body); err != nil {
		t.Fatal(err)
	}
	return body
}

func TestChatStream(t *testing.T) {
	g := chatGateway(t)
	t.Run("pipe", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g)}.run(t, "chat", "sim-reasoner", "hello")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		// The text as it came, thinking left out, and a final newline.
		if r.stdout != "Hello, world.\n" {
			t.Fatalf("stdout %q", r.stdout)
		}
		if r.stderr != "Notice (truncated_at_default_max_tokens): the reply hit the default cap\n" {
			t.Fatalf("stderr %q", r.stderr)
		}
		body := sentChat(t, g)
		msgs, _ := json.Marshal(body["messages"])
		if body["model"] != "sim-reasoner" || body["stream"] != true || string(msgs) != `[{"content":"hello","role":"user"}]` {
			t.Fatalf("request %v", body)
		}
		for _, k := range []string{"max_tokens", "temperature"} {
			if _, ok := body[k]; ok {
				t.Errorf("%s sent without its flag", k)
			}
		}
	})
	t.Run("colour terminal", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g), tty: true}.run(t, "chat", "sim-reasoner", "hello")
		want := "\x1b[2mThink\x1b[0m\x1b[2ming.\x1b[0m\n\nHello, world.\n"
		if r.code != 0 || r.stdout != want {
			t.Fatalf("exit %d, stdout %q, want %q", r.code, r.stdout, want)
		}
	})
	t.Run("flags and stdin", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g), stdin: "diff --git a/x b/x\n"}.run(t,
			"chat", "sim-chat", "Review this:", "--system", "Be brief.", "--max-tokens", "64", "--temperature", "0.2")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		body := sentChat(t, g)
		msgs, _ := json.Marshal(body["messages"])
		if string(msgs) != `[{"content":"Be brief.","role":"system"},{"content":"Review this:\n\ndiff --git a/x b/x","role":"user"}]` {
			t.Fatalf("messages %s", msgs)
		}
		if body["max_tokens"] != 64.0 || body["temperature"] != 0.2 {
			t.Fatalf("request %v", body)
		}
	})
	t.Run("stdin alone", func(t *testing.T) {
		r := cliRun{env: gatewayEnv(g), stdin: "What is 2+2?\n"}.run(t, "chat", "sim-chat")
		msgs, _ := json.Marshal(sentChat(t, g)["messages"])
		if r.code != 0 || string(msgs) != `[{"content":"What is 2+2?","role":"user"}]` {
			t.Fatalf("exit %d, messages %s", r.code, msgs)
		}
	})
}

func TestChatNoStreamAndJSON(t *testing.T) {
	g := chatGateway(t)
	r := cliRun{env: gatewayEnv(g)}.run(t, "chat", "sim-reasoner", "why?", "--no-stream")
	if r.code != 0 || r.stdout != "The sky scatters blue light.\n" {
		t.Fatalf("exit %d, stdout %q %s", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "Notice (reasoning_budget_reached): thinking reached its budget\n" {
		t.Fatalf("stderr %q", r.stderr)
	}
	if _, ok := sentChat(t, g)["stream"]; ok {
		t.Fatal("--no-stream sent stream")
	}

	r = cliRun{env: gatewayEnv(g), tty: true}.run(t, "chat", "sim-reasoner", "why?", "--no-stream")
	if r.stdout != "\x1b[2mRayleigh scattering.\x1b[0m\n\nThe sky scatters blue light.\n" {
		t.Fatalf("terminal stdout %q", r.stdout)
	}

	// --json is the whole reply, even without --no-stream.
	r = cliRun{env: gatewayEnv(g)}.run(t, "chat", "sim-reasoner", "why?", "--json")
	var reply struct {
		Svc struct {
			RequestID string `json:"request_id"`
		} `json:"svc"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &reply); err != nil || reply.Svc.RequestID != "req-chat" || r.stderr != "" {
		t.Fatalf("--json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "{\n  \"id\": \"chatcmpl-1\",") {
		t.Fatalf("--json not indented in the reply's order:\n%s", r.stdout)
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "chat", "sim-reasoner", "why?", "--jq", ".choices[0].message.content")
	if r.code != 0 || r.stdout != "The sky scatters blue light.\n" {
		t.Fatalf("--jq: %q %q", r.stdout, r.stderr)
	}
	r = cliRun{env: gatewayEnv(g)}.run(t, "chat", "sim-reasoner", "why?", "--jq", ".usage.total_tokens")
	if r.stdout != "14\n" {
		t.Fatalf("--jq number: %q", r.stdout)
	}
}

// closedPipe is a stdout whose reader has gone.
type closedPipe struct{}

func (closedPipe) Write([]byte) (int, error) { return 0, errors.New("write |1: broken pipe") }

func TestChatOutputFails(t *testing.T) {
	// An answer that ends its own line leaves nothing for the final
	// newline to write, so the failed write of the answer is the only one.
	g := newFakeGateway(t, map[string]fakeReply{
		"POST /v1/chat/completions stream": {body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Blue.\\n\"}}]}\n\ndata: [DONE]\n\n",
			header: map[string]string{"Content-Type": "text/event-stream"}},
		"POST /v1/chat/completions": {body: `{"choices": [{"index": 0, "message": {"role": "assistant", "content": "Blue.\n"}}]}`},
	})
	for _, args := range [][]string{{"chat", "m", "why?"}, {"chat", "m", "why?", "--no-stream"}} {
		r := cliRun{env: gatewayEnv(g), out: closedPipe{}}.run(t, args...)
		if r.code != exitError || !strings.Contains(r.stderr, "broken pipe") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

func TestChatStreamErrors(t *testing.T) {
	g := newFakeGateway(t, map[string]fakeReply{
		// Output, then the worker is lost: an error frame ends the stream.
		"POST /v1/chat/completions stream": {body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n" +
			"data: {\"error\":{\"message\":\"Worker gpu-box-1 was lost\",\"type\":\"service_unavailable\",\"status\":503}}\n\ndata: [DONE]\n\n",
			header: map[string]string{"Content-Type": "text/event-stream", "X-Request-Id": "rid-stream"}},
	})
	r := cliRun{env: gatewayEnv(g)}.run(t, "chat", "m", "hi")
	if r.code != exitCapacity || r.stdout != "partial\n" {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
	if r.stderr != "Error: Worker gpu-box-1 was lost\nRequest id: rid-stream\n" {
		t.Fatalf("stderr %q", r.stderr)
	}

	g = newFakeGateway(t, map[string]fakeReply{
		"POST /v1/chat/completions stream": {body: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}}]}\n\n",
			header: map[string]string{"Content-Type": "text/event-stream"}},
	})
	r = cliRun{env: gatewayEnv(g)}.run(t, "chat", "m", "hi")
	if r.code != exitError || r.stdout != "cut\n" || !strings.Contains(r.stderr, "without [DONE]") {
		t.Fatalf("cut stream: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestEmbed(t *testing.T) {
	g := chatGateway(t)
	r := cliRun{env: gatewayEnv(g)}.run(t, "embed", "sim-embed", "first text", "second")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "INDEX  TEXT        DIMENSIONS  VALUES\n" +
		"0      first text  6           [0.1250, -0.5000, 0.2500, 1.0000, …]\n" +
		"1      second      3           [0.0000, 1.0000, 2.0000]\n"
	if r.stdout != want {
		t.Fatalf("table\n%s\nwant\n%s", r.stdout, want)
	}
	var body struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.Unmarshal([]byte(g.last("/v1/embeddings").Body), &body); err != nil || body.Model != "sim-embed" ||
		strings.Join(body.Input, "|") != "first text|second" {
		t.Fatalf("request %+v %v", body, err)
	}

	r = cliRun{env: gatewayEnv(g), stdin: "one\n\ntwo\n"}.run(t, "embed", "sim-embed", "--jq", ".data | map(.embedding | length)")
	if r.code != 0 || r.stdout != "[\n  6,\n  3\n]\n" {
		t.Fatalf("--jq: %q %q", r.stdout, r.stderr)
	}
	if err := json.Unmarshal([]byte(g.last("/v1/embeddings").Body), &body); err != nil || strings.Join(body.Input, "|") != "one|two" {
		t.Fatalf("stdin lines: %+v", body)
	}
}
