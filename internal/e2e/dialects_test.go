package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// sseEvents splits a stream of named server-sent events into their names
// and data, in order.
func sseEvents(body string) (names, data []string) {
	for _, block := range strings.Split(body, "\n\n") {
		var name, d string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				d = v
			}
		}
		if name != "" || d != "" {
			names, data = append(names, name), append(data, d)
		}
	}
	return names, data
}

// The Messages and Responses APIs are chats underneath: both prefixes,
// the worker's headers, one chat row under the request id; refusals in
// their own field paths; a stream that fails after it started ends with
// the dialect's error event; sealed bodies and require_e2e are refused.
func TestMessagesAndResponsesAPIs(t *testing.T) {
	s, key := gateway(t)
	type api struct {
		path, body, stream, failing, invalid, invalidField, doneEvent, errorEvent string
	}
	apis := []api{
		{
			path:         "/messages",
			body:         `{"model":"sim-chat","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`,
			stream:       `{"model":"sim-chat","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello"}]}`,
			failing:      `{"model":"sim-chat","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hello\nsim: fail=500 after=3"}]}`,
			invalid:      `{"model":"sim-chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"video"}]}]}`,
			invalidField: "messages.0.content.0.type",
			doneEvent:    "message_stop",
			errorEvent:   "error",
		},
		{
			path:         "/responses",
			body:         `{"model":"sim-chat","input":"hello"}`,
			stream:       `{"model":"sim-chat","input":"hello","stream":true}`,
			failing:      `{"model":"sim-chat","input":"hello\nsim: fail=500 after=3","stream":true}`,
			invalid:      `{"model":"sim-chat","input":[{"role":"user","content":[{"type":"input_video"}]}]}`,
			invalidField: "input.0.content.0.type",
			doneEvent:    "response.completed",
			errorEvent:   "response.failed",
		},
	}
	for _, a := range apis {
		for _, prefix := range []string{"/v1", "/api/v1"} {
			t.Run(prefix+a.path, func(t *testing.T) {
				r := s.do("POST", prefix+a.path, a.body, bearer(key))
				id := r.Header.Get("X-Request-Id")
				if r.Status != 200 || r.Header.Get("X-Worker-Name") != "sim-box" || id == "" || !strings.Contains(string(r.Body), id) {
					t.Fatalf("%d %v %s", r.Status, r.Header, r.Body)
				}
				if row := waitRow(t, s, key, id); row["request_type"] != "chat" || row["status_code"] != float64(200) ||
					row["completion_tokens"].(float64) == 0 {
					t.Fatalf("row %v", row)
				}

				r = s.do("POST", prefix+a.path, a.stream, bearer(key))
				names, events := sseEvents(string(r.Body))
				if r.Status != 200 || r.Header.Get("Content-Type") != "text/event-stream" || len(names) < 3 || names[len(names)-1] != a.doneEvent {
					t.Fatalf("stream %d %v: %s", r.Status, names, r.Body)
				}
				if a.path == "/messages" {
					// The prompt's tokens at message_start, estimated,
					// as the real API has them there.
					var start struct {
						Message struct {
							Usage struct {
								InputTokens int `json:"input_tokens"`
							}
						}
					}
					if json.Unmarshal([]byte(events[0]), &start) != nil || start.Message.Usage.InputTokens == 0 {
						t.Fatalf("message_start %s", events[0])
					}
				}
				// A worker free at once is named on the stream too (the
				// spec's header table).
				if r.Header.Get("X-Worker-Name") != "sim-box" || r.Header.Get("X-Worker-Id") == "" {
					t.Fatalf("stream headers %v", r.Header)
				}
				waitRow(t, s, key, r.Header.Get("X-Request-Id"))

				r = s.do("POST", prefix+a.path, a.failing, bearer(key))
				names, data := sseEvents(string(r.Body))
				if r.Status != 200 || len(names) == 0 || names[len(names)-1] != a.errorEvent || !strings.Contains(data[len(data)-1], "error") {
					t.Fatalf("failed stream %d %v: %s", r.Status, names, r.Body)
				}
				if row := waitRow(t, s, key, r.Header.Get("X-Request-Id")); row["status_code"] == float64(200) {
					t.Fatalf("failed stream's row %v", row)
				}

				r = s.do("POST", prefix+a.path, a.invalid, bearer(key))
				if r.Status != 422 || !strings.Contains(string(r.Body), `"field":"`+a.invalidField+`"`) {
					t.Fatalf("invalid: %d %s", r.Status, r.Body)
				}
				// Anthropic's SDKs read the request id from request-id.
				if got, want := r.Header.Get("Request-Id"), r.Header.Get("X-Request-Id"); (a.path == "/messages") != (got != "") || got != "" && got != want {
					t.Fatalf("%s: Request-Id %q beside X-Request-Id %q", a.path, got, want)
				}
				r = s.do("POST", prefix+a.path, `{}`, bearer(key), header{"Content-Type", "application/vnd.svc.e2e+json"})
				if r.Status != 400 || !strings.Contains(string(r.Body), "/v1/chat/completions") {
					t.Fatalf("sealed: %d %s", r.Status, r.Body)
				}
			})
		}
	}
	if r := s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e": true}`); r.Status != 200 {
		t.Fatalf("require_e2e: %d %s", r.Status, r.Body)
	}
	for _, a := range apis {
		// The spec's nested shape on every dialect, Anthropic's envelope
		// beside it on messages.
		r := s.do("POST", "/v1"+a.path, a.body, header{"x-api-key", key}, header{"anthropic-version", "2023-06-01"})
		var nested struct {
			Detail struct {
				Error struct {
					Type string `json:"type"`
				} `json:"error"`
			} `json:"detail"`
		}
		if json.Unmarshal(r.Body, &nested); r.Status != 403 || nested.Detail.Error.Type != "e2e_required" {
			t.Fatalf("%s under require_e2e: %d %s", a.path, r.Status, r.Body)
		}
	}
}

