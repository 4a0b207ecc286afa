package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// webStep is a step as replies and stream events carry it.
type webStep struct {
	Index       int     `json:"index"`
	Name        string  `json:"name"`
	Arguments   string  `json:"arguments"`
	OK          *bool   `json:"ok"`
	Result      string  `json:"result"`
	ResultChars *int    `json:"result_chars"`
	Error       *string `json:"error"`
}

// webToolsGateway runs a gateway, a local web site, a SearXNG stand-in
// whose hits point at the site, and a sim worker with web tools that may
// reach the site (and only it) although it is on loopback.
func webToolsGateway(t *testing.T) (s *server, key, site string, searches *[]string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/otters", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<html><head><title>Sea otters</title><script>ads()</script></head><body><nav>Menu</nav>` +
			`<h1>Sea otters</h1><p>Sea otters hold hands while they sleep.</p></body></html>`))
	})
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	var queries []string
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.NotFound(w, r)
			return
		}
		queries = append(queries, r.URL.Query().Get("q"))
		json.NewEncoder(w).Encode(map[string]any{"results": []any{
			map[string]any{"title": "Otters hold hands", "url": web.URL + "/otters", "content": "Why sea otters hold hands."},
		}})
	}))
	t.Cleanup(searx.Close)
	s = startServer(t, "")
	startWorker(t, s.URL, s.tokenFile(), "web-box", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "4",
		"--web-tools", "--web-search", "searxng="+searx.URL, "--web-allow-host", strings.TrimPrefix(web.URL, "http://"))
	return s, s.adminKey(), web.URL, &queries
}

