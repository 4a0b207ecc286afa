package anthropic

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// req is a Messages request with model m and max_tokens 100: its parts
// that are objects are the messages, the others ("key":value) extra
// top-level members.
func req(parts ...string) string {
	var messages, extra []string
	for _, p := range parts {
		if strings.HasPrefix(p, "{") {
			messages = append(messages, p)
		} else {
			extra = append(extra, p)
		}
	}
	b := `{"model":"m","max_tokens":100,"messages":[` + strings.Join(messages, ",") + `]`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

const userHi = `{"role":"user","content":"hi"}`

// user is a user message with the given blocks.
func user(blocks ...string) string {
	return `{"role":"user","content":[` + strings.Join(blocks, ",") + `]}`
}

// assistant is an assistant message with the given blocks.
func assistant(blocks ...string) string {
	return `{"role":"assistant","content":[` + strings.Join(blocks, ",") + `]}`
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// fe is an expected field error: path and type.
type fe struct{ field, typ string }

func apiError(t *testing.T, err error) *api.Error {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want *api.Error", err, err)
	}
	return ae
}

func fieldsOf(ae *api.Error) []fe {
	out := make([]fe, len(ae.Fields))
	for i, f := range ae.Fields {
		out[i] = fe{f.Field, f.Type}
	}
	return out
}

// sseEvent is one event of a translated stream.
type sseEvent struct {
	name string
	data string
}

// parseEvents splits Stream output into events, failing on anything that
// is not exactly "event: NAME\ndata: JSON\n\n".
func parseEvents(b []byte) ([]sseEvent, error) {
	var out []sseEvent
	for len(b) > 0 {
		end := bytes.Index(b, []byte("\n\n"))
		if end < 0 {
			return nil, fmt.Errorf("unterminated event %q", b)
		}
		ev := string(b[:end])
		b = b[end+2:]
		name, data, ok := strings.Cut(ev, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") || strings.Contains(data, "\n") {
			return nil, fmt.Errorf("malformed event %q", ev)
		}
		data = strings.TrimPrefix(data, "data: ")
		if !json.Valid([]byte(data)) {
			return nil, fmt.Errorf("event data is not JSON: %q", data)
		}
		out = append(out, sseEvent{strings.TrimPrefix(name, "event: "), data})
	}
	return out, nil
}

// accumulator rebuilds the message from the events the way the official
// SDKs do (Python's accumulate_event, Go's Message.Accumulate), and checks
// what they rely on: message_start first, blocks appended in index order
// one at a time, deltas of the open block's kind, message_delta once and
// message_stop last.
type accumulator struct {
	msg      map[string]any
	content  []map[string]any
	jsonBufs []string
	open     int
	delta    bool
	stopped  bool
	failed   map[string]any
	svc      any
	events   []string
}

func newAccumulator() *accumulator { return &accumulator{open: -1} }

var stopReasons = map[string]bool{"end_turn": true, "max_tokens": true, "stop_sequence": true, "tool_use": true, "refusal": true, "pause_turn": true}

func (a *accumulator) apply(ev sseEvent) error {
	var d map[string]any
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
		return err
	}
	a.events = append(a.events, ev.name)
	if d["type"] != ev.name {
		return fmt.Errorf("event %s has data type %v", ev.name, d["type"])
	}
	if a.stopped || a.failed != nil {
		return fmt.Errorf("%s after the end", ev.name)
	}
	if ev.name == "error" {
		e, _ := d["error"].(map[string]any)
		if e == nil || e["type"] == nil || e["message"] == nil {
			return fmt.Errorf("error event %s", ev.data)
		}
		a.failed = e
		return nil
	}
	if a.msg == nil && ev.name != "message_start" {
		return fmt.Errorf("%s before message_start", ev.name)
	}
	idx := -2
	if f, ok := d["index"].(float64); ok {
		idx = int(f)
	}
	switch ev.name {
	case "message_start":
		if a.msg != nil {
			return errors.New("second message_start")
		}
		m, _ := d["message"].(map[string]any)
		if m == nil || m["type"] != "message" || m["role"] != "assistant" {
			return fmt.Errorf("message_start %s", ev.data)
		}
		if c, ok := m["content"].([]any); !ok || len(c) != 0 {
			return fmt.Errorf("message_start content %v", m["content"])
		}
		u, _ := m["usage"].(map[string]any)
		if _, ok := u["input_tokens"].(float64); !ok {
			return fmt.Errorf("message_start usage %v", m["usage"])
		}
		if _, ok := u["output_tokens"].(float64); !ok {
			return fmt.Errorf("message_start usage %v", m["usage"])
		}
		a.msg = m
	case "content_block_start":
		if a.open >= 0 {
			return fmt.Errorf("block %d starts while %d is open", idx, a.open)
		}
		if idx != len(a.content) {
			return fmt.Errorf("block starts at index %d, want %d", idx, len(a.content))
		}
		if a.delta {
			return errors.New("block after message_delta")
		}
		b, _ := d["content_block"].(map[string]any)
		switch b["type"] {
		case "text":
			if _, ok := b["text"].(string); !ok {
				return fmt.Errorf("text block %v", b)
			}
		case "thinking":
			if _, ok := b["thinking"].(string); !ok {
				return fmt.Errorf("thinking block %v", b)
			}
			if _, ok := b["signature"].(string); !ok {
				return fmt.Errorf("thinking block %v", b)
			}
		case "tool_use":
			if _, ok := b["id"].(string); !ok {
				return fmt.Errorf("tool_use block %v", b)
			}
			if _, ok := b["name"].(string); !ok {
				return fmt.Errorf("tool_use block %v", b)
			}
			if in, ok := b["input"].(map[string]any); !ok || len(in) != 0 {
				return fmt.Errorf("tool_use block %v", b)
			}
		default:
			return fmt.Errorf("block type %v", b["type"])
		}
		a.content = append(a.content, b)
		a.jsonBufs = append(a.jsonBufs, "")
		a.open = idx
	case "content_block_delta":
		if idx != a.open {
			return fmt.Errorf("delta for %d while %d is open", idx, a.open)
		}
		b := a.content[idx]
		dl, _ := d["delta"].(map[string]any)
		switch dl["type"] {
		case "text_delta":
			s, ok := dl["text"].(string)
			if !ok || b["type"] != "text" {
				return fmt.Errorf("text_delta %v on %v", dl, b["type"])
			}
			b["text"] = b["text"].(string) + s
		case "thinking_delta":
			s, ok := dl["thinking"].(string)
			if !ok || b["type"] != "thinking" {
				return fmt.Errorf("thinking_delta %v on %v", dl, b["type"])
			}
			b["thinking"] = b["thinking"].(string) + s
		case "input_json_delta":
			s, ok := dl["partial_json"].(string)
			if !ok || b["type"] != "tool_use" {
				return fmt.Errorf("input_json_delta %v on %v", dl, b["type"])
			}
			a.jsonBufs[idx] += s
		default:
			return fmt.Errorf("delta type %v", dl["type"])
		}
	case "content_block_stop":
		if idx != a.open || idx < 0 {
			return fmt.Errorf("stop for %d while %d is open", idx, a.open)
		}
		a.open = -1
	case "message_delta":
		if a.open >= 0 || a.delta {
			return fmt.Errorf("message_delta with block %d open or repeated", a.open)
		}
		a.delta = true
		dl, _ := d["delta"].(map[string]any)
		r, _ := dl["stop_reason"].(string)
		if !stopReasons[r] {
			return fmt.Errorf("stop_reason %v", dl["stop_reason"])
		}
		if _, ok := dl["stop_sequence"]; !ok {
			return errors.New("message_delta without stop_sequence")
		}
		a.msg["stop_reason"], a.msg["stop_sequence"] = dl["stop_reason"], dl["stop_sequence"]
		u, _ := d["usage"].(map[string]any)
		if _, ok := u["output_tokens"].(float64); !ok {
			return fmt.Errorf("message_delta usage %v", d["usage"])
		}
		mu := a.msg["usage"].(map[string]any)
		for k, v := range u {
			mu[k] = v
		}
		a.svc = d["svc"]
	case StepEvent:
		// The SDKs pass over it; raw readers get the step.
		svc, _ := d["svc"].(map[string]any)
		if st, ok := svc["web_tool_step"].(map[string]any); !ok || st["index"] == nil || st["name"] == nil {
			return fmt.Errorf("step event %s", ev.data)
		}
	case "message_stop":
		if !a.delta {
			return errors.New("message_stop before message_delta")
		}
		a.stopped = true
	default:
		return fmt.Errorf("unknown event %s", ev.name)
	}
	return nil
}

// feed applies a stream's output.
func (a *accumulator) feed(b []byte) error {
	evs, err := parseEvents(b)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if err := a.apply(ev); err != nil {
			return err
		}
	}
	return nil
}

// final is the accumulated message as JSON, tool inputs parsed from their
// deltas as the SDKs parse them.
func (a *accumulator) final(t *testing.T) []byte {
	t.Helper()
	m := map[string]any{}
	for k, v := range a.msg {
		m[k] = v
	}
	content := make([]any, len(a.content))
	for i, b := range a.content {
		if b["type"] == "tool_use" && a.jsonBufs[i] != "" {
			var in any
			if err := json.Unmarshal([]byte(a.jsonBufs[i]), &in); err != nil {
				t.Fatalf("tool input %q: %v", a.jsonBufs[i], err)
			}
			b["input"] = in
		}
		content[i] = b
	}
	m["content"] = content
	if a.svc != nil {
		m["svc"] = a.svc
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// remoteOK lets requests send remote image URLs, as an organisation may.
var remoteOK = Options{AllowRemoteImages: true}
