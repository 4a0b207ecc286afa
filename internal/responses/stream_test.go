package responses_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/responses"
)

type sseEvent struct {
	typ  string
	data map[string]any
	raw  []byte
}

// parseSSE splits a stream into events, each exactly an event: line and a
// data: line.
func parseSSE(t testing.TB, b []byte) []sseEvent {
	t.Helper()
	if len(b) == 0 {
		return nil
	}
	if !bytes.HasSuffix(b, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", b)
	}
	var out []sseEvent
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		lines := strings.Split(block, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("malformed event %q", block)
		}
		raw := []byte(strings.TrimPrefix(lines[1], "data: "))
		var data map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			t.Fatalf("event data is not a JSON object: %v: %s", err, raw)
		}
		out = append(out, sseEvent{strings.TrimPrefix(lines[0], "event: "), data, raw})
	}
	return out
}

// snapItem is one output item as a client accumulates it.
type snapItem struct {
	typ, id, callID, name string
	content, summary      []string
	args                  string
	done                  map[string]any
}

// checkStream holds a stream to the rules of the SDKs' accumulators (the
// JS helper's are the strictest: appends at the next index only, ids and
// call ids unique, every event naming the item it belongs to) and returns
// its events and the terminal response.
func checkStream(t testing.TB, b []byte) ([]sseEvent, map[string]any) {
	t.Helper()
	events := parseSSE(t, b)
	// knownEvents are the event types the SDKs' stream helpers accumulate; the
	// JS helper throws on any other.
	knownEvents := map[string]bool{
		"response.created": true, "response.in_progress": true, "response.completed": true,
		"response.incomplete": true, "response.failed": true,
		"response.output_item.added": true, "response.output_item.done": true,
		"response.content_part.added": true, "response.content_part.done": true,
		"response.output_text.delta": true, "response.output_text.done": true,
		"response.function_call_arguments.delta": true, "response.function_call_arguments.done": true,
		"response.reasoning_summary_part.added": true, "response.reasoning_summary_part.done": true,
		"response.reasoning_summary_text.delta": true, "response.reasoning_summary_text.done": true,
		"keepalive": true,
	}
	var items []*snapItem
	ids, callIDs := map[string]bool{}, map[string]bool{}
	var terminal map[string]any
	num := func(e sseEvent, key string) int {
		n, ok := e.data[key].(json.Number)
		if !ok {
			t.Fatalf("%s: %s is not a number: %s", e.typ, key, e.raw)
		}
		i, err := n.Int64()
		if err != nil {
			t.Fatalf("%s: %s: %v", e.typ, key, err)
		}
		return int(i)
	}
	str := func(m map[string]any, key string) string {
		s, ok := m[key].(string)
		if !ok {
			t.Fatalf("%s is not a string in %v", key, m)
		}
		return s
	}
	obj := func(e sseEvent, key string) map[string]any {
		m, ok := e.data[key].(map[string]any)
		if !ok {
			t.Fatalf("%s: %s is not an object: %s", e.typ, key, e.raw)
		}
		return m
	}
	// target finds the item an item-scoped event names, which must be open
	// and of the kind the event is for.
	target := func(e sseEvent, kind string) *snapItem {
		i := num(e, "output_index")
		if i < 0 || i >= len(items) {
			t.Fatalf("%s: no output at index %d: %s", e.typ, i, e.raw)
		}
		it := items[i]
		if id := str(e.data, "item_id"); id != it.id {
			t.Fatalf("%s: item_id %q, but output %d is %q", e.typ, id, i, it.id)
		}
		if it.typ != kind {
			t.Fatalf("%s: output %d is a %s, not a %s", e.typ, i, it.typ, kind)
		}
		if it.done != nil {
			t.Fatalf("%s: output %d is already done", e.typ, i)
		}
		return it
	}
	index := func(e sseEvent, key string, n int) int {
		k := num(e, key)
		if k < 0 || k >= n {
			t.Fatalf("%s: %s %d out of range (%d)", e.typ, key, k, n)
		}
		return k
	}
	for i, e := range events {
		if e.data["type"] != e.typ {
			t.Fatalf("event %s has data type %v", e.typ, e.data["type"])
		}
		if !knownEvents[e.typ] {
			t.Fatalf("unknown event type %s", e.typ)
		}
		if got := num(e, "sequence_number"); got != i {
			t.Fatalf("%s: sequence_number %d, want %d", e.typ, got, i)
		}
		if terminal != nil {
			t.Fatalf("%s after the terminal event", e.typ)
		}
		switch {
		case i == 0 && e.typ != "response.created":
			t.Fatalf("first event is %s", e.typ)
		case i == 1 && e.typ != "response.in_progress":
			t.Fatalf("second event is %s", e.typ)
		}
		switch e.typ {
		case "response.created", "response.in_progress":
			r := obj(e, "response")
			if i > 1 || r["status"] != "in_progress" || len(r["output"].([]any)) != 0 || r["usage"] != nil {
				t.Fatalf("%s: %s", e.typ, e.raw)
			}
		case "response.output_item.added":
			if k := num(e, "output_index"); k != len(items) {
				t.Fatalf("added at %d with %d items", k, len(items))
			}
			item := obj(e, "item")
			it := &snapItem{typ: str(item, "type"), id: str(item, "id")}
			if it.id == "" || ids[it.id] {
				t.Fatalf("item id %q empty or repeated", it.id)
			}
			ids[it.id] = true
			switch it.typ {
			case "message":
				if len(item["content"].([]any)) != 0 || item["status"] != "in_progress" {
					t.Fatalf("message added with content: %s", e.raw)
				}
			case "reasoning":
				if len(item["summary"].([]any)) != 0 {
					t.Fatalf("reasoning added with a summary: %s", e.raw)
				}
			case "function_call":
				it.callID, it.name = str(item, "call_id"), str(item, "name")
				if it.callID == "" || callIDs[it.callID] {
					t.Fatalf("call_id %q empty or repeated", it.callID)
				}
				callIDs[it.callID] = true
				if str(item, "arguments") != "" || item["status"] != "in_progress" {
					t.Fatalf("call added with arguments: %s", e.raw)
				}
			default:
				t.Fatalf("item type %s", it.typ)
			}
			items = append(items, it)
		case "response.content_part.added":
			it := target(e, "message")
			if num(e, "content_index") != len(it.content) {
				t.Fatalf("part added at %d with %d parts", num(e, "content_index"), len(it.content))
			}
			if p := obj(e, "part"); p["type"] != "output_text" || p["text"] != "" {
				t.Fatalf("part %s", e.raw)
			}
			it.content = append(it.content, "")
		case "response.output_text.delta":
			it := target(e, "message")
			k := index(e, "content_index", len(it.content))
			it.content[k] += str(e.data, "delta")
			if _, ok := e.data["logprobs"].([]any); !ok {
				t.Fatalf("no logprobs: %s", e.raw)
			}
		case "response.output_text.done":
			it := target(e, "message")
			if k := index(e, "content_index", len(it.content)); str(e.data, "text") != it.content[k] {
				t.Fatalf("text done %q, deltas made %q", e.data["text"], it.content[k])
			}
		case "response.content_part.done":
			it := target(e, "message")
			k := index(e, "content_index", len(it.content))
			if p := obj(e, "part"); p["type"] != "output_text" || p["text"] != it.content[k] {
				t.Fatalf("part done %s, text %q", e.raw, it.content[k])
			}
		case "response.reasoning_summary_part.added":
			it := target(e, "reasoning")
			if num(e, "summary_index") != len(it.summary) {
				t.Fatalf("summary part added at %d", num(e, "summary_index"))
			}
			if p := obj(e, "part"); p["type"] != "summary_text" || p["text"] != "" {
				t.Fatalf("summary part %s", e.raw)
			}
			it.summary = append(it.summary, "")
		case "response.reasoning_summary_text.delta":
			it := target(e, "reasoning")
			it.summary[index(e, "summary_index", len(it.summary))] += str(e.data, "delta")
		case "response.reasoning_summary_text.done":
			it := target(e, "reasoning")
			if k := index(e, "summary_index", len(it.summary)); str(e.data, "text") != it.summary[k] {
				t.Fatalf("summary done %q, deltas made %q", e.data["text"], it.summary[k])
			}
		case "response.reasoning_summary_part.done":
			it := target(e, "reasoning")
			k := index(e, "summary_index", len(it.summary))
			if p := obj(e, "part"); p["text"] != it.summary[k] {
				t.Fatalf("summary part done %s", e.raw)
			}
		case "response.function_call_arguments.delta":
			it := target(e, "function_call")
			it.args += str(e.data, "delta")
		case "response.function_call_arguments.done":
			it := target(e, "function_call")
			if str(e.data, "arguments") != it.args {
				t.Fatalf("arguments done %s, deltas made %q", e.raw, it.args)
			}
		case "response.output_item.done":
			k := index(e, "output_index", len(items))
			it := items[k]
			item := obj(e, "item")
			if item["id"] != it.id || item["type"] != it.typ || (it.typ == "function_call" && item["call_id"] != it.callID) {
				t.Fatalf("done item %s does not match %+v", e.raw, it)
			}
			if it.done != nil {
				t.Fatalf("output %d done twice", k)
			}
			switch it.typ {
			case "message":
				var texts []string
				for _, p := range item["content"].([]any) {
					texts = append(texts, p.(map[string]any)["text"].(string))
				}
				if !reflect.DeepEqual(texts, it.content) {
					t.Fatalf("message done with %q, deltas made %q", texts, it.content)
				}
			case "reasoning":
				var texts []string
				for _, p := range item["summary"].([]any) {
					texts = append(texts, p.(map[string]any)["text"].(string))
				}
				if !reflect.DeepEqual(texts, it.summary) {
					t.Fatalf("reasoning done with %q, deltas made %q", texts, it.summary)
				}
			case "function_call":
				if item["arguments"] != it.args {
					t.Fatalf("call done with %v, deltas made %q", item["arguments"], it.args)
				}
			}
			if s := item["status"]; it.typ != "reasoning" && s != "completed" && s != "incomplete" {
				t.Fatalf("done with status %v", s)
			}
			it.done = item
		case "response.completed", "response.incomplete", "response.failed":
			terminal = obj(e, "response")
			want := strings.TrimPrefix(e.typ, "response.")
			if terminal["status"] != want {
				t.Fatalf("%s with status %v", e.typ, terminal["status"])
			}
			output := terminal["output"].([]any)
			if len(output) != len(items) {
				t.Fatalf("%s has %d items, the stream %d", e.typ, len(output), len(items))
			}
			for k, it := range items {
				got := output[k].(map[string]any)
				if got["id"] != it.id || got["type"] != it.typ {
					t.Fatalf("final item %d is %v, streamed %+v", k, got, it)
				}
				if it.done != nil && !reflect.DeepEqual(got, it.done) && e.typ != "response.failed" {
					t.Fatalf("final item %d is %v, done said %v", k, got, it.done)
				}
				if it.done == nil && e.typ != "response.failed" {
					t.Fatalf("item %d never done", k)
				}
			}
		}
	}
	if terminal == nil && len(events) > 0 {
		t.Fatalf("no terminal event among %d", len(events))
	}
	return events, terminal
}

