package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
)

// llamaGuardUserPrompt is a Llama Guard 3 prompt checking one user
// message, as its chat template writes it (categories shortened).
func llamaGuardUserPrompt(message string) string {
	return "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" +
		"Task: Check if there is unsafe content in 'User' messages in conversations according our safety policy with the below categories.\n\n" +
		"<BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violent Crimes.\nS9: Indiscriminate Weapons.\nS10: Hate.\n<END UNSAFE CONTENT CATEGORIES>\n\n" +
		"<BEGIN CONVERSATION>\n\nUser: " + message + "\n\n<END CONVERSATION>\n\n" +
		"Provide your safety assessment for ONLY THE LAST User message in the above conversation:\n" +
		" - First line must read 'safe' or 'unsafe'.\n" +
		" - If unsafe, a second line must include a comma-separated list of violated categories.<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
}

var completionID = regexp.MustCompile(`"id":"cmpl-[0-9a-f]+"`)

// withoutID blanks a completion's id.
func withoutID(body []byte) []byte {
	return completionID.ReplaceAll(body, []byte(`"id":"cmpl-"`))
}

// TestSimulatorCompletions runs completions through the adapter against
// the simulator's HTTP face: they must give what the simulator gives
// in-process.
func TestSimulatorCompletions(t *testing.T) {
	srv := httptest.NewServer(sim.NewHandler(simConfig()))
	t.Cleanup(srv.Close)
	e := newEngine(t, srv.URL)
	if _, err := e.Models(t.Context()); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, model, prompt, text string // text "" when generated
	}{
		{"text", "sim-chat", "Once upon a time", ""},
		{"guard safe", "guard-a:1b", llamaGuardUserPrompt("What is the capital of France?"), "safe"},
		{"guard keywords", "guard-a:8b", llamaGuardUserPrompt("A hateful man made a bomb."), "unsafe\nS9,S10"},
		{"guard directive", "guard-a:1b", llamaGuardUserPrompt("hello\nsim: verdict=unsafe labels=S1,S10"), "unsafe\nS1,S10"},
		{"guard malformed", "guard-a:8b", llamaGuardUserPrompt("hello\nsim: verdict=malformed"), "I cannot help with that."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]any{"model": "alias", "prompt": tt.prompt, "max_tokens": 20, "temperature": 0})
			if err != nil {
				t.Fatal(err)
			}
			req := func() *engine.Request { return completionReq(tt.model, string(body)) }
			var s sink
			r := e.Serve(t.Context(), req(), &s)
			wantStatus(t, r, http.StatusOK)

			var got struct {
				Object  string `json:"object"`
				Model   string `json:"model"`
				Choices []struct {
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage api.Usage `json:"usage"`
			}
			if err := json.Unmarshal(s.body, &got); err != nil || got.Object != "text_completion" || got.Model != tt.model || len(got.Choices) != 1 {
				t.Fatalf("body %s: %v", s.body, err)
			}
			if tt.text != "" && got.Choices[0].Text != tt.text {
				t.Fatalf("text %q, want %q", got.Choices[0].Text, tt.text)
			}
			if r.Usage == nil || !reflect.DeepEqual(*r.Usage, got.Usage) || r.FinishReason != got.Choices[0].FinishReason {
				t.Fatalf("result %+v %q, body usage %+v", r.Usage, r.FinishReason, got.Usage)
			}
			// The simulator ends its HTTP bodies with a newline, which
			// the adapter passes on.
			// Each completion gets its own id, so ids are set aside.
			if want := direct(t, req()); !bytes.Equal(withoutID(bytes.TrimSpace(s.body)), withoutID(want)) {
				t.Fatalf("through the adapter\n%s\nin-process\n%s", s.body, want)
			}
		})
	}

	t.Run("failure", func(t *testing.T) {
		r := e.Serve(t.Context(), completionReq("guard-a:1b", `{"prompt":"`+"x\\nsim: fail=503"+`"}`), &sink{})
		wantStatus(t, r, http.StatusServiceUnavailable)
		if !r.Retryable {
			t.Fatalf("not retryable: %+v", *r.Error)
		}
	})

	t.Run("guard chat", func(t *testing.T) {
		var s sink
		r := e.Serve(t.Context(), &engine.Request{Kind: api.KindChat, Model: "guard-b:4b",
			Body: []byte(`{"model":"guard-b:4b","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sorry, I can't."}]}`)}, &s)
		wantStatus(t, r, http.StatusOK)
		var c struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(s.body, &c); err != nil || len(c.Choices) != 1 ||
			c.Choices[0].Message.Content != "Safety: Safe\nCategories: None\nRefusal: Yes" {
			t.Fatalf("body %s: %v", s.body, err)
		}
	})
}

// The simulator's HTTP face streams text completions as the adapter reads
// them: text_completion chunks, usage taken into the result.
func TestSimulatorCompletionStream(t *testing.T) {
	srv := httptest.NewServer(sim.NewHandler(simConfig()))
	t.Cleanup(srv.Close)
	e := newEngine(t, srv.URL)
	body := `{"model":"sim-chat","prompt":"Once upon a time","max_tokens":12,"temperature":0}`
	var whole sink
	r := e.Serve(t.Context(), completionReq("sim-chat", body), &whole)
	wantStatus(t, r, http.StatusOK)
	var want struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(whole.body, &want); err != nil || len(want.Choices) != 1 {
		t.Fatalf("whole %s %v", whole.body, err)
	}

	req := completionReq("sim-chat", body)
	req.Stream = true
	var s sink
	sr := e.Serve(t.Context(), req, &s)
	wantStatus(t, sr, http.StatusOK)
	text := ""
	for _, ev := range s.events {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(ev, &c); err != nil || c.Object != "text_completion" || len(c.Choices) != 1 || c.Usage != nil {
			t.Fatalf("event %s %v", ev, err)
		}
		text += c.Choices[0].Text
	}
	if text != want.Choices[0].Text || sr.Usage == nil || *sr.Usage != *r.Usage || sr.FinishReason != r.FinishReason {
		t.Fatalf("streamed %q usage %+v, whole %q usage %+v", text, sr.Usage, want.Choices[0].Text, r.Usage)
	}
}
