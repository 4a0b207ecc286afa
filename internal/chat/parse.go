// Package chat validates and canonicalises chat-completions request bodies
// and derives the advisory notice of a finished reply.
//
// Parse checks a body against the request rules of the interface spec and
// reports every failing field at once; Prepare fits the request to the model
// that will serve it and builds the body sent to the worker; Notice explains
// a reply that ended short of what the client probably wanted.
package chat

import (
	"bytes"
	"encoding/json"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsonraw"
	"github.com/svc-dev/svc/internal/jsontext"
)

// Limits and defaults from the spec's limits table.
const (
	// DefaultMaxTokens caps a reply, thinking included, when the request
	// sets neither max_tokens nor max_completion_tokens.
	DefaultMaxTokens = 32768
	// DefaultThinkingBudget applies on models whose thinking can be ended
	// early when the request sets no reasoning.max_tokens.
	DefaultThinkingBudget = 8192
	// MaxFileBytes is the largest decoded .txt or .csv file part.
	MaxFileBytes = 1 << 20
	// MaxChoices bounds n. Each choice is a sequence the engine decodes
	// beside the others on the worker's one slot, so a request's share of
	// the GPU grows with it while the fleet counts it once.
	MaxChoices = 16
)

// TypeContextLengthExceeded is the error type of a prompt that cannot fit
// the model's context window.
const TypeContextLengthExceeded = api.TypeContextLengthExceeded

// Options are the organisation settings that change what Parse accepts.
type Options struct {
	// AllowRemoteImages permits http(s) image URLs; otherwise only data:
	// URLs (the organisation setting allow_remote_image_urls).
	AllowRemoteImages bool
	// Sealed is set for a request encrypted end to end, opened by its
	// worker: its images must be inline whatever the setting, as fetching
	// a URL would tell the image's host of the request.
	Sealed bool
}

// Request is a validated chat-completions request.
type Request struct {
	Model  string
	Stream bool
	// Messages is the raw JSON of each message as sent (used for
	// conversation affinity).
	Messages []json.RawMessage
	// PromptChars counts the characters of all message text (string
	// contents, text parts, decoded file parts, tool call arguments), for
	// ~4 chars/token estimates.
	PromptChars int
	// Images is the number of image_url parts.
	Images int
	// UserMaxTokens is max_completion_tokens if sent, else max_tokens if
	// sent, else 0.
	UserMaxTokens int
	// JSONMode is "", "json_object" or "json_schema" (response_format.type).
	JSONMode string
	// StrictSchema is response_format.json_schema.strict == true.
	StrictSchema bool
	// Thinking is the explicit thinking switch derived from
	// reasoning_effort, reasoning.effort, reasoning.max_tokens == 0 and
	// enable_thinking; nil when the request does not say.
	Thinking *bool
	// Effort is "low", "medium" or "high" when given (none and minimal
	// set Thinking to false instead).
	Effort string
	// ThinkingBudget is reasoning.max_tokens when > 0, else 0.
	ThinkingBudget int
	// Choices is n: how many replies the engine makes, each its own
	// choice of that index; 1 when not sent.
	Choices int
	// CapIncludesThinking makes UserMaxTokens the cap of the whole reply,
	// thinking included, as the APIs translated into chat define theirs
	// (Anthropic's max_tokens, the Responses API's max_output_tokens);
	// chat's own caps the answer, with thinking's budget on top. Set by the
	// caller, before Prepare.
	CapIncludesThinking bool

	// Set by Prepare.

	// Body is the canonical body to forward to the worker.
	Body []byte
	// DefaultCap is true when no max tokens was sent, so EngineMaxTokens
	// is the default cap.
	DefaultCap bool
	// EngineMaxTokens is the cap sent to the engine in both max_tokens and
	// max_completion_tokens.
	EngineMaxTokens int
	// BudgetApplied is the thinking budget in effect (explicit or the
	// default), 0 when none.
	BudgetApplied int

	// top is the parsed body; Prepare works on a copy of it.
	top *object
	// messages replaces the messages array when file parts had to become
	// text parts; nil when the array is forwarded as sent.
	messages json.RawMessage
}

// Parse validates a request body. Malformed JSON is a 400; every field
// failure is listed in one 422.
func Parse(body []byte, opts Options) (*Request, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, api.BadRequest("Request body is empty; send a JSON object")
	}
	if jsonraw.KindOf(body) != jsonraw.Object {
		if !jsontext.Valid(body) {
			return nil, jsonraw.Malformed(body)
		}
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "must be a JSON object"})
	}
	// The request outlives the handler's buffer (the body is forwarded
	// later and Messages feed affinity), so it keeps its own copy.
	body = bytes.Clone(body)
	top, ok := parseBody(body)
	if !ok {
		return nil, jsonraw.Malformed(body)
	}
	c := checker{opts: opts, r: &Request{top: top}}
	c.request(top)
	if c.ambiguous != nil {
		return nil, c.ambiguous
	}
	if err := c.v.Err(); err != nil {
		return nil, err
	}
	return c.r, nil
}