// The dialects' output caps count thinking, as their APIs define them:
// Anthropic's max_tokens and the Responses API's max_output_tokens bound
// thinking and answer together. Anthropic's thinking disabled turns a
// reasoning model's thinking off.
func TestDialectCapsCountThinking(t *testing.T) {
	s, key := gateway(t)
	for _, tt := range []struct {
		name, path, body string
		out              []string // in the reply, each
	}{
		{"messages", "/v1/messages",
			`{"model":"sim-reasoner","max_tokens":40,"thinking":{"type":"enabled","budget_tokens":30},"messages":[{"role":"user","content":"hi\nsim: reasoning=25 tokens=60"}]}`,
			[]string{`"stop_reason":"max_tokens"`, `"output_tokens":40`, `"type":"thinking"`}},
		{"messages, budget spent", "/v1/messages",
			`{"model":"sim-reasoner","max_tokens":20,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi\nsim: reasoning=50 tokens=60"}]}`,
			[]string{`"stop_reason":"max_tokens"`, `"output_tokens":20`}},
		{"responses", "/v1/responses",
			`{"model":"sim-reasoner","max_output_tokens":20,"reasoning":{"effort":"medium"},"input":"hi\nsim: reasoning=30 tokens=30"}`,
			[]string{`"status":"incomplete"`, `"reason":"max_output_tokens"`, `"output_tokens":20`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do("POST", tt.path, tt.body, bearer(key))
			for _, want := range tt.out {
				if r.Status != 200 || !strings.Contains(string(r.Body), want) {
					t.Fatalf("%d, want %s in %s", r.Status, want, r.Body)
				}
			}
		})
	}
	r := s.do("POST", "/v1/messages", `{"model":"sim-reasoner","max_tokens":200,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"hi"}]}`, bearer(key))
	if r.Status != 200 || strings.Contains(string(r.Body), `"type":"thinking"`) || !strings.Contains(string(r.Body), `"type":"text"`) {
		t.Fatalf("thinking disabled: %d %s", r.Status, r.Body)
	}
}

// A reply cut at a stop sequence says which, in the Messages API's terms:
// the engine reports the sequence it matched.
func TestMessagesStopSequence(t *testing.T) {
	s, key := gateway(t)
	for _, stream := range []string{"false", "true"} {
		r := s.do("POST", "/v1/messages", `{"model":"sim-chat","max_tokens":200,"stream":`+stream+`,"stop_sequences":["e"],"messages":[{"role":"user","content":"tell me more\nsim: tokens=40"}]}`, bearer(key))
		if r.Status != 200 || !strings.Contains(string(r.Body), `"stop_reason":"stop_sequence"`) || !strings.Contains(string(r.Body), `"stop_sequence":"e"`) {
			t.Fatalf("stream %s: %d %s", stream, r.Status, r.Body)
		}
	}
}

