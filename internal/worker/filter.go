package worker

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/moderation"
	"github.com/svc-dev/svc/internal/usage"
)

// filterEvery is how much new reply text a streamed reply holds back
// before the guard checks it: each check is one guard call, and the text
// reaches the client only once checked.
const filterEvery = 256

// filterChat runs a chat whose key has content filtering on. The
// conversation is checked before generation: a flagged one is refused (400,
// content_filter). The reply is checked as it is made: a flagged one ends
// with finish_reason content_filter and nothing of the flagged text.
func (a *Agent) filterChat(ctx context.Context, eng engine.Engine, req *engine.Request, moderator string, out engine.Sink) *api.Result {
	g, res := a.guardFor(moderator)
	if res != nil {
		return res
	}
	texts, images, prompt := conversation(req.Body, g.family.Images())
	v, res := g.judgeConversation(ctx, texts)
	if res == nil && !v.Unsafe && g.family.Images() {
		// A guard that sees images judges each of the conversation's,
		// one a call: its window holds few.
		for _, img := range images {
			if len(img.Data) == 0 {
				res = finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, "",
					"an image in the request could not be read for content filtering: send it as a base64 data:image/... URL")
				break
			}
			if _, v, res = g.judge(ctx, moderation.Check{Role: moderation.RoleUser, Images: []api.ModerationImage{img}}); res != nil || v.Unsafe {
				break
			}
		}
	}
	if res != nil {
		return res
	} else if v.Unsafe {
		return finalFailure(http.StatusBadRequest, api.TypeContentFilter, api.CodeContentFiltered,
			"The prompt was refused by content filtering ("+strings.Join(v.Labels, ", ")+")")
	}
	f := &filterSink{g: g, prompt: prompt, out: out, body: req.Body}
	if !req.Stream {
		var got captureSink
		res := eng.Serve(ctx, req, &got)
		if res.Status != http.StatusOK {
			return res
		}
		return f.whole(ctx, got.body, res)
	}
	return f.finish(ctx, eng.Serve(ctx, req, f))
}

// conversation is what a chat request asks a guard to judge: the text of
// every message, in order, its images (data: URLs, as the worker has
// them once it fetched any remote ones), and the text of the last user
// message apart, the prompt a reply answers. A key's holder writes every
// message (the system prompt, earlier user turns, assistant turns and tool
// results alike), so judging the last user message alone would let a
// request carry what the filter refuses in any other.
func conversation(body []byte, withImages bool) (texts []string, images []api.ModerationImage, prompt string) {
	var req struct {
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil, nil, ""
	}
	for _, m := range req.Messages {
		text, imgs := content(m.Content, withImages)
		texts = append(texts, text)
		images = append(images, imgs...)
		for _, c := range m.ToolCalls {
			texts = append(texts, c.Function.Arguments)
		}
		if m.Role == "user" {
			prompt = text
		}
	}
	return texts, images, prompt
}

// content is the text of a message's content, a string or its text parts
// joined by newlines, and, withImages, the images of its image parts.
func content(raw json.RawMessage, withImages bool) (string, []api.ModerationImage) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	_ = json.Unmarshal(raw, &parts)
	var texts []string
	var images []api.ModerationImage
	for _, p := range parts {
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "image_url":
			if !withImages {
				continue
			}
			// One that is no data: URL, or does not decode, is judged as
			// no image, which the guard refuses: unchecked, it would pass.
			img, _ := dataImage(p.ImageURL.URL)
			images = append(images, img)
		}
	}
	return strings.Join(texts, "\n"), images
}

// dataImage decodes a base64 data: URL; false for any other URL, or one
// whose data is not base64. Its media type is left to the bytes, which
// the guard's call reads.
func dataImage(u string) (api.ModerationImage, bool) {
	_, payload, ok := chat.SplitDataURL(u)
	if !ok {
		return api.ModerationImage{}, false
	}
	payload = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == ' ' || r == '\t' || r == '=' {
			return -1
		}
		return r
	}, payload)
	data, err := base64.RawStdEncoding.DecodeString(payload)
	if err != nil {
		return api.ModerationImage{}, false
	}
	return api.ModerationImage{Data: data}, true
}

