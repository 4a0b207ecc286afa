package server

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/svc-dev/svc/internal/anthropic"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/responses"
	"github.com/svc-dev/svc/internal/usage"
)

// A dialect is an inference API served as a chat completion: its request
// becomes a chat request, which is validated, admitted, routed, retried
// and recorded like any other, and the chat's answer is put back into
// the dialect's shape on the way out. Engines need speak only chat.
type dialect struct {
	// reply turns a complete chat.completion into the dialect's reply.
	reply func(chat []byte) ([]byte, error)
	// stream starts the translation of one chat stream into the
	// dialect's events.
	stream func() streamTranslator
	// chatError, when set, restates a refusal of the chat request in the
	// dialect's field paths.
	chatError func(error) error
	// late is the body of a non-streaming reply that failed after it
	// started (kept alive): the dialect's own failure.
	late func(*api.Error) []byte
}

// restate is err in the dialect's terms; d may be nil (chat itself).
func (d *dialect) restate(err error) error {
	if d == nil || d.chatError == nil {
		return err
	}
	return d.chatError(err)
}

// streamTranslator turns a chat stream's events into a dialect's.
type streamTranslator interface {
	// Chunk appends the server-sent events that the chat stream's event
	// data makes (a chunk, or [DONE]), framing included.
	Chunk(dst, data []byte) []byte
	// Fail appends the events of a failure after the stream started.
	Fail(dst []byte, ae *api.Error) []byte
}

// messages is POST /v1/messages, the Anthropic Messages API.
func (s *Server) messages(c *call) error {
	if sealed(c) {
		return errNotSealable("the Messages API", "send the conversation as an encrypted chat completion")
	}
	body, model, chars, err := anthropic.ToChatCounted(c.ctx.PostBody(), anthropicOptions(c))
	if err != nil {
		return err
	}
	id := c.requestID
	return s.chat(c, body, &dialect{
		reply: func(chat []byte) ([]byte, error) { return anthropic.FromChat(chat, id, model) },
		late:  lateAnthropic,
		stream: func() streamTranslator {
			// count_tokens' estimate, not the chat request's, which
			// leaves out the tools and counts documents as sent.
			return anthropicStream{anthropic.NewStream(id, model, int64(usage.EstimateTokens(chars)))}
		},
	})
}

// anthropicOptions is what the caller's organisation lets a Messages
// request do.
func anthropicOptions(c *call) anthropic.Options {
	return anthropic.Options{AllowRemoteImages: c.org.Settings.AllowRemoteImageURLs}
}

// countTokens is POST /v1/messages/count_tokens, Anthropic's count of a
// Messages request's input tokens. The count is estimated as
// message_start's is, a token per four characters of the text the model
// would read, tools included: the gateway has no tokenizer of the engine's,
// and a count is no reason to occupy a worker. Nothing is relayed, so it
// is not inference and leaves no usage row.
func (s *Server) countTokens(c *call) error {
	if sealed(c) {
		return errNotSealable("token counts", "count the tokens of the request in clear, or leave the count out")
	}
	model, chars, err := anthropic.Count(c.ctx.PostBody(), anthropicOptions(c))
	if err != nil {
		return err
	}
	m := s.fleet.Model(c.principal.OrgID, model)
	switch {
	case m == nil:
		return modelNotListed(model)
	case !m.Has(api.CapChat):
		return fleet.WrongEndpoint(m, api.CapChat)
	}
	writeJSON(c.ctx, http.StatusOK, struct {
		InputTokens int `json:"input_tokens"`
	}{usage.EstimateTokens(chars)})
	return nil
}