// Anthropic's token count and model list, as its SDKs call them: the count
// is the estimate message_start gives, no max_tokens needed, failures in
// Anthropic's envelope; the list pages by Anthropic's parameters when
// asked, and is whole when not.
func TestAnthropicCountTokensAndModels(t *testing.T) {
	s, key := gateway(t)
	count := func(body string) (int, map[string]any) {
		t.Helper()
		r := s.do("POST", "/v1/messages/count_tokens", body, bearer(key), header{"anthropic-version", "2023-06-01"})
		var out map[string]any
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		return r.Status, out
	}
	// 44 characters of text, 11 tokens at four characters a token.
	status, out := count(`{"model":"sim-chat","system":"be brief","messages":[{"role":"user","content":"hello there, tell me more about it"}]}`)
	if status != 200 || out["input_tokens"] != float64(11) {
		t.Fatalf("count: %d %v", status, out)
	}
	// A tool's definition counts: "f", "d" and {"type":"object"}.
	_, tooled := count(`{"model":"sim-chat","tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hello there, tell me more about it"}]}`)
	if tooled["input_tokens"] != float64(14) {
		t.Fatalf("count with a tool: %v", tooled)
	}
	// message_start's estimate is the count, tools, documents and tool
	// results included.
	for _, body := range []string{
		`"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hello there, tell me more about it"}]`,
		`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"a document of some length"}},{"type":"text","text":"hi"}]}]`,
		`"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"w","input":{"city":"Paris"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny and warm"}]}]`,
	} {
		_, counted := count(`{"model":"sim-chat",` + body + `}`)
		r := s.do("POST", "/v1/messages", `{"model":"sim-chat","max_tokens":3,"stream":true,`+body+`}`, bearer(key))
		var start struct {
			Message struct {
				Usage struct {
					InputTokens float64 `json:"input_tokens"`
				} `json:"usage"`
			} `json:"message"`
		}
		if d := sseData(r.Body); r.Status != 200 || len(d) == 0 || json.Unmarshal([]byte(d[0]), &start) != nil ||
			start.Message.Usage.InputTokens != counted["input_tokens"] {
			t.Errorf("message_start's input_tokens %v, count_tokens' %v: %d %.300s", start.Message.Usage.InputTokens, counted["input_tokens"], r.Status, r.Body)
		}
	}
	for _, tc := range []struct {
		name, body string
		status     int
		errType    string
	}{
		{"no messages", `{"model":"sim-chat"}`, 422, "invalid_request_error"},
		{"malformed", `{"model":`, 400, "invalid_request_error"},
		{"unknown model", `{"model":"no-such","messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error"},
		{"not a chat model", `{"model":"sim-embed","messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error"},
	} {
		status, out := count(tc.body)
		e, _ := out["error"].(map[string]any)
		if status != tc.status || out["type"] != "error" || e["type"] != tc.errType {
			t.Errorf("%s: %d %v", tc.name, status, out)
		}
	}
	if r := s.do("POST", "/api/v1/messages/count_tokens", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`, bearer("nope")); r.Status != 401 {
		t.Errorf("no key: %d %s", r.Status, r.Body)
	}

	type page struct {
		Data []struct {
			ID, Object, Type string
			DisplayName      string `json:"display_name"`
			CreatedAt        string `json:"created_at"`
		}
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}
	list := func(query string) (int, page) {
		t.Helper()
		r := s.do("GET", "/v1/models"+query, "", bearer(key))
		var p page
		if r.Status == 200 {
			if err := json.Unmarshal(r.Body, &p); err != nil {
				t.Fatalf("%s: %s", query, r.Body)
			}
		}
		return r.Status, p
	}
	_, all := list("")
	if len(all.Data) < 3 || all.HasMore || *all.FirstID != all.Data[0].ID || *all.LastID != all.Data[len(all.Data)-1].ID {
		t.Fatalf("whole list: %+v", all)
	}
	for _, m := range all.Data {
		if _, err := time.Parse(time.RFC3339, m.CreatedAt); m.Type != "model" || m.Object != "model" || m.DisplayName != m.ID || err != nil {
			t.Fatalf("entry %+v", m)
		}
	}
	ids := func(p page) (out []string) {
		for _, m := range p.Data {
			out = append(out, m.ID)
		}
		return out
	}
	want := ids(all)
	for _, tc := range []struct {
		query string
		ids   []string
		more  bool
	}{
		{"?limit=1", want[:1], true},
		{"?limit=2&after_id=" + want[0], want[1:3], len(want) > 3},
		{"?after_id=" + want[len(want)-1], nil, false},
		{"?limit=1&before_id=" + want[2], want[1:2], true},
		{"?before_id=" + want[1], want[:1], false},
		// An id no longer listed still marks its place.
		{"?limit=1&after_id=" + want[0] + "0", want[1:2], len(want) > 2},
	} {
		status, p := list(tc.query)
		if status != 200 || !slices.Equal(ids(p), tc.ids) || p.HasMore != tc.more {
			t.Errorf("%s: %d %v more=%v, want %v more=%v", tc.query, status, ids(p), p.HasMore, tc.ids, tc.more)
		}
		if len(p.Data) == 0 && (p.FirstID != nil || p.LastID != nil) {
			t.Errorf("%s: an empty page names ids: %+v", tc.query, p)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?after_id=a&before_id=b"} {
		if status, _ := list(q); status != 422 {
			t.Errorf("%s: %d", q, status)
		}
	}
}

// An image URL an organisation does not allow is refused at the field the
// client sent, on the Messages API as on the Responses API, whatever the
// system prompt does to the chat form's indexes.
func TestRemoteImageRefusedAtTheDialectsField(t *testing.T) {
	s, key := gateway(t)
	r := s.do("POST", "/v1/messages", `{"model":"sim-chat","max_tokens":50,"system":"be brief","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`, bearer(key))
	if r.Status != 422 || !strings.Contains(string(r.Body), `"field":"messages.2.content.1.source.url"`) || strings.Contains(string(r.Body), "image_url") {
		t.Fatalf("messages: %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/responses", `{"model":"sim-chat","instructions":"be brief","input":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"https://example.com/a.png"}]}]}`, bearer(key))
	if r.Status != 422 || !strings.Contains(string(r.Body), `"field":"input.1.content.1.image_url"`) {
		t.Fatalf("responses: %d %s", r.Status, r.Body)
	}
}

// The Messages API's paths answer in Anthropic's envelope also where no
// route serves them, and its 413 names the request in Anthropic's header.
func TestMessagesErrorsAreAnthropicShaped(t *testing.T) {
	s, key := gateway(t)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/messages", 405},
		{"GET", "/v1/messages/count_tokens", 405},
		{"POST", "/v1/messages/batches", 404},
	} {
		r := s.do(tc.method, tc.path, `{}`, bearer(key))
		var env struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if r.Status != tc.status || json.Unmarshal(r.Body, &env) != nil || env.Type != "error" || env.Error.Type == "" || env.Error.Message == "" ||
			r.Header.Get("Request-Id") == "" || r.Header.Get("Request-Id") != r.Header.Get("X-Request-Id") {
			t.Errorf("%s %s = %d %s", tc.method, tc.path, r.Status, r.Body)
		}
	}
	for _, auth := range []string{"Authorization: Bearer " + key + "\r\n", ""} {
		head := "POST /v1/messages HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: application/json\r\nContent-Length: 40000000\r\n\r\n"
		status, rest := rawPost(t, s, head, nil)
		if !strings.Contains(status, "413") && !strings.Contains(status, "401") || !strings.Contains(strings.ToLower(rest), "\nrequest-id: ") ||
			!strings.Contains(rest, `"type":"error"`) {
			t.Errorf("a body over the limit (key %v) = %s\n%s", auth != "", status, rest)
		}
	}
}

// Anthropic's SDKs list and read models through the shared models routes,
// and read the request id of any answer, an error's too, from request-id.
func TestModelsRoutesGiveAnthropicClientsTheirRequestID(t *testing.T) {
	s, key := gateway(t)
	for _, path := range []string{"/v1/models", "/v1/models/sim-chat", "/v1/models/no-such-model"} {
		r := s.do("GET", path, "", header{"x-api-key", key}, header{"anthropic-version", "2023-06-01"})
		if got, want := r.Header.Get("Request-Id"), r.Header.Get("X-Request-Id"); want == "" || got != want {
			t.Fatalf("%s: %d, Request-Id %q beside X-Request-Id %q", path, r.Status, got, want)
		}

	}
}