// filterSink holds a streamed reply back until the guard has passed it,
// filterEvery characters at a time.
type filterSink struct {
	g      *guard
	prompt string
	out    engine.Sink
	// body is the chat request, whose prompt a counted usage estimates.
	body []byte

	held [][]byte // events not yet checked
	// texts are the reply's choices' texts by index (thinking, answer and
	// tools' arguments alike, all of which reach the client), each judged
	// on its own: several (n) arrive interleaved.
	texts []*strings.Builder
	// passed is how much of each choice's text the guard passed.
	passed  []int
	length  int // of the texts together
	checked int // of that, what the guard passed
	first   chunkHead
	flagged *moderation.Verdict
	failed  *api.Result // the guard's own failure
}

// chunkHead is what the closing chunk of a reply the worker ends (a
// filtered one, an answer cut at its cap) repeats of the reply's chunks.
type chunkHead struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// closing is the chunk that ends the choices of index choices with
// reason, under the reply's head.
func (h chunkHead) closing(choices []int, reason string) []byte {
	ends := make([]any, len(choices))
	for i, index := range choices {
		ends[i] = map[string]any{"index": index, "delta": map[string]any{}, "finish_reason": reason}
	}
	b, _ := json.Marshal(map[string]any{
		"id": h.ID, "object": "chat.completion.chunk", "created": cmp.Or(h.Created, time.Now().Unix()), "model": h.Model,
		"choices": ends,
	})
	return b
}

// errFiltered stops the engine once the reply is flagged.
var errFiltered = errors.New("the reply was flagged by content filtering")

