package responses_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	oai "github.com/openai/openai-go/v3/responses"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/responses"
)

// fakeGateway serves /v1/responses the way the gateway will: Parse, the
// chat side's own Parse of the body, then an engine's scripted answer
// translated back. The official Go SDK is its client, so what the SDK
// sends must parse and what comes back must decode.
type fakeGateway struct {
	t *testing.T
	// engine answers a chat body: a completion, or the chunks of a stream.
	engine func(chatBody []byte) (completion string, chunks []string)

	mu    sync.Mutex
	chats [][]byte
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(hr.Body)
	r, err := responses.Parse(body)
	if err == nil {
		if _, err = chat.Parse(r.Chat(), chat.Options{AllowRemoteImages: true}); err != nil {
			g.t.Errorf("chat.Parse refused %s: %v", r.Chat(), err)
		}
	}
	if err != nil {
		ae := api.ErrorOf(err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ae.HTTPStatus())
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": ae.Message, "type": ae.ErrorType(), "param": ae.Param, "code": nil}})
		return
	}
	g.mu.Lock()
	g.chats = append(g.chats, r.Chat())
	g.mu.Unlock()
	completion, chunks := g.engine(r.Chat())
	if !r.Stream {
		out, err := r.FromChat([]byte(completion), "req1", 1700000000)
		if err != nil {
			g.t.Errorf("FromChat: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	s := r.NewStream("req1", 1700000000)
	for _, c := range chunks {
		_, _ = w.Write(s.Chunk(nil, []byte(c)))
	}
}

func (g *fakeGateway) client(t *testing.T) openai.Client {
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func (g *fakeGateway) lastChat() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.chats[len(g.chats)-1]
}

// TestSDKToolRoundTrip runs a function-calling conversation through the
// official Go SDK: a call comes back, its output goes in with the call, and
// the engine sees one assistant turn with the call and a tool message.
func TestSDKToolRoundTrip(t *testing.T) {
	g := &fakeGateway{t: t}
	turn := 0
	g.engine = func(body []byte) (string, []string) {
		turn++
		if turn == 1 {
			return completion(`{"role":"assistant","content":null,"reasoning_content":"Need the weather.",
				"tool_calls":[{"id":"call_7","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]}`,
				`"tool_calls"`, chatUsage, svcMember), nil
		}
		return completion(`{"role":"assistant","content":"Sunny in Paris."}`, `"stop"`, chatUsage), nil
	}
	client := g.client(t)
	ctx := context.Background()
	params := oai.ResponseNewParams{
		Model:        "qwen3",
		Instructions: openai.String("Answer briefly."),
		Input: oai.ResponseNewParamsInputUnion{OfInputItemList: oai.ResponseInputParam{
			oai.ResponseInputItemParamOfMessage("Weather in Paris?", oai.EasyInputMessageRoleUser),
		}},
		Tools: []oai.ToolUnionParam{oai.ToolParamOfFunction("weather", map[string]any{
			"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required": []string{"city"}, "additionalProperties": false,
		}, true)},
		MaxOutputTokens: openai.Int(256),
		Temperature:     openai.Float(0.2),
		Store:           openai.Bool(true),
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "first chat body", g.lastChat(), []byte(`{"model":"qwen3","messages":[{"role":"system","content":"Answer briefly."},{"role":"user","content":"Weather in Paris?"}],
		"max_completion_tokens":256,"temperature":0.2,
		"tools":[{"type":"function","function":{"name":"weather","parameters":{"additionalProperties":false,"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"},"strict":true}}]}`))
	if resp.ID != "resp_req1" || resp.Status != oai.ResponseStatusCompleted || resp.Model != "qwen3" || len(resp.Output) != 2 {
		t.Fatalf("response %s", resp.RawJSON())
	}
	if r := resp.Output[0].AsReasoning(); r.Summary[0].Text != "Need the weather." {
		t.Errorf("reasoning %+v", r)
	}
	call := resp.Output[1].AsFunctionCall()
	if call.CallID != "call_7" || call.Name != "weather" || call.Arguments != `{"city":"Paris"}` || call.ID != "fc_req1_0" {
		t.Fatalf("call %+v", call)
	}
	if resp.Usage.InputTokens != 11 || resp.Usage.OutputTokens != 7 || resp.Usage.TotalTokens != 18 || resp.Temperature != 0.2 || resp.MaxOutputTokens != 256 {
		t.Errorf("usage %+v, temperature %v, max %v", resp.Usage, resp.Temperature, resp.MaxOutputTokens)
	}
	var extra struct {
		Svc struct {
			RequestID string `json:"request_id"`
		} `json:"svc"`
	}
	if err := json.Unmarshal([]byte(resp.RawJSON()), &extra); err != nil || extra.Svc.RequestID != "r1" {
		t.Errorf("svc not at the top: %s", resp.RawJSON())
	}

	out := oai.ResponseInputItemParamOfFunctionCallOutput(`{"sky":"clear"}`)
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	params.Input.OfInputItemList = append(params.Input.OfInputItemList,
		oai.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name), out)
	resp, err = client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "Sunny in Paris." {
		t.Errorf("output text %q", resp.OutputText())
	}
	sameJSON(t, "second turn's messages", member(t, g.lastChat(), "messages"), []byte(`[
		{"role":"system","content":"Answer briefly."},{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","tool_calls":[{"id":"call_7","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_7","content":"{\"sky\":\"clear\"}"}]`))
}

// TestSDKStream reads a stream with the official Go SDK: every event
// decodes, the deltas add up to the final text, and the final response
// carries usage.
func TestSDKStream(t *testing.T) {
	g := &fakeGateway{t: t}
	g.engine = func([]byte) (string, []string) {
		return "", append([]string{chunk(`{"role":"assistant","content":""}`), chunk(`{"reasoning_content":"think"}`),
			chunk(`{"content":"{\"name\":"}`), chunk(`{"content":"\"Ada\"}"}`), finishChunk("stop")}, streamTail()...)
	}
	client := g.client(t)
	stream := client.Responses.NewStreaming(context.Background(), oai.ResponseNewParams{
		Model: "qwen3",
		Input: oai.ResponseNewParamsInputUnion{OfString: openai.String("Name a mathematician as JSON.")},
		Text: oai.ResponseTextConfigParam{Format: oai.ResponseFormatTextConfigParamOfJSONSchema("person", map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}},
		})},
		Reasoning: openai.ReasoningParam{Effort: openai.ReasoningEffortLow},
	})
	var text strings.Builder
	var final *oai.Response
	var seen []string
	for stream.Next() {
		ev := stream.Current()
		seen = append(seen, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			final = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	body := g.lastChat()
	sameJSON(t, "format", member(t, body, "response_format"), []byte(`{"type":"json_schema","json_schema":{"name":"person","schema":{"properties":{"name":{"type":"string"}},"type":"object"}}}`))
	sameJSON(t, "effort", member(t, body, "reasoning_effort"), []byte(`"low"`))
	sameJSON(t, "stream options", member(t, body, "stream_options"), []byte(`{"include_usage":true}`))
	if final == nil {
		t.Fatalf("no response.completed among %q", seen)
	}
	if text.String() != `{"name":"Ada"}` || final.OutputText() != text.String() {
		t.Errorf("deltas %q, final %q", text.String(), final.OutputText())
	}
	if final.Usage.OutputTokensDetails.ReasoningTokens != 2 || final.Reasoning.Effort != "low" || final.Text.Format.Type != "json_schema" {
		t.Errorf("final %s", final.RawJSON())
	}
}

// TestSDKRefusal: the SDK reads a stateless refusal as a 400 API error.
func TestSDKRefusal(t *testing.T) {
	g := &fakeGateway{t: t, engine: func([]byte) (string, []string) { return "", nil }}
	client := g.client(t)
	_, err := client.Responses.New(context.Background(), oai.ResponseNewParams{
		Model:              "qwen3",
		Input:              oai.ResponseNewParamsInputUnion{OfString: openai.String("again")},
		PreviousResponseID: openai.String("resp_1"),
	})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || !strings.Contains(oe.Message, "stateless") {
		t.Fatalf("err %v", err)
	}
}
