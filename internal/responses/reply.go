package responses

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/jsonraw"
)

// FromChat turns a complete chat.completion (as the gateway answers it,
// with usage and its svc member) into the Responses "response" object for
// the gateway's request id and the time to report: the object echoes the
// request's parameters and names the model it asked for.
func (r *Request) FromChat(answer []byte, id string, createdAt int64) ([]byte, error) {
	var c struct {
		Model   json.RawMessage   `json:"model"`
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
		Svc     json.RawMessage   `json:"svc"`
	}
	if jsonraw.KindOf(answer) != jsonraw.Object || json.Unmarshal(answer, &c) != nil {
		return nil, &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply,
			Message: "the worker's answer is not a chat completion the Responses API can be given"}
	}
	var m struct {
		Content          json.RawMessage   `json:"content"`
		ReasoningContent json.RawMessage   `json:"reasoning_content"`
		Reasoning        json.RawMessage   `json:"reasoning"`
		ToolCalls        []json.RawMessage `json:"tool_calls"`
	}
	var finish json.RawMessage
	if choice := firstChoice(c.Choices); choice != nil {
		var ch struct {
			Message      json.RawMessage `json:"message"`
			FinishReason json.RawMessage `json:"finish_reason"`
		}
		_ = json.Unmarshal(choice, &ch) // a choice is an object: firstChoice checked
		if jsonraw.KindOf(ch.Message) == jsonraw.Object {
			_ = json.Unmarshal(ch.Message, &m) // members of the wrong type read as absent below
		}
		finish = ch.FinishReason
	}

	o := newOutput(id)
	if s := reasoningText(m.ReasoningContent, m.Reasoning); s != "" {
		o.add(itemReasoning).text.WriteString(s)
	}
	content := textOf(m.Content)
	type call struct{ id, name, args string }
	var calls []call
	for _, raw := range m.ToolCalls {
		var tc struct {
			ID       json.RawMessage `json:"id"`
			Function struct {
				Name      json.RawMessage `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if jsonraw.KindOf(raw) != jsonraw.Object || json.Unmarshal(raw, &tc) != nil {
			continue
		}
		calls = append(calls, call{textOf(tc.ID), textOf(tc.Function.Name), arguments(tc.Function.Arguments)})
	}
	if content != "" || len(calls) == 0 {
		o.add(itemMessage).text.WriteString(content)
	}
	for _, tc := range calls {
		it := o.add(itemCall)
		it.name = tc.name
		it.callID = o.callID(tc.id)
		it.text.WriteString(tc.args)
	}

	res := result{model: r.Model, items: o.items, usage: readUsage(c.Usage)}
	if res.model == "" {
		res.model = textOf(c.Model)
	}
	res.status, res.reason = finishStatus(textOf(finish))
	for _, it := range o.items {
		it.status = "completed"
	}
	if res.status == "incomplete" && len(o.items) > 0 {
		o.items[len(o.items)-1].status = "incomplete"
	}
	if jsonraw.KindOf(c.Svc) == jsonraw.Object {
		// Read as a stream's are, a member sent twice kept once.
		var svc chat.StreamSvc
		svc.Add(c.Svc)
		res.svc = svc.JSON()
	} else if k := jsonraw.KindOf(c.Svc); k != jsonraw.Invalid && k != jsonraw.Null {
		res.svc = compact(c.Svc)
	}
	return r.appendResponse(nil, id, createdAt, &res), nil
}

// Failed is the reply to a request whose answer failed after the reply
// had started (a non-streaming request kept alive): the response object
// with status failed and error {code, message, and retry_after when
// retryAfter, in seconds, is above 0}, as a stream's response.failed
// carries it.
func (r *Request) Failed(id string, createdAt int64, code, msg string, retryAfter int) []byte {
	res := result{model: r.Model, status: "failed", errCode: code, errMsg: msg, errRetry: retryAfter}
	return r.appendResponse(nil, id, createdAt, &res)
}

// firstChoice is the choice with index 0 (the only one the chat side
// allows asking for), else the first.
func firstChoice(choices []json.RawMessage) json.RawMessage {
	var first json.RawMessage
	for _, raw := range choices {
		if jsonraw.KindOf(raw) != jsonraw.Object {
			continue
		}
		var ch struct {
			Index json.RawMessage `json:"index"`
		}
		if json.Unmarshal(raw, &ch) != nil {
			continue
		}
		if first == nil {
			first = raw
		}
		if n, res := jsonraw.Int(string(ch.Index)); jsonraw.KindOf(ch.Index) == jsonraw.Number && res != jsonraw.IntFraction && n == 0 {
			return raw
		}
	}
	return first
}

// textOf reads a string member leniently: a string, or an array of text
// parts as some engines write content; anything else is empty.
func textOf(raw json.RawMessage) string {
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		s, _ := jsonraw.DecodeString(raw)
		return s
	case jsonraw.Array:
		var parts []struct {
			Text json.RawMessage `json:"text"`
		}
		if json.Unmarshal(raw, &parts) != nil {
			return ""
		}
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(textOf(p.Text))
		}
		return b.String()
	}
	return ""
}

// reasoningText is reasoning_content, or reasoning for engines that name it
// so.
func reasoningText(content, alt json.RawMessage) string {
	if s := textOf(content); s != "" {
		return s
	}
	if jsonraw.KindOf(alt) == jsonraw.String {
		return textOf(alt)
	}
	return ""
}

// arguments are a tool call's arguments as the string clients parse; an
// engine that wrote them as an object gets them serialised.
func arguments(raw json.RawMessage) string {
	switch jsonraw.KindOf(raw) {
	case jsonraw.String:
		return textOf(raw)
	case jsonraw.Object, jsonraw.Array:
		return string(compact(raw))
	}
	return ""
}

// finishStatus maps a chat finish_reason to the response status and the
// reason it is incomplete.
func finishStatus(finish string) (status, reason string) {
	switch finish {
	case "length":
		return "incomplete", "max_output_tokens"
	case "content_filter":
		return "incomplete", "content_filter"
	}
	return "completed", ""
}

type itemKind int

const (
	itemReasoning itemKind = iota
	itemMessage
	itemCall
)

// outItem is one output item; the stream builds it a delta at a time.
type outItem struct {
	kind itemKind
	id   string
	// text is the reasoning summary, the message text or the call's
	// arguments.
	text   strings.Builder
	callID string
	name   string
	// status is "" while the item is open.
	status string
	// index is the item's place in the output.
	index int
}

func (it *outItem) typ() string {
	switch it.kind {
	case itemReasoning:
		return "reasoning"
	case itemMessage:
		return "message"
	}
	return "function_call"
}

// appendJSON writes the item as it stands; announced writes it as first
// announced, before any text.
func (it *outItem) appendJSON(b []byte, announced bool) []byte {
	text, status := it.text.String(), it.status
	if announced {
		text, status = "", ""
	}
	if status == "" {
		status = "in_progress"
	}
	b = append(b, `{"type":`...)
	b = appendString(b, it.typ())
	b = append(b, `,"id":`...)
	b = appendString(b, it.id)
	switch it.kind {
	case itemReasoning:
		b = append(b, `,"summary":[`...)
		if !announced {
			b = appendSummaryPart(b, text)
		}
		b = append(b, ']')
	case itemMessage:
		b = append(b, `,"status":`...)
		b = appendString(b, status)
		b = append(b, `,"role":"assistant","content":[`...)
		if !announced {
			b = appendTextPart(b, text)
		}
		b = append(b, ']')
	case itemCall:
		b = append(b, `,"status":`...)
		b = appendString(b, status)
		b = append(b, `,"call_id":`...)
		b = appendString(b, it.callID)
		b = append(b, `,"name":`...)
		b = appendString(b, it.name)
		b = append(b, `,"arguments":`...)
		b = appendString(b, text)
	}
	return append(b, '}')
}

func appendTextPart(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = appendString(b, text)
	return append(b, `,"annotations":[]}`...)
}

func appendSummaryPart(b []byte, text string) []byte {
	b = append(b, `{"type":"summary_text","text":`...)
	b = appendString(b, text)
	return append(b, '}')
}

// output names the items of one response. Ids derive from the request id
// alone, so that an answer always reads the same.
type output struct {
	id     string
	items  []*outItem
	counts [3]int
	calls  map[string]bool
}

func newOutput(id string) *output { return &output{id: id, calls: map[string]bool{}} }

func (o *output) add(kind itemKind) *outItem {
	n := o.counts[kind]
	o.counts[kind]++
	var id string
	switch kind {
	case itemReasoning:
		id = "rs_" + o.id
	case itemMessage:
		id = "msg_" + o.id
	case itemCall:
		id = "fc_" + o.id + "_" + strconv.Itoa(n)
	}
	// A kind seen again after another (only a stream can do that) gets a
	// new id: item ids are unique in a response.
	if kind != itemCall && n > 0 {
		id += "_" + strconv.Itoa(n)
	}
	it := &outItem{kind: kind, id: id, index: len(o.items)}
	o.items = append(o.items, it)
	return it
}

// callID is the call_id of the call just added: the engine's, unless it
// sent none or one already used, since clients answer calls by it and the
// SDKs refuse a response that repeats one.
func (o *output) callID(sent string) string {
	id := sent
	if id == "" || o.calls[id] {
		id = "call_" + o.id + "_" + strconv.Itoa(o.counts[itemCall]-1)
		for o.calls[id] {
			id += "_"
		}
	}
	o.calls[id] = true
	return id
}

// usage holds the token counts in the Responses names.
type usage struct {
	input, cached, output, reasoning, total int64
}

// readUsage reads a chat usage object leniently; nil when there is none.
func readUsage(raw json.RawMessage) *usage {
	o, ok := jsonraw.DecodeObject(raw)
	if !ok {
		return nil
	}
	sub := func(key, inner string) int64 {
		d, ok := jsonraw.DecodeObject(o[key])
		if !ok {
			return 0
		}
		return count(d[inner])
	}
	u := &usage{
		input:     count(o["prompt_tokens"]),
		cached:    sub("prompt_tokens_details", "cached_tokens"),
		output:    count(o["completion_tokens"]),
		reasoning: sub("completion_tokens_details", "reasoning_tokens"),
	}
	if _, ok := o.Field("total_tokens"); ok {
		u.total = count(o["total_tokens"])
	} else {
		u.total = u.input + u.output
	}
	return u
}

// count reads a token count: a non-negative whole number, else 0.
func count(raw json.RawMessage) int64 {
	if jsonraw.KindOf(raw) != jsonraw.Number {
		return 0
	}
	f := jsonraw.Float(string(compact(raw)))
	if !(f >= 0) || f > math.MaxInt64/2 {
		return 0
	}
	return int64(f)
}

func (u *usage) appendJSON(b []byte) []byte {
	if u == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, u.input, 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, u.cached, 10)
	b = append(b, `},"output_tokens":`...)
	b = strconv.AppendInt(b, u.output, 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, u.reasoning, 10)
	b = append(b, `},"total_tokens":`...)
	b = strconv.AppendInt(b, u.total, 10)
	return append(b, '}')
}

// result is what a response object reports beyond the request's echo.
type result struct {
	model  string
	status string // in_progress, completed, incomplete or failed
	reason string // why it is incomplete
	// errCode and errMsg are the error of a failed response; errRetry,
	// when above 0, the seconds to wait before a retry, which a started
	// stream cannot put in a Retry-After header.
	errCode, errMsg string
	errRetry        int
	items           []*outItem
	usage           *usage
	svc             json.RawMessage
}

// appendResponse writes the response object. Both FromChat and the
// stream's last event are written here, so they cannot disagree.
func (r *Request) appendResponse(b []byte, id string, createdAt int64, res *result) []byte {
	e := &r.echo
	or := func(raw json.RawMessage, def string) json.RawMessage {
		if raw == nil {
			return json.RawMessage(def)
		}
		return raw
	}
	b = append(b, `{"id":`...)
	b = appendString(b, "resp_"+id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, createdAt, 10)
	b = append(b, `,"status":`...)
	b = appendString(b, res.status)
	b = append(b, `,"background":false,"error":`...)
	if res.status == "failed" {
		code := failureCode(res.errCode)
		b = append(b, `{"code":`...)
		b = appendString(b, code)
		if code != res.errCode && res.errCode != "" {
			b = append(b, `,"svc_code":`...)
			b = appendString(b, res.errCode)
		}
		b = append(b, `,"message":`...)
		b = appendString(b, res.errMsg)
		if res.errRetry > 0 {
			b = append(b, `,"retry_after":`...)
			b = strconv.AppendInt(b, int64(res.errRetry), 10)
		}
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if res.reason != "" {
		b = append(b, `{"reason":`...)
		b = appendString(b, res.reason)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	b = append(b, or(e.instructions, "null")...)
	b = append(b, `,"max_output_tokens":`...)
	b = append(b, or(e.maxOutputTokens, "null")...)
	b = append(b, `,"model":`...)
	b = appendString(b, res.model)
	b = append(b, `,"output":[`...)
	for i, it := range res.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = it.appendJSON(b, false)
	}
	b = append(b, `],"parallel_tool_calls":`...)
	b = append(b, or(e.parallelToolCalls, "true")...)
	b = append(b, `,"previous_response_id":null,"reasoning":{"effort":`...)
	b = append(b, or(e.effort, "null")...)
	b = append(b, `,"summary":`...)
	b = append(b, or(e.summary, "null")...)
	b = append(b, `},"store":false,"temperature":`...)
	b = append(b, or(e.temperature, "null")...)
	b = append(b, `,"text":{"format":`...)
	b = append(b, or(e.format, `{"type":"text"}`)...)
	if e.verbosity != nil {
		b = append(b, `,"verbosity":`...)
		b = append(b, e.verbosity...)
	}
	b = append(b, `},"tool_choice":`...)
	b = append(b, or(e.toolChoice, `"auto"`)...)
	b = append(b, `,"tools":`...)
	b = append(b, or(e.tools, "[]")...)
	b = append(b, `,"top_p":`...)
	b = append(b, or(e.topP, "null")...)
	b = append(b, `,"truncation":`...)
	b = append(b, or(e.truncation, `"disabled"`)...)
	b = append(b, `,"usage":`...)
	b = res.usage.appendJSON(b)
	b = append(b, `,"user":`...)
	b = append(b, or(e.user, "null")...)
	b = append(b, `,"metadata":`...)
	b = append(b, or(e.metadata, "{}")...)
	if res.svc != nil {
		b = append(b, `,"svc":`...)
		b = append(b, res.svc...)
	}
	return append(b, '}')
}

// failureCode is the Responses API's code for a failure the gateway names
// code (its own, or an error type): the API's error codes are a closed
// list, of which a failure after the response began is a rate limit, a
// prompt refused, or the server's. The gateway's own code goes beside it
// as svc_code.
func failureCode(code string) string {
	switch code {
	case "server_error", "rate_limit_exceeded", "invalid_prompt":
		return code
	case api.CodeRateLimited, api.CodeCapacityExceeded, "rate_limit_error":
		return "rate_limit_exceeded"
	case api.TypeInvalidRequest, api.CodeContentFiltered, "content_filter", api.TypeContextLengthExceeded:
		return "invalid_prompt"
	}
	return "server_error"
}
