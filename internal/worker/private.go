package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/embeddings"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/images"
	"github.com/svc-dev/svc/internal/rerank"
	"github.com/svc-dev/svc/internal/speech"
	"github.com/svc-dev/svc/internal/transcription"
)

// openPrivate opens a request sealed to this worker's key and readies its
// body for the engine as the gateway would a clear one: a chat is
// validated and fitted to the model here, since the gateway could not read
// it. Failures are final: another worker holds another key. One of a
// request that opened comes sealed to the client (invalid); the others say
// what is wrong without repeating any of the content.
func (a *Agent) openPrivate(req *api.LinkRequest, envelope []byte) (*privateRequest, *api.Result) {
	if a.cfg.E2E == nil {
		return nil, final(engine.Failure(http.StatusServiceUnavailable, api.TypeServiceUnavailable, "this worker serves no private inference"))
	}
	opened, err := e2ee.OpenRequest(a.cfg.E2E, envelope)
	if err == nil && !a.replays.first(opened.ReplayKey()) {
		return nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest,
			"this encrypted request was already served: a replay"))
	}
	switch {
	case errors.Is(err, e2ee.ErrUnknownKey):
		r := engine.Failure(http.StatusServiceUnavailable, api.TypeServiceUnavailable, "the request is sealed to a key this worker no longer holds")
		r.Error.Code = api.CodeNoPrivateInferenceWorker
		return nil, final(r)
	case err != nil:
		return nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest, err.Error()))
	case opened.Model != req.Model || opened.Stream != req.Stream:
		return nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest, "the clear routing fields do not match the sealed ones"))
	}
	p := &privateRequest{Request: opened, body: opened.Body}
	switch req.Kind {
	case api.KindTranscription:
		// The sealed plaintext is the upload's Content-Type on a line of
		// its own, then the multipart body (docs/e2e.md).
		ctype, form, ok := bytes.Cut(opened.Body, []byte("\n"))
		if !ok {
			return nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest, "the sealed upload has no content type line"))
		}
		// The plaintext is in memory already; the audio is copied out of
		// its form once.
		var audio bytes.Buffer
		tr, err := transcription.Parse(string(bytes.TrimSpace(ctype)), bytes.NewReader(form), &audio)
		var params []byte
		if err == nil {
			params, err = json.Marshal(tr.Params)
			p.audio = &audio
			p.audioFormat, p.audioSeconds = tr.Params.Format, tr.Params.Seconds
		}
		if err != nil {
			return nil, p.invalid(err)
		}
		p.body = params
		// The gateway renders a clear transcript; a sealed one is rendered
		// here, before it is sealed.
		p.render = func(answer []byte) ([]byte, error) {
			var t api.Transcript
			if err := json.Unmarshal(answer, &t); err != nil {
				return nil, err
			}
			_, out, err := tr.Render(&t, nil)
			return out, err
		}
	case api.KindSpeech:
		// What the gateway does to a clear speech request: read it and
		// check the voice against the model's.
		parsed, err := speech.Parse(opened.Body)
		if err == nil {
			if m := a.modelMeta(req.Model); m != nil {
				err = parsed.Fit(m)
			}
		}
		if err == nil {
			p.body, err = json.Marshal(parsed.Params)
		}
		if err != nil {
			return nil, p.invalid(err)
		}
	case api.KindRerank:
		parsed, err := rerank.Parse(opened.Body)
		if err != nil {
			return nil, p.invalid(err)
		}
		p.body = parsed.Body
	case api.KindEmbeddings:
		// As the gateway would: a whole number written as one.
		_, body, err := embeddings.Parse(opened.Body)
		if err != nil {
			return nil, p.invalid(err)
		}
		p.body = body
	case api.KindImages:
		// As the gateway would: n set and b64_json asked for, url refused.
		parsed, err := images.Parse(opened.Body)
		if err != nil {
			return nil, p.invalid(err)
		}
		p.body = parsed.Body
	case api.KindChat:
		parsed, err := chat.Parse(opened.Body, chat.Options{Sealed: true})
		if err == nil {
			err = parsed.Prepare(a.modelMeta(req.Model))
		}
		if err != nil {
			return nil, p.invalid(err)
		}
		p.body, p.answerCap = parsed.Body, parsed.AnswerCap()
	}
	return p, nil
}

// privateRequest is an opened sealed request, ready for the engine.
type privateRequest struct {
	*e2ee.Request
	body  []byte
	audio io.Reader // a transcription's file
	// audioFormat and audioSeconds are what the file's content says it
	// is, for the result: the gateway's usage row cannot read them.
	audioFormat  string
	audioSeconds float64
	// render turns the engine's answer into what the client asked for,
	// before it is sealed; nil sends it as it is.
	render func([]byte) ([]byte, error)
	// answerCap is a chat's cap on its answer apart from its thinking,
	// which the gateway cannot read of a sealed one (api.LinkRequest's
	// AnswerMaxTokens); 0 for none.
	answerCap int
}

