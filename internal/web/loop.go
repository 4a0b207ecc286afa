package web

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// DefaultMaxSteps is how many tool calls a request may make when a Loop
// leaves MaxSteps zero: enough to search, read a few pages and search
// again, few enough that a model calling in circles costs seconds, not
// minutes.
const DefaultMaxSteps = 8

// previewChars is how much of a result a step shows the client; the
// model gets all of it.
const previewChars = 500

// Loop offers web tools to an engine and runs the calls it makes until it
// answers. The zero MaxSteps is DefaultMaxSteps.
type Loop struct {
	Tools    *Tools
	MaxSteps int
	// Logger, when set, tells of a model whose engine refuses tools.
	Logger *slog.Logger

	// plain are the models, by the engine's name, whose engine refused
	// the tools the loop offered (vLLM without --enable-auto-tool-choice,
	// llama-server without --jinja): their chats are served as sent.
	plain sync.Map
}

// Step is one tool call as the client sees it: in svc.web_tool_steps, and
// in the svc.web_tool_step events of a stream, where the call's event
// has no outcome (OK nil) and the result's event repeats the call.
type Step struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	Arguments   string `json:"arguments"`
	OK          *bool  `json:"ok,omitempty"`
	Result      string `json:"result,omitempty"`
	ResultChars *int   `json:"result_chars,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Wrap returns eng with its chat requests served through the loop.
func (l *Loop) Wrap(eng engine.Engine) engine.Engine { return looped{eng, l} }

type looped struct {
	engine.Engine
	loop *Loop
}

func (e looped) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	return e.loop.Serve(ctx, e.Engine, req, sink)
}

// Offered says whether a chat request gets the web tools: one that brings
// no tools of its own and leaves tool_choice unset or "auto". A client's
// own tools are its to run, and mixing them with calls the worker
// answers itself would hand the client calls it cannot answer;
// tool_choice "none" (or a forced tool) is the client saying the model
// must not pick tools on its own. A request for several choices (n above
// 1) goes to the engine as it is: the loop carries one conversation on,
// and each choice would call for tools of its own.
func Offered(body []byte) bool {
	_, ok := offer(body)
	return ok
}

func offer(body []byte) (map[string]json.RawMessage, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil, false
	}
	if t := bytes.TrimSpace(fields["tools"]); len(t) > 0 && !bytes.Equal(t, []byte("null")) && !bytes.Equal(t, []byte("[]")) {
		return nil, false
	}
	if c := bytes.TrimSpace(fields["tool_choice"]); len(c) > 0 && !bytes.Equal(c, []byte("null")) && !bytes.Equal(c, []byte(`"auto"`)) {
		return nil, false
	}
	if n := bytes.TrimSpace(fields["n"]); len(n) > 0 && !bytes.Equal(n, []byte("null")) && !bytes.Equal(n, []byte("1")) {
		return nil, false
	}
	var msgs []json.RawMessage
	if json.Unmarshal(fields["messages"], &msgs) != nil || len(msgs) == 0 {
		return nil, false
	}
	return fields, true
}

// Serve runs a request through eng, with the web tools when the request
// is a chat that takes them (see Offered), and as it is otherwise.
func (l *Loop) Serve(ctx context.Context, eng engine.Engine, req *engine.Request, out engine.Sink) *api.Result {
	if req.Kind != api.KindChat {
		return eng.Serve(ctx, req, out)
	}
	fields, ok := offer(req.Body)
	if _, plain := l.plain.Load(req.Model); !ok || plain {
		return eng.Serve(ctx, req, out)
	}
	var msgs []json.RawMessage
	_ = json.Unmarshal(fields["messages"], &msgs) // offer checked it
	r := &loopRun{loop: l, eng: eng, req: req, out: out, fields: fields, msgs: msgs, start: time.Now()}
	return r.run(ctx)
}

// loopRun is one request's turns through the loop.
type loopRun struct {
	loop   *Loop
	eng    engine.Engine
	req    *engine.Request
	out    engine.Sink
	fields map[string]json.RawMessage // the request, messages and tools replaced each turn
	msgs   []json.RawMessage

	start time.Time
	// steps are the calls shown to the client: those run, and those of a
	// web tool past the step limit, which were answered with an error.
	steps      []Step
	ran        int // the steps run, which the limit counts
	usage      *api.Usage
	first      api.Timing // the first turn's, for a cold start
	head       chunkHead  // a stream's chunk identity, for step events
	roleSent   bool       // a chunk that carried the role was passed on
	firstShown time.Time  // the first visible output of a stream
}

// toolCall is a call the model made, whole.
type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (r *loopRun) maxSteps() int { return cmp.Or(r.loop.MaxSteps, DefaultMaxSteps) }

// maxTurns bounds a request's engine turns: one a step, one for the
// answer after the last, and one more. A call past the step limit or of
// a tool not offered runs nothing, and an engine may ignore tool_choice
// "none": a model that goes on calling would otherwise turn for ever.
func (r *loopRun) maxTurns() int { return r.maxSteps() + 2 }

func (r *loopRun) run(ctx context.Context) *api.Result {
	for turn := 0; ; turn++ {
		if turn == r.maxTurns() {
			res := engine.Failure(http.StatusBadGateway, api.TypeUpstream, fmt.Sprintf(
				"the model went on calling tools for %d turns, past the limit of %d web tool calls, and gave no answer", turn, r.maxSteps()))
			// Another worker's model would do the same; the turns made
			// are the request's usage.
			res.Final, res.Usage = true, r.usage
			return res
		}
		body, err := r.turnBody()
		if err != nil {
			return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode the request with web tools: "+err.Error())
		}
		sub := &engine.Request{Kind: r.req.Kind, Model: r.req.Model, Stream: r.req.Stream, Body: body}
		turnStart := time.Now()
		var res *api.Result
		var calls []toolCall
		var content json.RawMessage
		var final []byte // a unary reply's body, to finish
		if r.req.Stream {
			s := &turnSink{run: r}
			res = r.eng.Serve(ctx, sub, s)
			if res.Status == http.StatusOK {
				calls, content = s.calls(), s.contentJSON()
				if len(calls) == 0 {
					// Anything held back was not a call after all.
					for _, c := range s.held {
						if err := r.out.Event(ctx, withHead(c, r.head)); err != nil {
							return engine.Cancelled()
						}
					}
				}
			}
		} else {
			var got capture
			res = r.eng.Serve(ctx, sub, &got)
			if res.Status == http.StatusOK {
				calls, content = replyCalls(got.body)
				final = got.body
			}
		}
		if res.Status != http.StatusOK {
			if turn == 0 && refusesTools(res) {
				// The client asked for no tools: its chat is served as
				// it sent it, and so are the model's from now on, unless
				// the engine refuses that too (a history it cannot take).
				msg := res.Error.Message
				if res = r.eng.Serve(ctx, r.req, r.out); !refusesTools(res) {
					r.loop.plain.Store(r.req.Model, true)
					if log := r.loop.Logger; log != nil {
						log.Warn("the engine refuses tools: web tools are off for the model (vLLM: --enable-auto-tool-choice --tool-call-parser; llama-server: --jinja)",
							"model", r.req.Model, "err", msg)
					}
				}
				return res
			}
			return res
		}
		r.addUsage(res.Usage)
		if turn == 0 {
			r.first = res.Timing
		}
		if len(calls) == 0 {
			return r.finish(ctx, res, final, turnStart)
		}
		if err := r.runCalls(ctx, calls, content); err != nil {
			return engine.Cancelled()
		}
	}
}

// turnBody is the request for the next turn: the conversation so far and
// the tools, which the model may no longer call once the steps are used
// up.
func (r *loopRun) turnBody() ([]byte, error) {
	msgs, err := json.Marshal(r.msgs)
	if err != nil {
		return nil, err
	}
	tools, err := json.Marshal(r.loop.Tools.definitions())
	if err != nil {
		return nil, err
	}
	r.fields["messages"], r.fields["tools"] = msgs, tools
	if r.ran >= r.maxSteps() {
		r.fields["tool_choice"] = json.RawMessage(`"none"`)
	}
	return json.Marshal(r.fields)
}

// runCalls runs a turn's calls and adds them and their results to the
// conversation.
func (r *loopRun) runCalls(ctx context.Context, calls []toolCall, content json.RawMessage) error {
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = "call_web_" + strconv.Itoa(len(r.steps)+i)
		}
		calls[i].Type = "function"
	}
	if content == nil {
		content = json.RawMessage("null")
	}
	assistant, err := json.Marshal(struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []toolCall      `json:"tool_calls"`
	}{"assistant", content, calls})
	if err != nil {
		return err
	}
	r.msgs = append(r.msgs, assistant)
	for _, c := range calls {
		text, err := r.step(ctx, c)
		if err != nil {
			return err
		}
		msg, err := json.Marshal(struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    string `json:"content"`
		}{"tool", c.ID, text})
		if err != nil {
			return err
		}
		r.msgs = append(r.msgs, msg)
	}
	return nil
}

// step runs one call as a step the client sees, and returns what the
// model is told. A call of a tool not offered is answered with an error
// and is no step: the model made the tool up. One past the step limit is
// answered with an error too, and shown as a step that failed, while the
// steps shown are fewer than twice the limit: a model calling tools in
// parallel could otherwise make the reply as long as it liked. A stream
// shows each step as it starts and as it ends.
func (r *loopRun) step(ctx context.Context, c toolCall) (string, error) {
	name, args := c.Function.Name, c.Function.Arguments
	if !r.loop.Tools.has(name) {
		return "Error: there is no tool " + strconv.Quote(name) + "; answer without it.", nil
	}
	st := Step{Index: len(r.steps), Name: name, Arguments: args}
	if r.ran >= r.maxSteps() {
		msg := "the limit of " + strconv.Itoa(r.maxSteps()) + " web tool calls is reached"
		if len(r.steps) < 2*r.maxSteps() {
			if err := r.started(ctx, st); err != nil {
				return "", err
			}
			if err := r.ended(ctx, st, "", errors.New(msg)); err != nil {
				return "", err
			}
		}
		return "Error: " + msg + "; answer with what you have.", nil
	}
	r.ran++
	if err := r.started(ctx, st); err != nil {
		return "", err
	}
	result, err := r.loop.Tools.run(ctx, name, args)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err := r.ended(ctx, st, result, err); err != nil {
		return "", err
	}
	if err != nil {
		return "Error: " + err.Error(), nil
	}
	return result, nil
}

// started sends a stream's client the start of st.
func (r *loopRun) started(ctx context.Context, st Step) error {
	if !r.req.Stream {
		return nil
	}
	return r.emit(ctx, st)
}

// ended adds st to the steps, ended with result or failed, and sends it
// to a stream's client.
func (r *loopRun) ended(ctx context.Context, st Step, result string, failed error) error {
	ok := failed == nil
	st.OK = &ok
	if ok {
		n := utf8.RuneCountInString(result)
		st.Result, st.ResultChars = Cut(result, previewChars), &n
	} else {
		zero := 0
		st.Error, st.ResultChars = failed.Error(), &zero
	}
	r.steps = append(r.steps, st)
	if r.req.Stream {
		return r.emit(ctx, st)
	}
	return nil
}

// emit sends a step event: a chunk with no choices, as the gateway's own
// svc chunks are.
func (r *loopRun) emit(ctx context.Context, st Step) error {
	h := r.head
	if h.ID == "" {
		h = chunkHead{ID: "chatcmpl-web-" + strconv.FormatInt(r.start.UnixNano(), 36), Created: r.start.Unix(), Model: r.req.Model}
	}
	chunk, err := json.Marshal(struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []string `json:"choices"`
		Svc     struct {
			WebToolStep Step `json:"web_tool_step"`
		} `json:"svc"`
	}{ID: h.ID, Object: "chat.completion.chunk", Created: h.Created, Model: h.Model, Choices: []string{},
		Svc: struct {
			WebToolStep Step `json:"web_tool_step"`
		}{st}})
	if err != nil {
		return err
	}
	return r.out.Event(ctx, chunk)
}

func (r *loopRun) addUsage(u *api.Usage) {
	if u == nil {
		return
	}
	if r.usage == nil {
		r.usage = &api.Usage{}
	}
	t := r.usage
	t.PromptTokens += u.PromptTokens
	t.CompletionTokens += u.CompletionTokens
	t.TotalTokens += u.TotalTokens
	addInt := func(sum **int, v *int) {
		if v != nil {
			*sum = new(*v + deref(*sum))
		}
	}
	addInt(&t.ReasoningTokens, u.ReasoningTokens)
	addInt(&t.CachedTokens, u.CachedTokens)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// finish settles the last turn, the answer: usage is every turn's, the
// time to first token runs from the request's start, and a unary reply
// carries its steps.
func (r *loopRun) finish(ctx context.Context, res *api.Result, body []byte, turnStart time.Time) *api.Result {
	if len(r.steps) > 0 {
		out := *res
		out.Usage = r.usage
		if out.Timing.ColdStart == nil {
			out.Timing.ColdStart, out.Timing.ModelLoadMs = r.first.ColdStart, r.first.ModelLoadMs
		}
		switch {
		case r.req.Stream && !r.firstShown.IsZero():
			out.Timing.TTFTMs = new(ms(r.firstShown.Sub(r.start)))
		case !r.req.Stream && res.Timing.TTFTMs != nil:
			out.Timing.TTFTMs = new(ms(turnStart.Sub(r.start)) + *res.Timing.TTFTMs)
		default:
			// Unmeasured: the gateway measures the wait for the first
			// output itself, which covers the steps.
			out.Timing.TTFTMs = nil
		}
		res = &out
	}
	if r.req.Stream {
		return res
	}
	if len(r.steps) > 0 {
		var err error
		if body, err = withSteps(body, r.steps); err != nil {
			return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the engine's reply is not a JSON object: "+err.Error())
		}
	}
	if err := r.out.Body(ctx, body); err != nil {
		return engine.Cancelled()
	}
	return res
}

// withSteps puts the steps on a unary reply, for the gateway to move into
// svc, and drops the last turn's usage: the gateway writes the sum of
// every turn's from the result.
func withSteps(body []byte, steps []Step) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	s, err := json.Marshal(steps)
	if err != nil {
		return nil, err
	}
	delete(m, "usage")
	m["web_tool_steps"] = s
	return json.Marshal(m)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// replyCalls reads a unary reply's tool calls and the content beside
// them.
func replyCalls(body []byte) ([]toolCall, json.RawMessage) {
	var reply struct {
		Choices []struct {
			Message struct {
				Content   json.RawMessage `json:"content"`
				ToolCalls []toolCall      `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &reply) != nil || len(reply.Choices) == 0 {
		return nil, nil
	}
	m := reply.Choices[0].Message
	return m.ToolCalls, m.Content
}

// capture keeps a unary reply for the loop to read.
type capture struct{ body []byte }

func (c *capture) Event(_ context.Context, data []byte) error {
	c.body = append(c.body, data...)
	return nil
}

func (c *capture) Body(_ context.Context, data []byte) error {
	c.body = append(c.body, data...)
	return nil
}

// refusesTools reports whether res is an engine's refusal of the tools a
// request offered, before any of its answer: a 400 that names them.
func refusesTools(res *api.Result) bool {
	if res.Status != http.StatusBadRequest || res.Error == nil {
		return false
	}
	msg := strings.ToLower(res.Error.Message)
	return strings.Contains(msg, "tool")
}
