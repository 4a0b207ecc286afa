package responses_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/responses"
)

func requestSeeds() []string {
	return []string{
		``, `{}`, `[]`, `null`, `{"model":`, req(`"input":"hi"`),
		req(`"instructions":"sys"`, `"input":[{"role":"developer","content":"d"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"`+tinyPNG+`","detail":"high"},{"type":"input_image","image_url":"https://x.test/a.png"}]}]`),
		req(`"input":[{"role":"user","content":[{"type":"input_file","filename":"a.txt","file_data":"` + b64("hello") + `"}]}]`),
		req(`"input":[{"role":"user","content":"q"},{"type":"reasoning","summary":[]},{"role":"assistant","content":[{"type":"output_text","text":"t","annotations":[]}]},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"x"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"y"}]}]`),
		req(`"input":"x"`, `"stream":true`, `"max_output_tokens":1e3`, `"temperature":2`, `"top_p":0`, `"parallel_tool_calls":true`, `"user":"u"`, `"store":false`, `"truncation":"auto"`, `"metadata":{}`),
		req(`"input":"x"`, `"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true}]`, `"tool_choice":{"type":"function","name":"f"}`),
		req(`"input":"x"`, `"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}}`, `"reasoning":{"effort":"xhigh","summary":"auto"}`),
		req(`"input":"x"`, `"text":{"format":{"type":"json_object"}}`, `"tool_choice":"none"`, `"reasoning":null`),
		req(`"input":"x"`, `"previous_response_id":"resp_1"`),
		req(`"input":"x"`, `"tools":[{"type":"web_search"}]`),
		req(`"input":[{"type":"item_reference","id":"msg_1"}]`),
		req(`"input":[{"role":"assistant","content":[]},{"type":"function_call","call_id":"c","name":"f","arguments":""}]`),
		`{"model":"m","input":"hi","model":"n","input":[{"role":"user","content":"\u0000\ud800"}]}`,
	}
}

// FuzzToChat: ToChat never panics; every failure is a 400 or a 422 with
// fields; every success is a body the chat side accepts (remote images
// aside, which are the organisation's to allow), and a request whose
// answer objects are JSON.
func FuzzToChat(f *testing.F) {
	for _, s := range requestSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := responses.Parse(b)
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Message == "" {
				t.Fatalf("Parse(%q) = %v", b, err)
			}
			switch ae.HTTPStatus() {
			case http.StatusBadRequest:
			case http.StatusUnprocessableEntity:
				if len(ae.Fields) == 0 {
					t.Fatalf("Parse(%q): 422 without fields", b)
				}
			default:
				t.Fatalf("Parse(%q): status %d", b, ae.HTTPStatus())
			}
			return
		}
		body := r.Chat()
		c, err := chat.Parse(body, chat.Options{AllowRemoteImages: true})
		if err != nil {
			t.Fatalf("chat.Parse refused %s (from %q): %v", body, b, err)
		}
		if c.Model != r.Model || c.Stream != r.Stream || r.Model == "" {
			t.Fatalf("chat.Parse read model %q stream %v of %q/%v", c.Model, c.Stream, r.Model, r.Stream)
		}
		if _, err := chat.Parse(body, chat.Options{}); err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || len(ae.Fields) == 0 {
				t.Fatalf("chat.Parse without remote images: %v", err)
			}
			for _, fe := range ae.Fields {
				if fe.Type != api.FieldNotAllowed {
					t.Fatalf("chat.Parse without remote images: %v", err)
				}
			}
			if e := r.ChatError(err); e == nil {
				t.Fatal("ChatError lost the error")
			}
		}
		if err := c.Prepare(nil); err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		out, err := r.FromChat([]byte(completion(`{"content":"x","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}`, `"length"`, chatUsage, svcMember)), "id", 1)
		if err != nil || !json.Valid(out) {
			t.Fatalf("FromChat for %q: %v\n%s", b, err, out)
		}
		s := r.NewStream("id", 1)
		events := s.Chunk(nil, []byte(chunk(`{"content":"x"}`)))
		events = s.Chunk(events, []byte("[DONE]"))
		checkStream(t, events)
	})
}

// FuzzStream: whatever the chat stream holds, the translation never panics
// and its events satisfy the SDKs' accumulators, ending in one terminal
// event. Each byte of script is one chat event, built from text (so that
// the fuzzer walks the state machine rather than JSON syntax); raw lines
// from text are events too.
func FuzzStream(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 3, 4, 5, 5}, "Hi", false)
	f.Add([]byte{0, 2, 2, 10, 2, 0, 2, 3}, `{"a":1}`, false)
	f.Add([]byte{2, 18, 34, 2, 19, 35, 3, 4}, "x", true)
	f.Add([]byte{6, 0, 7, 0, 3}, "garbage\n"+chunk(`{"content":"raw"}`)+"\n[DONE]", false)
	f.Add([]byte{0, 3, 0, 11, 1}, "", false)
	f.Add([]byte{8, 0}, "boom", false)
	finishes := []string{"stop", "length", "tool_calls", "content_filter"}
	f.Fuzz(func(t *testing.T, script []byte, text string, fail bool) {
		s := newStream("r1", "m", 1)
		var out []byte
		str := func(v string) string { return string(appendJSONString(v)) }
		for i, op := range script {
			// Vary the piece of text each event carries.
			piece := text
			if n := len(text); n > 0 {
				piece = text[i%n:]
			}
			var ev string
			switch op % 9 {
			case 0:
				ev = chunk(`{"content":` + str(piece) + `}`)
			case 1:
				ev = chunk(`{"reasoning_content":` + str(piece) + `}`)
			case 2:
				// The high bits pick the call's index, and whether it
				// names an id and a function.
				call := `"index":` + string(rune('0'+op>>4%3))
				if op&0x20 != 0 {
					call += `,"id":` + str("call_"+string(rune('a'+op>>6)))
				}
				if op&0x40 != 0 {
					call += `,"function":{"name":"f","arguments":` + str(piece) + `}`
				} else {
					call += `,"function":{"arguments":` + str(piece) + `}`
				}
				ev = toolDelta("{" + call + "}")
			case 3:
				ev = finishChunk(finishes[int(op>>4)%len(finishes)])
			case 4:
				ev = usageChunk
			case 5:
				ev = `{"choices":[],"svc":{"k` + string(rune('0'+op>>4%4)) + `":` + str(piece) + `}}`
			case 6:
				for _, line := range bytes.Split([]byte(text), []byte("\n")) {
					out = s.Chunk(out, line)
				}
				continue
			case 7:
				ev = "[DONE]"
			case 8:
				ev = `{"error":{"message":` + str(piece) + `}}`
			}
			out = s.Chunk(out, []byte(ev))
		}
		if fail {
			out = s.Fail(out, "worker_lost", "gone", 1)
		} else {
			out = s.Chunk(out, []byte("[DONE]"))
		}
		events, final := checkStream(t, out)
		if len(events) < 3 || final == nil {
			t.Fatalf("%d events, final %v", len(events), final)
		}
	})
}

func appendJSONString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