// terminalRaw is the response object of the stream's last event, as sent.
func terminalRaw(t testing.TB, events []sseEvent) []byte {
	t.Helper()
	return member(t, events[len(events)-1].raw, "response")
}

func types(events []sseEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, strings.TrimPrefix(e.typ, "response."))
	}
	return out
}

func chunk(delta string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"engine","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}`
}

func finishChunk(reason string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"engine","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}`
}

const (
	usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"engine","choices":[],"usage":{"completion_tokens":7,"completion_tokens_details":{"reasoning_tokens":2},"prompt_tokens":11,"total_tokens":18}}`
	noticeSvc  = `{"choices":[],"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk","svc":{"notice":{"code":"truncated","message":"The answer hit max_output_tokens."}}}`
	finalSvc   = `{"choices":[],"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk","svc":{"worker":{"id":"w1","name":"box","version":null},"request_id":"r1","timing":{"total_ms":40}}}`
	// The two svc chunks merged, as FromChat is given them in one.
	mergedSvc   = `"svc":{"notice":{"code":"truncated","message":"The answer hit max_output_tokens."},"worker":{"id":"w1","name":"box","version":null},"request_id":"r1","timing":{"total_ms":40}}`
	streamUsage = `"usage":{"completion_tokens":7,"completion_tokens_details":{"reasoning_tokens":2},"prompt_tokens":11,"total_tokens":18}`
)

// stepChunk is a web tool step event as a worker sends it.
func stepChunk(step string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"engine","choices":[],"svc":{"web_tool_step":` + step + `}}`
}