func TestWebToolsUnary(t *testing.T) {
	s, key, site, queries := webToolsGateway(t)
	chat := func(prompt, extra string) (reply, map[string]any) {
		t.Helper()
		body, _ := json.Marshal(prompt)
		r := s.do("POST", "/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":`+string(body)+`}]`+extra+`}`, bearer(key))
		if r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		return r, r.JSON(t)
	}
	steps := func(m map[string]any) []webStep {
		t.Helper()
		var out struct {
			Svc struct {
				Steps []webStep `json:"web_tool_steps"`
			} `json:"svc"`
		}
		json.Unmarshal(mustJSON(m), &out)
		return out.Svc.Steps
	}

	// A URL in the message is fetched, as text without the page's chrome.
	r, m := chat("Summarise "+site+"/otters please", "")
	st := steps(m)
	if len(st) != 1 || st[0].Index != 0 || st[0].Name != "web_fetch" || st[0].Arguments != `{"url":"`+site+`/otters"}` ||
		st[0].OK == nil || !*st[0].OK || st[0].Error != nil || *st[0].ResultChars != len(st[0].Result) ||
		!strings.Contains(st[0].Result, "# Sea otters\n\nSea otters hold hands while they sleep.") ||
		strings.Contains(st[0].Result, "Menu") || strings.Contains(st[0].Result, "ads()") {
		t.Fatalf("steps %+v", st)
	}
	choice := m["choices"].([]any)[0].(map[string]any)
	if choice["finish_reason"] != "stop" || choice["message"].(map[string]any)["content"] == "" {
		t.Fatalf("answer %v", choice)
	}
	// The steps are in svc alone: the worker's own member was moved there.
	if _, twice := m["web_tool_steps"]; twice {
		t.Fatalf("steps beside svc too: %s", r.Body)
	}
	// The row counts both turns, as the reply's usage does.
	u := m["usage"].(map[string]any)
	row := waitRow(t, s, key, r.Header.Get("X-Request-Id"))
	if row["status_code"] != 200.0 || row["prompt_tokens"] != u["prompt_tokens"] || row["completion_tokens"] != u["completion_tokens"] ||
		row["tokens_estimated"] == true || row["worker_name"] != "web-box" {
		t.Fatalf("row %v, usage %v", row, u)
	}
	if m["svc"].(map[string]any)["timing"].(map[string]any)["ttft_ms"] == nil {
		t.Errorf("no ttft: %v", m["svc"])
	}

	// A search goes to the backend.
	_, m = chat("Please search for sea otters", "")
	if st := steps(m); len(st) != 1 || st[0].Name != "web_search" || !*st[0].OK ||
		!strings.HasPrefix(st[0].Result, "1. Otters hold hands\n"+site+"/otters\nWhy sea otters hold hands.") {
		t.Fatalf("search steps %+v", st)
	}
	if len(*queries) != 1 || (*queries)[0] != "sea otters" {
		t.Errorf("queries %q", *queries)
	}

	// Inward addresses stay refused, the allowed one aside; the model is
	// told and answers anyway.
	for _, u := range []string{"http://10.0.0.1/admin", "http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:1/"} {
		_, m = chat("What is at "+u+"?", "")
		if st := steps(m); len(st) != 1 || *st[0].OK || st[0].Error == nil || !strings.Contains(*st[0].Error, "address") || st[0].Result != "" {
			t.Fatalf("%s: steps %+v", u, st)
		}
	}

	// A thinking model's answer capped apart from its thinking keeps its
	// steps, and the timing of the whole wait.
	body, _ := json.Marshal("Summarise " + site + "/otters please")
	r = s.do("POST", "/v1/chat/completions", `{"model":"sim-reasoner","max_tokens":3,"messages":[{"role":"user","content":`+string(body)+`}]}`, bearer(key))
	if r.Status != 200 {
		t.Fatalf("capped: %d %s", r.Status, r.Body)
	}
	m = r.JSON(t)
	if st := steps(m); len(st) != 1 || st[0].Name != "web_fetch" || st[0].OK == nil || !*st[0].OK {
		t.Fatalf("capped: steps %+v in %s", st, r.Body)
	}
	if m["svc"].(map[string]any)["timing"].(map[string]any)["ttft_ms"] == nil {
		t.Errorf("capped: no ttft: %v", m["svc"])
	}

	// A client's own tools, or tool_choice none, leave the web tools out.
	for _, extra := range []string{
		`,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`,
		`,"tool_choice":"none"`,
	} {
		_, m = chat("Summarise "+site+"/otters please", extra)
		if steps(m) != nil {
			t.Fatalf("%s: steps %v", extra, m["svc"])
		}
	}
}

func TestWebToolsStream(t *testing.T) {
	s, key, site, _ := webToolsGateway(t)
	r := s.do("POST", "/v1/chat/completions", `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"Look up otters, then tell me."}]}`, bearer(key))
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var kinds []string
	var steps []webStep
	var text strings.Builder
	var ttft any
	for _, d := range sseData(r.Body) {
		if d == "[DONE]" {
			kinds = append(kinds, "done")
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls any    `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Usage any            `json:"usage"`
			Svc   map[string]any `json:"svc"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		switch {
		case c.Svc["web_tool_step"] != nil:
			if c.Choices == nil || len(c.Choices) != 0 {
				t.Errorf("step event with choices: %s", d)
			}
			var st webStep
			json.Unmarshal(mustJSON(c.Svc["web_tool_step"]), &st)
			steps = append(steps, st)
			kinds = append(kinds, "step")
		case len(c.Choices) > 0:
			if c.Choices[0].Delta.ToolCalls != nil {
				t.Errorf("a tool call reached the client: %s", d)
			}
			text.WriteString(c.Choices[0].Delta.Content)
			if len(kinds) == 0 || kinds[len(kinds)-1] != "chunk" {
				kinds = append(kinds, "chunk")
			}
		case c.Usage != nil:
			kinds = append(kinds, "usage")
		case c.Svc["timing"] != nil:
			ttft = c.Svc["timing"].(map[string]any)["ttft_ms"]
			kinds = append(kinds, "svc")
		}
	}
	if got := strings.Join(kinds, ","); got != "step,step,chunk,usage,svc,done" {
		t.Fatalf("events %s\n%s", got, r.Body)
	}
	call, result := steps[0], steps[1]
	if call.Index != 0 || call.Name != "web_search" || call.Arguments != `{"query":"otters, then tell me"}` || call.OK != nil || call.ResultChars != nil {
		t.Errorf("call event %+v", call)
	}
	if result.Index != 0 || result.Name != "web_search" || result.Arguments != call.Arguments || result.OK == nil || !*result.OK ||
		!strings.Contains(result.Result, site+"/otters") || *result.ResultChars != len(result.Result) {
		t.Errorf("result event %+v", result)
	}
	if text.Len() == 0 || ttft == nil {
		t.Errorf("text %q, ttft %v", text.String(), ttft)
	}
	row := waitRow(t, s, key, r.Header.Get("X-Request-Id"))
	if row["status_code"] != 200.0 || row["stream"] != true || row["tokens_estimated"] == true || row["completion_tokens"].(float64) == 0 {
		t.Fatalf("row %v", row)
	}
}

// TestWebToolsStreamOtherDialects: a streamed Messages or Responses reply
// shows each step as it starts and ends, as a chat stream does, and lists
// them all in its svc at the end, as a whole reply does.
func TestWebToolsStreamOtherDialects(t *testing.T) {
	s, key, site, _ := webToolsGateway(t)
	for _, tc := range []struct {
		path, body, stepType, lastType string
	}{
		{"/v1/messages", `{"model":"sim-chat","max_tokens":200,"stream":true,"messages":[{"role":"user","content":"Look up otters, then tell me."}]}`,
			"svc.web_tool_step", "message_delta"},
		{"/v1/responses", `{"model":"sim-chat","stream":true,"input":"Look up otters, then tell me."}`, "keepalive", "response.completed"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := s.do("POST", tc.path, tc.body, bearer(key))
			if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			var live, last []webStep
			for _, d := range sseData(r.Body) {
				var ev struct {
					Type     string `json:"type"`
					Response struct {
						Svc struct {
							WebToolSteps []webStep `json:"web_tool_steps"`
						} `json:"svc"`
					} `json:"response"`
				}
				var svc struct {
					Svc struct {
						WebToolStep  *webStep  `json:"web_tool_step"`
						WebToolSteps []webStep `json:"web_tool_steps"`
					} `json:"svc"`
				}
				if err := json.Unmarshal([]byte(d), &ev); err != nil {
					t.Fatalf("%s: %v", d, err)
				}
				json.Unmarshal([]byte(d), &svc)
				switch ev.Type {
				case tc.stepType:
					if svc.Svc.WebToolStep != nil {
						live = append(live, *svc.Svc.WebToolStep)
					}
				case "message_delta":
					last = svc.Svc.WebToolSteps
				case "response.completed":
					last = ev.Response.Svc.WebToolSteps
				}
			}
			if len(live) != 2 || live[0].OK != nil || live[1].OK == nil || !*live[1].OK || live[0].Name != "web_search" ||
				!strings.Contains(live[1].Result, site+"/otters") {
				t.Fatalf("steps as they ran %+v\n%s", live, r.Body)
			}
			if len(last) != 1 || last[0].Index != 0 || last[0].OK == nil || !*last[0].OK || last[0].Result != live[1].Result {
				t.Fatalf("steps on %s %+v\n%s", tc.lastType, last, r.Body)
			}
		})
	}
}
