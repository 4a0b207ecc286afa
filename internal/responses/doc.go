// Package responses serves the OpenAI Responses API (POST /v1/responses)
// through engines that speak only chat completions, by translating each
// request into a chat-completions request and each answer back.
//
// The gateway keeps nothing between requests, so only the stateless use of
// the API is served: the client sends the whole conversation in input every
// time. Anything that needs a stored response, conversation, file or prompt
// (previous_response_id, conversation, background, item_reference items,
// file_id inputs, prompt) is refused with a 400 that says so. store is read
// and ignored: nothing is stored whatever it says, and the response reports
// store:false.
//
// # Request
//
// instructions becomes a leading system message and input the rest of the
// conversation: a string is one user message; message items keep their
// role, except that developer becomes system (chat engines know no
// developer role); input_text, output_text and refusal parts become text
// parts, input_image an image_url part (user messages only) and input_file
// a text part holding the file, the way chat completions turns a .txt or
// .csv file part into text. function_call items join the assistant message
// before them as tool_calls (consecutive calls, and the text the model wrote
// before calling, are one assistant turn, as chat templates expect), and
// function_call_output items become tool messages. reasoning items are
// dropped: chat engines take no reasoning back.
//
// max_output_tokens becomes max_completion_tokens, text.format
// response_format, reasoning.effort reasoning_effort (xhigh as high), and
// function tools and tool_choice take their chat shape; temperature, top_p,
// parallel_tool_calls and user pass as they are. A stream asks for usage,
// which the final response object carries.
//
// Not supported: hosted tools (web search, file search, computer use, code
// interpreter, image generation, MCP, custom and shell tools) and choices
// of them, allowed_tools, audio input, file_url files, images or files in
// a function_call_output (chat tool messages take text only), and
// top_logprobs.
// Read and ignored, as they change nothing an engine could do: metadata
// (echoed back), include, truncation ("auto" and "disabled" alike, since
// engines refuse what does not fit rather than drop turns), max_tool_calls
// (there are no built-in tools to count), service_tier,
// safety_identifier, prompt_cache_key, prompt_cache_retention,
// stream_options, text.verbosity and reasoning.summary (echoed back), and
// any member this package does not know, so that newer SDKs keep working.
//
// # Response
//
// The chat message becomes up to three kinds of output items, always in
// this order: a reasoning item whose one summary_text part is the message's
// reasoning_content, a message item with one output_text part, and one
// function_call item per tool call. The message item is left out only when
// the model called tools and wrote no text, so that a response always has
// output. Item ids derive from the gateway's request id, so the same answer
// always reads the same: resp_ID, rs_ID, msg_ID and fc_ID_N; a tool call
// without an id, or with one already used, gets call_ID_N, because clients
// match outputs to calls by it. finish_reason length (or content_filter)
// makes the response incomplete, with the last item incomplete too. Usage
// is renamed to the Responses names, and the gateway's svc member is kept
// as a top-level member.
//
// A stream is the event sequence of the official SDKs' stream helpers:
// response.created and response.in_progress, then for each item its
// output_item.added, the part and delta events of its kind and, when the
// next kind starts or the answer finishes, its done events; last comes
// response.completed (or response.incomplete, or response.failed) with the
// same response object a non-streamed answer would have been given.
package responses