func (f *filterSink) Event(ctx context.Context, data []byte) error {
	var chunk struct {
		chunkHead
		Choices []struct {
			Index int       `json:"index"`
			Delta replyText `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &chunk) == nil {
		if f.first.ID == "" {
			f.first = chunk.chunkHead
		}
		for _, c := range chunk.Choices {
			f.length += c.Delta.writeTo(f.text(c.Index))
		}
	}
	f.held = append(f.held, data)
	if f.length-f.checked < filterEvery {
		return nil
	}
	return f.check(ctx)
}

// text is the text of the choice of index i so far. An index beyond any
// a request may ask for is taken as the first's.
func (f *filterSink) text(i int) *strings.Builder {
	if i < 0 || i >= chat.MaxChoices {
		i = 0
	}
	for len(f.texts) <= i {
		f.texts = append(f.texts, new(strings.Builder))
		f.passed = append(f.passed, 0)
	}
	return f.texts[i]
}

// replyText is what of a choice's message, or a chunk's delta of it,
// reaches the client as text.
type replyText struct {
	ReasoningContent string `json:"reasoning_content"`
	Reasoning        string `json:"reasoning"`
	Content          string `json:"content"`
	ToolCalls        []struct {
		Function struct {
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// writeTo appends the text to b and returns its length.
func (r *replyText) writeTo(b *strings.Builder) int {
	n := b.Len()
	// Engines send thinking under both names, the one mirroring the
	// other: it is judged, and counted, once.
	b.WriteString(cmp.Or(r.ReasoningContent, r.Reasoning))
	b.WriteString(r.Content)
	for _, c := range r.ToolCalls {
		b.WriteString(c.Function.Arguments)
	}
	return b.Len() - n
}

func (f *filterSink) Body(ctx context.Context, data []byte) error { return f.Event(ctx, data) }

// check has the guard judge the reply's new text, each choice's with as
// much of what came before it as the guard's window leaves room for, and
// releases what it passed.
func (f *filterSink) check(ctx context.Context) error {
	texts := make([]string, 0, len(f.texts))
	for i, t := range f.texts {
		if s := t.String(); f.passed[i] < len(s) {
			texts = append(texts, s[runeStart(s, max(0, f.passed[i]-f.g.replyContext())):])
		}
	}
	v, res := f.g.judgeReply(ctx, f.prompt, texts)
	switch {
	case res != nil:
		f.failed = res
		return errFiltered
	case v.Unsafe:
		f.flagged = &v
		return errFiltered
	}
	for i, t := range f.texts {
		f.passed[i] = t.Len()
	}
	f.checked = f.length
	for _, e := range f.held {
		if err := f.out.Event(ctx, e); err != nil {
			return err
		}
	}
	f.held = f.held[:0]
	return nil
}

// finish settles a streamed reply once the engine is done: the rest is
// checked, and a flagged reply closes with finish_reason content_filter.
func (f *filterSink) finish(ctx context.Context, res *api.Result) *api.Result {
	if f.failed == nil && f.flagged == nil {
		if res.Status != http.StatusOK {
			// Unchecked text never leaves, even of a failed reply.
			return res
		}
		if len(f.held) > 0 {
			if err := f.check(ctx); err != nil && !errors.Is(err, errFiltered) {
				return engine.Cancelled()
			}
		}
	}
	switch {
	case f.failed != nil:
		return f.failed
	case f.flagged == nil:
		return res
	}
	// Every choice ends at the flag: the guard judged them together.
	choices := make([]int, max(len(f.texts), 1))
	for i := range choices {
		choices[i] = i
	}
	if err := f.out.Event(ctx, f.first.closing(choices, api.FinishContentFilter)); err != nil {
		return engine.Cancelled()
	}
	out := *res
	if res.Status != http.StatusOK {
		// The engine was stopped at the flag: what it made was passed on
		// until then, and its usage is unknown.
		out = api.Result{Status: http.StatusOK}
	}
	if out.Usage == nil {
		// The worker counts what was made, held back or not: the
		// engine's work all the same, which the gateway, seeing only
		// what was passed on, would count as nothing when the flag came
		// in the first window.
		out.Usage = f.counted()
	}
	out.FinishReason = api.FinishContentFilter
	return &out
}

// counted is the usage of a reply stopped at the flag, estimated from
// its text (about four characters a token) and its prompt's.
func (f *filterSink) counted() *api.Usage {
	chars := 0
	for _, t := range f.texts {
		chars += utf8.RuneCountInString(t.String())
	}
	return stoppedUsage(f.body, usage.EstimateTokens(chars))
}

// whole checks a non-streamed reply: a flagged one keeps its shape with
// no content and finish_reason content_filter.
func (f *filterSink) whole(ctx context.Context, body []byte, res *api.Result) *api.Result {
	var reply map[string]any
	if err := json.Unmarshal(body, &reply); err != nil {
		return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the engine's reply is not JSON: "+err.Error())
	}
	choices, _ := reply["choices"].([]any)
	var texts struct {
		Choices []struct {
			Message replyText `json:"message"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(body, &texts)
	judged := make([]string, 0, len(texts.Choices))
	for _, c := range texts.Choices {
		var b strings.Builder
		if c.Message.writeTo(&b) > 0 {
			judged = append(judged, b.String())
		}
	}
	v, fail := f.g.judgeReply(ctx, f.prompt, judged)
	if fail != nil {
		return fail
	}
	if v.Unsafe {
		for _, c := range choices {
			ch, ok := c.(map[string]any)
			if !ok {
				continue
			}
			ch["finish_reason"] = api.FinishContentFilter
			if m, ok := ch["message"].(map[string]any); ok {
				m["content"] = ""
				delete(m, "reasoning_content")
				delete(m, "reasoning")
				delete(m, "tool_calls")
			}
		}
		var err error
		if body, err = json.Marshal(reply); err != nil {
			return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode the filtered reply: "+err.Error())
		}
		out := *res
		out.FinishReason = api.FinishContentFilter
		res = &out
	}
	if err := f.out.Body(ctx, body); err != nil {
		return engine.Cancelled()
	}
	return res
}
