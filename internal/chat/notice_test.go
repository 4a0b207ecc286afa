package chat

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func prepared(t *testing.T, b string, m *api.Model) *Request {
	t.Helper()
	r := mustParse(t, b, Options{})
	if err := r.Prepare(m); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNotice(t *testing.T) {
	windowed := model(16384, nil)
	jsonFormat := `"response_format":{"type":"json_object"}`
	strict := `"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}}`
	image := userParts(`{"type":"text","text":"describe as JSON"}`, imagePart(tinyPNG))
	imageJSON := image[:len(image)-1] + "," + jsonFormat + "}"
	tests := []struct {
		name     string
		body     string
		m        *api.Model
		o        Outcome
		code     string   // "" for no notice
		mentions []string // phrases the message must contain
	}{
		// finish_reason length: thinking took everything
		{"reasoning cut at an explicit budget the model cannot end", body(`"max_tokens":100`, `"reasoning":{"max_tokens":500}`), noBudgetModel,
			Outcome{FinishReason: "length", HadReasoning: true, ReasoningTokens: 500, CompletionTokens: 500}, NoticeTruncatedAtReasoningBudget, []string{"500 tokens"}},
		{"reasoning cut before the budget", body(`"max_tokens":100`, `"reasoning":{"max_tokens":500}`), noBudgetModel,
			Outcome{FinishReason: "length", HadReasoning: true, ReasoningTokens: 499}, NoticeTruncatedDuringReasoning, []string{"600 tokens"}},
		{"reasoning cut on a budget model", body(`"max_tokens":100`), budgetModel,
			Outcome{FinishReason: "length", HadReasoning: true, ReasoningTokens: 9000}, NoticeTruncatedDuringReasoning, nil},
		{"reasoning cut without a budget", body(`"max_tokens":100`), plainModel,
			Outcome{FinishReason: "length", HadReasoning: true, ReasoningTokens: 100}, NoticeTruncatedDuringReasoning, []string{"100 tokens"}},
		{"reasoning then a tool call is not a reasoning cut", body(`"max_tokens":100`), plainModel,
			Outcome{FinishReason: "length", HadReasoning: true, HasToolCalls: true}, "", nil},
		{"reasoning then some answer is not a reasoning cut", body(`"max_tokens":100`), plainModel,
			Outcome{FinishReason: "length", HadReasoning: true, Content: "The answer is"}, "", nil},
		// Outside JSON mode the gateway keeps no content, only whether
		// there was some.
		{"reasoning then an answer not kept is not a reasoning cut", body(`"max_tokens":5`, `"reasoning":{"max_tokens":10}`), budgetModel,
			Outcome{FinishReason: "length", HadReasoning: true, HadContent: true, ReasoningTokens: 10}, "", nil},
		{"reasoning then white space is a reasoning cut", body(`"max_tokens":100`), plainModel,
			Outcome{FinishReason: "length", HadReasoning: true, Content: "\n\n"}, NoticeTruncatedDuringReasoning, nil},

		// finish_reason length: structured output
		{"JSON cut short", body(jsonFormat, `"max_tokens":10`), plainModel,
			Outcome{FinishReason: "length", Content: `{"a": [1, 2`}, NoticeTruncatedDuringStructuredOutput, []string{"response_format"}},
		{"JSON schema cut short", body(strict, `"max_tokens":10`), plainModel,
			Outcome{FinishReason: "length", Content: `{"a"`}, NoticeTruncatedDuringStructuredOutput, nil},
		{"JSON complete at the cap", body(jsonFormat, `"max_tokens":10`), plainModel,
			Outcome{FinishReason: "length", Content: `{"a": 1}`}, "", nil},
		{"JSON content truncated by the gateway", body(jsonFormat, `"max_tokens":10`), plainModel,
			Outcome{FinishReason: "length", Content: `{"a": 1}`, ContentTruncated: true}, NoticeTruncatedDuringStructuredOutput, nil},
		{"JSON mode cut during a tool call", body(jsonFormat, `"max_tokens":10`), plainModel,
			Outcome{FinishReason: "length", HasToolCalls: true}, "", nil},

		// finish_reason length: limits
		{"default cap reached", body(), plainModel,
			Outcome{FinishReason: "length", Content: "long", PromptTokens: 10, CompletionTokens: DefaultMaxTokens}, NoticeTruncatedAtDefaultMaxTokens, []string{"32,768"}},
		{"default cap reached, unknown model", body(), nil,
			Outcome{FinishReason: "length", Content: "long", CompletionTokens: DefaultMaxTokens + 3}, NoticeTruncatedAtDefaultMaxTokens, nil},
		{"default cap lowered by the window", body(), windowed,
			Outcome{FinishReason: "length", Content: "long", PromptTokens: 4000, CompletionTokens: 12384}, NoticeContextWindowExhausted,
			[]string{"4,000", "12,384", "16,384", "larger max_tokens does not help"}},
		{"default cap, window known, short stop", body(), windowed,
			Outcome{FinishReason: "length", Content: "long", PromptTokens: 100, CompletionTokens: 50}, NoticeContextWindowExhausted, nil},
		{"user cap but the window filled", body(`"max_tokens":100000`), windowed,
			Outcome{FinishReason: "length", Content: "long", PromptTokens: 6384, CompletionTokens: 10000}, NoticeContextWindowExhausted, nil},
		{"user cap reached", body(`"max_tokens":100`), windowed,
			Outcome{FinishReason: "length", Content: "long", PromptTokens: 50, CompletionTokens: 100}, "", nil},
		{"user cap reached, no window", body(`"max_tokens":100`), plainModel,
			Outcome{FinishReason: "length", Content: "long", CompletionTokens: 100}, "", nil},
		{"default cap not reached, no window", body(), plainModel,
			Outcome{FinishReason: "length", Content: "long", CompletionTokens: 20000}, "", nil},

		// finish_reason stop / tool_calls
		{"budget reached then answered", body(), budgetModel,
			Outcome{FinishReason: "stop", Content: "42", HadReasoning: true, ReasoningTokens: DefaultThinkingBudget}, NoticeReasoningBudgetReached, []string{"8,192"}},
		{"explicit budget reached then a tool call", body(`"reasoning":{"max_tokens":256}`), budgetModel,
			Outcome{FinishReason: "tool_calls", Content: "calling", HasToolCalls: true, HadReasoning: true, ReasoningTokens: 300}, NoticeReasoningBudgetReached, []string{"256"}},
		{"budget reached then answered, the answer not kept", body(`"reasoning":{"max_tokens":10}`), budgetModel,
			Outcome{FinishReason: "stop", HadContent: true, HadReasoning: true, ReasoningTokens: 10}, NoticeReasoningBudgetReached, []string{"10 tokens"}},
		{"budget not reached", body(), budgetModel,
			Outcome{FinishReason: "stop", Content: "42", HadReasoning: true, ReasoningTokens: 100}, "", nil},
		{"budget reached, no answer", body(), budgetModel,
			Outcome{FinishReason: "stop", HadReasoning: true, ReasoningTokens: DefaultThinkingBudget}, "", nil},
		{"budget reached on a model that cannot end thinking", body(`"reasoning":{"max_tokens":256}`), noBudgetModel,
			Outcome{FinishReason: "stop", Content: "42", ReasoningTokens: 300}, "", nil},
		{"not JSON", body(jsonFormat), plainModel,
			Outcome{FinishReason: "stop", Content: "Sure! ```json\n{}\n```"}, NoticeStructuredOutputNotJSON, []string{"did not produce JSON"}},
		{"not JSON, empty", body(jsonFormat), plainModel,
			Outcome{FinishReason: "stop"}, NoticeStructuredOutputNotJSON, nil},
		{"not JSON after thinking", body(jsonFormat), budgetModel,
			Outcome{FinishReason: "stop", HadReasoning: true, ReasoningTokens: 10}, NoticeStructuredOutputNotJSON, []string{"thinking"}},
		{"not JSON with an image", imageJSON, plainModel,
			Outcome{FinishReason: "stop", Content: "A cat."}, NoticeStructuredOutputNotJSON, []string{"not applied to requests with images"}},
		{"JSON", body(jsonFormat), plainModel,
			Outcome{FinishReason: "stop", Content: " \n{\"a\": [1, 2]}\n"}, "", nil},
		{"JSON scalar", body(jsonFormat), plainModel,
			Outcome{FinishReason: "stop", Content: `"text"`}, "", nil},
		{"not JSON but truncated copy", body(jsonFormat), plainModel,
			Outcome{FinishReason: "stop", Content: `{"a": "`, ContentTruncated: true}, "", nil},
		{"not JSON but tool calls", body(jsonFormat), plainModel,
			Outcome{FinishReason: "tool_calls", HasToolCalls: true}, "", nil},
		{"budget notice comes first", body(jsonFormat), budgetModel,
			Outcome{FinishReason: "stop", Content: "not json", ReasoningTokens: DefaultThinkingBudget}, NoticeReasoningBudgetReached, nil},
		{"plain text is fine", body(), plainModel,
			Outcome{FinishReason: "stop", Content: "not json"}, "", nil},
		{"strict schema with valid output", body(strict), plainModel,
			Outcome{FinishReason: "stop", Content: `{}`}, "", nil},

		// other endings
		{"content filter", body(jsonFormat), plainModel, Outcome{FinishReason: "content_filter"}, "", nil},
		{"no finish reason", body(), plainModel, Outcome{CompletionTokens: DefaultMaxTokens}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := prepared(t, tt.body, tt.m)
			n := r.Notice(tt.o, nil, tt.m)
			if tt.code == "" {
				if n != nil {
					t.Fatalf("notice = %+v, want none", n)
				}
				return
			}
			if n == nil || n.Code != tt.code {
				t.Fatalf("notice = %+v, want %s", n, tt.code)
			}
			if !strings.HasSuffix(n.Message, ".") || strings.Contains(n.Message, "%!") {
				t.Errorf("message %q should be a sentence", n.Message)
			}
			for _, p := range tt.mentions {
				if !strings.Contains(n.Message, p) {
					t.Errorf("message %q lacks %q", n.Message, p)
				}
			}
		})
	}
}

func TestNoticeEngineWins(t *testing.T) {
	r := prepared(t, body(`"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true}}`), plainModel)
	engine := &api.Notice{Code: NoticeStrictSchemaNotEnforced, Message: "pattern ignored"}
	for _, o := range []Outcome{{FinishReason: "stop", Content: "{}"}, {FinishReason: "length", Content: "{"}, {}} {
		if got := r.Notice(o, engine, plainModel); got != engine {
			t.Errorf("Notice(%+v) = %+v, want the engine's", o, got)
		}
	}
}