// lateAnthropic is a Messages reply that failed after it started: the
// stream's error event's data, Anthropic's error envelope, with the status
// it would have had as code, and detail beside it as every late failure
// has.
func lateAnthropic(ae *api.Error) []byte {
	status := ae.HTTPStatus()
	e := map[string]any{"type": anthropic.ErrorType(status), "message": ae.Message, "code": strconv.Itoa(status)}
	if ae.RetryAfter > 0 {
		e["retry_after"] = retryAfterSeconds(ae)
	}
	if ae.Kind == api.KindCapacity {
		e["queue_depth"] = ae.QueueDepth
	}
	return encodeError(map[string]any{"type": "error", "error": e, "detail": ae.Message}, true)
}

type anthropicStream struct{ *anthropic.Stream }

func (a anthropicStream) Fail(dst []byte, ae *api.Error) []byte {
	f := anthropic.Failure{Status: ae.HTTPStatus(), Message: ae.Message, RetryAfter: retryAfterSeconds(ae)}
	if ae.Kind == api.KindCapacity {
		f.QueueDepth = &ae.QueueDepth
	}
	return a.Stream.Fail(dst, f)
}

// responsesAPI is POST /v1/responses, the OpenAI Responses API, stateless.
func (s *Server) responsesAPI(c *call) error {
	if sealed(c) {
		return errNotSealable("the Responses API", "send the input as an encrypted chat completion")
	}
	req, err := responses.Parse(c.ctx.PostBody())
	if err != nil {
		return err
	}
	id, created := c.requestID, time.Now().Unix()
	return s.chat(c, req.Chat(), &dialect{
		chatError: req.ChatError,
		reply:     func(chat []byte) ([]byte, error) { return req.FromChat(chat, id, created) },
		late: func(ae *api.Error) []byte {
			return req.Failed(id, created, cmp.Or(ae.Code, ae.ErrorType()), ae.Message, retryAfterSeconds(ae))
		},
		stream: func() streamTranslator {
			return responsesStream{req.NewStream(id, created)}
		},
	})
}

type responsesStream struct{ *responses.Stream }

func (r responsesStream) Fail(dst []byte, ae *api.Error) []byte {
	return r.Stream.Fail(dst, cmp.Or(ae.Code, ae.ErrorType()), ae.Message, retryAfterSeconds(ae))
}

// errNotSealable answers a sealed body sent to a route private inference
// does not cover (what): the envelope may be sound, so the answer is the
// route's, with the code moderation's refusal has, and names the routes
// that take one.
func errNotSealable(what, instead string) error {
	return &api.Error{Kind: api.KindInvalidRequest, Code: api.CodeEncryptedInputNotSupported, CodeHeader: true,
		Message: "Private inference does not cover " + what + "; " + instead +
			" (encrypted requests go to /v1/chat/completions, /v1/embeddings, /v1/rerank, /v1/images/generations, /v1/audio/transcriptions and /v1/audio/speech)"}
}

// dialectSSE is sse in a dialect: each chat event becomes the dialect's
// events, written as one chunk.
type dialectSSE struct {
	*chunks
	tr  streamTranslator
	buf []byte
	eventMarks
}

func (e *dialectSSE) Data(events ...[]byte) error {
	e.buf, e.at = e.buf[:0], e.at[:0]
	for _, p := range events {
		e.buf = e.tr.Chunk(e.buf, p)
		e.at = append(e.at, len(e.buf))
	}
	e.chunk = len(e.buf)
	if len(e.buf) == 0 {
		return e.err
	}
	return e.write(e.buf)
}

func (e *dialectSSE) Comment(text string) error {
	e.buf = append(append(append(e.buf[:0], ": "...), text...), "\n\n"...)
	return e.write(e.buf)
}

func (e *dialectSSE) Fail(err error) error {
	return e.write(e.tr.Fail(e.buf[:0], asAPIError(err, "")))
}

// ackedDialectSSE is dialectSSE on a connection that counts what its
// client acknowledged.
type ackedDialectSSE struct {
	dialectSSE
	conn *gatedConn
}

func (e *ackedDialectSSE) Ends(dst []int64) []int64 { return e.ends(dst, e.conn.Written()) }
func (e *ackedDialectSSE) Delivered() int64         { return e.conn.Acknowledged() }
