// Package anthropic translates the Anthropic Messages API (POST
// /v1/messages) to and from the chat-completions API the gateway serves,
// so that clients built on Anthropic's SDKs can use the gateway's models.
//
// ToChat validates a Messages request and builds the equivalent chat
// request; FromChat turns a finished chat.completion into a Messages reply;
// Stream turns a chat-completions event stream into Anthropic's named
// events. Nothing here knows about workers or HTTP: the server feeds the
// bodies and events through and answers the errors.
//
// # Requests
//
// Validation failures are reported with Anthropic's field paths
// (messages.2.content.0.source.data), all at once, as one api.Invalid; the
// body that comes out is one the chat parser accepts, so a request never
// fails twice with two vocabularies. The exception is an image URL: whether
// remote images are allowed is an organisation setting this package does
// not know, so the chat parser decides that.
//
//   - system (a string or text blocks) becomes a leading system message,
//     the blocks joined by blank lines, because chat templates expect a
//     system prompt as one string.
//   - max_tokens stays max_tokens, and as Anthropic's it counts thinking:
//     the gateway caps the whole reply with it (chat.Request's
//     CapIncludesThinking), thinking within its budget, the answer with
//     what thinking left.
//   - thinking {type: enabled, budget_tokens: N} sends reasoning_effort
//     low (N < 4096), medium (N < 16384) or high, and reasoning.max_tokens
//     N, so the client's budget is the one applied rather than the
//     gateway's default. {type: adaptive} leaves the budget to the gateway
//     with effort high, Anthropic's default effort. {type: disabled} sends
//     reasoning_effort none, thinking off; an absent thinking sends nothing:
//     the model's default applies. output_config.effort (low, medium, high;
//     xhigh and max read as high) sets the effort unless thinking is
//     disabled.
//   - output_config.format {type: json_schema, schema} becomes a strict
//     json_schema response_format.
//   - stop_sequences → stop; temperature (0 to 1, Anthropic's range), top_p
//     and top_k pass through; metadata.user_id → user; stream adds
//     stream_options.include_usage, which the usage of message_delta needs.
//   - tools [{name, description, input_schema}] become function tools.
//     Anthropic's server tools (web search, bash, text editor…) run on
//     Anthropic's side and have no chat equivalent: they are refused.
//   - tool_choice auto, any, tool and none become "auto", "required", a
//     named function and "none"; disable_parallel_tool_use becomes
//     parallel_tool_calls false.
//
// Messages keep their order and roles; consecutive messages of one role
// stay separate. Content blocks:
//
//   - text is a text part; a content of exactly one text block is sent as a
//     plain string.
//   - image, base64 or url, is an image_url part (a data: URL for base64).
//   - document with a plain-text source (text, or base64 text/plain) is a
//     file part named after its title with .txt, which the chat layer turns
//     into text under the same size and UTF-8 rules as any file part; a
//     content source is flattened into its text and image parts. PDFs and
//     uploaded files cannot be read by the engines and are refused.
//   - tool_use (assistant) is a tool call whose arguments are the input as
//     JSON text.
//   - tool_result (user) is a tool message. Chat requires tool messages to
//     follow the assistant's tool calls directly, so a user message's tool
//     results come first and the rest of its content follows as a user
//     message. Tool messages carry only text, so images a tool returned go
//     into that user message and the tool message says so. is_error
//     prefixes the result with "Error: ", since chat has no such flag.
//   - thinking and redacted_thinking blocks of earlier turns are dropped:
//     their signatures mean nothing to another model.
//
// Unknown top-level members (service_tier, container, cache_control…) and
// cache_control on blocks are ignored, as they only tune Anthropic's own
// service. A non-empty mcp_servers, which would give the model tools, is
// refused.
//
// # Replies
//
// Reasoning becomes a thinking block with an empty signature, then the text,
// then one tool_use block per tool call. finish_reason stop is end_turn, or
// stop_sequence when the engine says which stop string matched (vLLM's
// stop_reason, SGLang's matched_stop); length is max_tokens; tool_calls is
// tool_use, and so is stop when the reply does call tools, since agent loops
// run tools only on tool_use; content_filter is refusal. Usage counts
// cached prompt tokens as cache_read_input_tokens, apart from input_tokens,
// as Anthropic does. The gateway's svc object rides along as a top-level
// svc member (on message_delta when streaming).
//
// # Streams
//
// Anthropic's SDKs append a block on content_block_start and apply deltas
// to the block at the event's index (Python, TypeScript) or to the last one
// (Go), so blocks are opened one at a time with indexes 0, 1, 2… and each
// is closed before the next opens. message_delta waits for [DONE], because
// the usage and svc chunks come after finish_reason.
package anthropic