func toolDelta(calls string) string { return chunk(`{"tool_calls":[` + calls + `]}`) }

// streamTail is how the gateway ends a stream: usage, svc in two
// chunks, [DONE].
func streamTail() []string { return []string{usageChunk, noticeSvc, finalSvc, "[DONE]"} }

func TestStream(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		// completion is the same answer unstreamed: the stream's last
		// response must be byte for byte what FromChat makes of it.
		completion string
		last       string
		types      []string // the whole sequence, when given
	}{{
		name:       "text",
		chunks:     append([]string{chunk(`{"role":"assistant","content":""}`), chunk(`{"content":"Hel"}`), chunk(`{"content":"lo"}`), finishChunk("stop")}, streamTail()...),
		completion: completion(`{"role":"assistant","content":"Hello"}`, `"stop"`, streamUsage, mergedSvc),
		last:       "response.completed",
		types: []string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.delta",
			"output_text.done", "content_part.done", "output_item.done", "completed"},
	}, {
		name:       "reasoning then text",
		chunks:     append([]string{chunk(`{"role":"assistant","reasoning_content":"Two"}`), chunk(`{"reasoning_content":" plus two."}`), chunk(`{"content":"4"}`), finishChunk("stop")}, streamTail()...),
		completion: completion(`{"role":"assistant","content":"4","reasoning_content":"Two plus two."}`, `"stop"`, streamUsage, mergedSvc),
		last:       "response.completed",
		types: []string{"created", "in_progress",
			"output_item.added", "reasoning_summary_part.added", "reasoning_summary_text.delta", "reasoning_summary_text.delta",
			"reasoning_summary_text.done", "reasoning_summary_part.done", "output_item.done",
			"output_item.added", "content_part.added", "output_text.delta", "output_text.done", "content_part.done", "output_item.done", "completed"},
	}, {
		name: "text then two calls, their arguments interleaved",
		chunks: append([]string{chunk(`{"content":"Let me check."}`),
			toolDelta(`{"index":0,"id":"call_a","type":"function","function":{"name":"weather","arguments":""}}`),
			toolDelta(`{"index":0,"function":{"arguments":"{\"city\":"}}`),
			toolDelta(`{"index":1,"id":"call_b","type":"function","function":{"name":"time","arguments":"{}"}}`),
			toolDelta(`{"index":0,"function":{"arguments":"\"Paris\"}"}}`),
			finishChunk("tool_calls")}, streamTail()...),
		completion: completion(`{"role":"assistant","content":"Let me check.","tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_b","type":"function","function":{"name":"time","arguments":"{}"}}]}`, `"tool_calls"`, streamUsage, mergedSvc),
		last: "response.completed",
		types: []string{"created", "in_progress",
			"output_item.added", "content_part.added", "output_text.delta", "output_text.done", "content_part.done", "output_item.done",
			"output_item.added", "function_call_arguments.delta", "output_item.added", "function_call_arguments.delta", "function_call_arguments.delta",
			"function_call_arguments.done", "output_item.done", "function_call_arguments.done", "output_item.done", "completed"},
	}, {
		name: "calls only",
		chunks: []string{chunk(`{"role":"assistant","content":null}`),
			toolDelta(`{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}`),
			finishChunk("tool_calls"), "[DONE]"},
		completion: completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`, `"tool_calls"`),
		last:       "response.completed",
		types: []string{"created", "in_progress", "output_item.added", "function_call_arguments.delta",
			"function_call_arguments.done", "output_item.done", "completed"},
	}, {
		name:       "cut short",
		chunks:     append([]string{chunk(`{"reasoning_content":"hmm"}`), chunk(`{"content":"Once upon"}`), finishChunk("length")}, streamTail()...),
		completion: completion(`{"role":"assistant","content":"Once upon","reasoning_content":"hmm"}`, `"length"`, streamUsage, mergedSvc),
		last:       "response.incomplete",
	}, {
		name: "cut short in a call",
		chunks: []string{chunk(`{"content":"x"}`), toolDelta(`{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\":"}}`),
			finishChunk("length"), usageChunk, "[DONE]"},
		completion: completion(`{"content":"x","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]}`, `"length"`, streamUsage),
		last:       "response.incomplete",
	}, {
		name:       "silence is an empty message",
		chunks:     []string{chunk(`{"role":"assistant","content":""}`), finishChunk("stop"), "[DONE]"},
		completion: completion(`{"role":"assistant","content":""}`, `"stop"`),
		last:       "response.completed",
		types:      []string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.done", "content_part.done", "output_item.done", "completed"},
	}, {
		name: "calls without index numbers",
		chunks: []string{toolDelta(`{"id":"x","function":{"name":"f","arguments":"{}"}}`),
			toolDelta(`{"id":"y","function":{"name":"g","arguments":"{}"}}`), finishChunk("tool_calls"), "[DONE]"},
		completion: completion(`{"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{}"}},{"id":"y","function":{"name":"g","arguments":"{}"}}]}`, `"tool_calls"`),
		last:       "response.completed",
	}, {
		name: "calls without ids, and one id twice",
		chunks: []string{toolDelta(`{"index":0,"function":{"name":"f","arguments":"{}"}}`),
			toolDelta(`{"index":1,"id":"same","function":{"name":"g","arguments":"{}"}}`),
			toolDelta(`{"index":2,"id":"same","function":{"name":"h","arguments":"{}"}}`), finishChunk("tool_calls"), "[DONE]"},
		completion: completion(`{"tool_calls":[{"function":{"name":"f","arguments":"{}"}},{"id":"same","function":{"name":"g","arguments":"{}"}},{"id":"same","function":{"name":"h","arguments":"{}"}}]}`, `"tool_calls"`),
		last:       "response.completed",
	}, {
		name: "a name in pieces, the id repeated",
		chunks: []string{toolDelta(`{"index":0,"id":"c","function":{"name":"get_"}}`), toolDelta(`{"index":0,"id":"c","function":{"name":"weather","arguments":"{}"}}`),
			finishChunk("tool_calls"), "[DONE]"},
		completion: completion(`{"tool_calls":[{"id":"c","function":{"name":"get_weather","arguments":"{}"}}]}`, `"tool_calls"`),
		last:       "response.completed",
	}, {
		name:       "done without a finish",
		chunks:     []string{chunk(`{"content":"a"}`), "[DONE]"},
		completion: completion(`{"content":"a"}`, `null`),
		last:       "response.completed",
	}, {
		name: "noise is skipped",
		chunks: []string{"garbage", `{"choices":5}`, `{"choices":[7,{"index":1,"delta":{"content":"not ours"}},{"index":0,"delta":"x"}]}`,
			`{"choices":[{"index":0,"delta":{"content":1,"tool_calls":"x"}}]}`, ``, `[`, chunk(`{"content":"ok"}`),
			`{"choices":[],"usage":null,"svc":"odd"}`, finishChunk("stop"), " [DONE] \n"},
		completion: completion(`{"content":"ok"}`, `"stop"`),
		last:       "response.completed",
	}, {
		name: "web tool steps",
		chunks: []string{stepChunk(`{"index":0,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}"}`),
			stepChunk(`{"index":0,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}","ok":true,"result":"A page","result_chars":6}`),
			stepChunk(`{"index":1,"name":"web_search","arguments":"{\"query\":\"b\"}"}`),
			stepChunk(`{"index":1,"name":"web_search","arguments":"{\"query\":\"b\"}","ok":false,"result":"","result_chars":0,"error":"refused"}`),
			chunk(`{"content":"Done."}`), finishChunk("stop"), finalSvc, "[DONE]"},
		completion: completion(`{"role":"assistant","content":"Done."}`, `"stop"`,
			`"svc":{"worker":{"id":"w1","name":"box","version":null},"request_id":"r1","timing":{"total_ms":40},"web_tool_steps":[`+
				`{"index":0,"name":"web_fetch","arguments":"{\"url\":\"https://a.example\"}","ok":true,"result":"A page","result_chars":6},`+
				`{"index":1,"name":"web_search","arguments":"{\"query\":\"b\"}","ok":false,"result":"","result_chars":0,"error":"refused"}]}`),
		last: "response.completed",
		types: []string{"created", "in_progress", "keepalive", "keepalive", "keepalive", "keepalive", "output_item.added", "content_part.added",
			"output_text.delta", "output_text.done", "content_part.done", "output_item.done", "completed"},
	}, {
		name:       "nothing before done",
		chunks:     []string{"[DONE]"},
		completion: `{"model":"m","choices":[]}`,
		last:       "response.completed",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream("r1", "m", 1700)
			var out []byte
			for _, c := range tc.chunks {
				out = s.Chunk(out, []byte(c))
			}
			if more := s.Chunk(nil, []byte(chunk(`{"content":"late"}`))); len(more) != 0 {
				t.Errorf("events after [DONE]: %s", more)
			}
			events, _ := checkStream(t, out)
			if got := events[len(events)-1].typ; got != tc.last {
				t.Errorf("last event %s, want %s", got, tc.last)
			}
			if tc.types != nil && !reflect.DeepEqual(types(events), tc.types) {
				t.Errorf("events\n got %q\nwant %q", types(events), tc.types)
			}
			// The gateway's chunks and completions name the model asked for.
			same := strings.Replace(tc.completion, `"engine-model"`, `"m"`, 1)
			want, err := fromChat([]byte(same), "r1", 1700)
			if err != nil {
				t.Fatal(err)
			}
			if got := terminalRaw(t, events); !bytes.Equal(got, want) {
				t.Errorf("streamed response\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestStreamEchoesTheRequest: the request's parameters reach every
// response object of the stream, as they reach FromChat's.
func TestStreamEchoesTheRequest(t *testing.T) {
	r, err := responses.Parse([]byte(req(`"input":"hi"`, `"stream":true`, `"instructions":"sys"`, `"temperature":0.3`, `"text":{"format":{"type":"json_object"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	s := r.NewStream("r9", 5)
	var out []byte
	for _, c := range []string{chunk(`{"content":"{}"}`), finishChunk("stop"), usageChunk, finalSvc, "[DONE]"} {
		out = s.Chunk(out, []byte(c))
	}
	events, _ := checkStream(t, out)
	for _, e := range []sseEvent{events[0], events[len(events)-1]} {
		resp := member(t, e.raw, "response")
		for key, want := range map[string]string{"model": `"m"`, "instructions": `"sys"`, "temperature": `0.3`, "text": `{"format":{"type":"json_object"}}`} {
			sameJSON(t, e.typ+" "+key, member(t, resp, key), []byte(want))
		}
	}
	want, err := r.FromChat([]byte(completion(`{"content":"{}"}`, `"stop"`, streamUsage, `"svc":{"worker":{"id":"w1","name":"box","version":null},"request_id":"r1","timing":{"total_ms":40}}`)), "r9", 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := terminalRaw(t, events); !bytes.Equal(got, want) {
		t.Errorf("streamed response\n got %s\nwant %s", got, want)
	}
}

func TestStreamFail(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		fail   bool // call Fail after the chunks
		code   string
		// apiCode is the Responses API's code for code.
		apiCode string
		msg     string
		retry   int
		output  string
	}{{
		name:   "after text",
		chunks: []string{chunk(`{"reasoning_content":"r"}`), chunk(`{"content":"partial"}`)},
		fail:   true, code: "worker_lost", apiCode: "server_error", msg: "The worker went away.",
		output: `[{"type":"reasoning","id":"rs_r1","summary":[{"type":"summary_text","text":"r"}]},
			{"type":"message","id":"msg_r1","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"partial","annotations":[]}]}]`,
	}, {
		name: "before anything",
		fail: true,
		code: "timeout", apiCode: "server_error", msg: "The request timed out",
		output: `[]`,
	}, {
		name: "capacity, with its wait",
		fail: true,
		code: "capacity_exceeded", apiCode: "rate_limit_exceeded", msg: "Every worker serving m is busy", retry: 3,
		output: `[]`,
	}, {
		name:   "capacity in the stream, with its wait",
		chunks: []string{`{"error":{"message":"busy","type":"rate_limit_error","code":"capacity_exceeded","status":429,"retry_after":2,"queue_depth":4}}`},
		code:   "capacity_exceeded", apiCode: "rate_limit_exceeded", msg: "busy", retry: 2,
		output: `[]`,
	}, {
		name: "an error in the stream",
		chunks: []string{toolDelta(`{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}`),
			`{"error":{"message":"engine crashed","type":"server_error","code":null}}`},
		code: "server_error", apiCode: "server_error", msg: "engine crashed",
		output: `[{"type":"function_call","id":"fc_r1_0","status":"incomplete","call_id":"c","name":"f","arguments":"{"}]`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream("r1", "m", 1)
			var out []byte
			for _, c := range tc.chunks {
				out = s.Chunk(out, []byte(c))
			}
			if tc.fail {
				out = s.Fail(out, tc.code, tc.msg, tc.retry)
			}
			if more := s.Fail(s.Chunk(nil, []byte("[DONE]")), "again", "again", 0); len(more) != 0 {
				t.Errorf("events after the failure: %s", more)
			}
			events, resp := checkStream(t, out)
			if got := events[len(events)-1].typ; got != "response.failed" {
				t.Fatalf("last event %s", got)
			}
			raw := terminalRaw(t, events)
			// The API's code, from its closed list, and the gateway's beside.
			want := fmt.Sprintf(`{"code":%q`, tc.apiCode)
			if tc.apiCode != tc.code {
				want += fmt.Sprintf(`,"svc_code":%q`, tc.code)
			}
			want += fmt.Sprintf(`,"message":%q`, tc.msg)
			if tc.retry > 0 {
				want += fmt.Sprintf(`,"retry_after":%d`, tc.retry)
			}
			want += "}"
			sameJSON(t, "error", member(t, raw, "error"), []byte(want))
			sameJSON(t, "output", member(t, raw, "output"), []byte(tc.output))
			if resp["incomplete_details"] != nil {
				t.Errorf("incomplete_details %v", resp["incomplete_details"])
			}
		})
	}
}