// invalid is the failed check of a sealed request that opened, answered
// with the body the gateway gives a clear request's (a validation's with
// its list of fields) and the check's status, but for a validation's 422:
// the spec answers an encrypted request's with 400. The body may quote the
// prompt and tells which field failed, so it is sealed to the client; the
// result the gateway reads in the clear tells only the status.
func (p *privateRequest) invalid(err error) *api.Result {
	var ae *api.Error
	if !errors.As(err, &ae) {
		ae = api.BadRequest("%s", err)
	}
	status := ae.HTTPStatus()
	if status == http.StatusUnprocessableEntity {
		status = http.StatusBadRequest
	}
	body, _ := json.Marshal(ae.Body(true))
	return final(&api.Result{Status: status, Sealed: p.Sealer.ReplyBody(body),
		Error: &api.ResultError{Message: "the encrypted request is invalid", Type: api.TypeForStatus(status)}})
}

// replays remembers the sealed requests this worker has opened, by their
// encapsulation (e2ee.Envelope.ReplayKey), so the same request sent again
// by anyone on the path, in the same bytes or respelt, is refused rather
// than run twice. Each seal's encapsulation is fresh randomness, so a
// client's own retries are new requests. The memory is bounded: the
// oldest are forgotten first.
type replays struct {
	mu    sync.Mutex
	seen  map[[32]byte]struct{}
	order [][32]byte
	next  int
}

const maxReplays = 1 << 16

// first records the request of key h and reports whether it had not been
// seen.
func (r *replays) first(h [32]byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[[32]byte]struct{})
		r.order = make([][32]byte, maxReplays)
	}
	if _, ok := r.seen[h]; ok {
		return false
	}
	if old := r.order[r.next]; old != ([32]byte{}) {
		delete(r.seen, old)
	}
	r.order[r.next] = h
	r.next = (r.next + 1) % maxReplays
	r.seen[h] = struct{}{}
	return true
}

func final(r *api.Result) *api.Result {
	r.Final = true
	return r
}

// modelMeta is what this worker knows of one of its models.
func (a *Agent) modelMeta(id string) *api.Model {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.models {
		if a.models[i].ID == id {
			m := a.models[i]
			return &m
		}
	}
	return nil
}

// sealingSink seals what an engine answers to a private request: each
// streamed event as the next chunk, after the clear header with the
// response nonce; a whole body at the end, as the one final chunk.
type sealingSink struct {
	out     engine.Sink
	sealer  *e2ee.ResponseSealer
	render  func([]byte) ([]byte, error)
	started bool
	body    []byte
	// head is the first event's identity, which the usage chunk repeats.
	head *chunkHead
}

func (s *sealingSink) Event(ctx context.Context, data []byte) error {
	if s.head == nil {
		s.head = &chunkHead{}
		_ = json.Unmarshal(data, s.head)
	}
	if !s.started {
		s.started = true
		if err := s.out.Event(ctx, s.sealer.StartData()); err != nil {
			return err
		}
	}
	return s.out.Event(ctx, s.sealer.EventData(data))
}

func (s *sealingSink) Body(_ context.Context, data []byte) error {
	s.body = append(s.body, data...)
	return nil
}

// finish sends what closes the reply once the engine has succeeded: the
// final chunk of a stream, after a chunk with its usage (the gateway
// writes a clear stream's, and cannot read a sealed one's), or the sealed
// body.
func (s *sealingSink) finish(ctx context.Context, stream bool, usage *api.Usage) error {
	if !stream {
		body := s.body
		if s.render != nil {
			var err error
			if body, err = s.render(body); err != nil {
				return err
			}
		}
		return s.out.Body(ctx, s.sealer.ReplyBody(body))
	}
	if !s.started {
		s.started = true
		if err := s.out.Event(ctx, s.sealer.StartData()); err != nil {
			return err
		}
	}
	if usage != nil {
		head := chunkHead{}
		if s.head != nil {
			head = *s.head
		}
		chunk, err := json.Marshal(usageChunk{chunkHead: head, Object: "chat.completion.chunk", Choices: []struct{}{}, Usage: usage.AppendOpenAI(nil)})
		if err != nil {
			return err
		}
		if err := s.out.Event(ctx, s.sealer.EventData(chunk)); err != nil {
			return err
		}
	}
	return s.out.Event(ctx, s.sealer.FinalData())
}

// usageChunk is the chunk of a stream that carries its usage, as the
// gateway writes it for a clear stream.
type usageChunk struct {
	chunkHead
	Object  string          `json:"object"`
	Choices []struct{}      `json:"choices"`
	Usage   json.RawMessage `json:"usage"`
}
