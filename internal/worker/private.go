package worker

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/e2ee"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/speech"
)

// openPrivate opens a request sealed to this worker's key and readies its
// body for the engine as the gateway would a clear one: a chat is
// validated and fitted to the model here, since the gateway could not read
// it. Failures are final: another worker holds another key. Their
// messages say what is wrong without repeating any of the content.
func (a *Agent) openPrivate(req *api.LinkRequest, envelope []byte) (*e2ee.Request, []byte, *api.Result) {
	if a.cfg.E2E == nil {
		return nil, nil, final(engine.Failure(http.StatusServiceUnavailable, api.TypeServiceUnavailable, "this worker serves no private inference"))
	}
	opened, err := e2ee.OpenRequest(a.cfg.E2E, envelope)
	if err == nil && !a.replays.first(envelope) {
		return nil, nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest,
			"this encrypted request was already served: a replay"))
	}
	switch {
	case errors.Is(err, e2ee.ErrUnknownKey):
		r := engine.Failure(http.StatusServiceUnavailable, api.TypeServiceUnavailable, "the request is sealed to a key this worker no longer holds")
		r.Error.Code = "no_private_inference_worker"
		return nil, nil, final(r)
	case err != nil:
		return nil, nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest, err.Error()))
	case opened.Model != req.Model || opened.Stream != req.Stream:
		return nil, nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidEncryptedRequest, "the clear routing fields do not match the sealed ones"))
	}
	body := opened.Body
	switch req.Kind {
	case api.KindSpeech:
		// What the gateway does to a clear speech request: read it and
		// check the voice against the model's.
		parsed, err := speech.Parse(body)
		if err == nil {
			if m := a.modelMeta(req.Model); m != nil {
				err = parsed.Fit(m)
			}
		}
		if err == nil {
			body, err = json.Marshal(parsed.Params)
		}
		if err != nil {
			return nil, nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, invalidAt(err)))
		}
	case api.KindChat:
		parsed, err := chat.Parse(body, chat.Options{})
		if err == nil {
			err = parsed.Prepare(a.modelMeta(req.Model))
		}
		if err != nil {
			return nil, nil, final(engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, invalidAt(err)))
		}
		body = parsed.Body
	}
	return opened, body, nil
}

// invalidAt words a sealed request's validation failure. Validation
// failures of a sealed request are 400s (the spec's 422 carries details a
// client cannot check against a body the gateway never saw), and they name
// the field, never the content.
func invalidAt(err error) string {
	msg := "the encrypted request is invalid"
	var ae *api.Error
	if errors.As(err, &ae) && ae.Param != "" {
		msg += " at " + ae.Param
	} else if ae != nil && len(ae.Fields) > 0 {
		msg += " at " + ae.Fields[0].Field
	}
	return msg
}

// replays remembers the envelopes this worker has opened, so the same
// sealed request sent again (by anyone on the path) is refused rather than
// run twice. Each envelope's encapsulation is fresh randomness, so a
// client's own retries are new envelopes. The memory is bounded: the
// oldest are forgotten first.
type replays struct {
	mu    sync.Mutex
	seen  map[[32]byte]struct{}
	order [][32]byte
	next  int
}

const maxReplays = 1 << 16

// first records envelope and reports whether it had not been seen.
func (r *replays) first(envelope []byte) bool {
	h := sha256.Sum256(envelope)
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
	started bool
	body    []byte
}

func (s *sealingSink) Event(ctx context.Context, data []byte) error {
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
// final chunk of a stream, or the sealed body.
func (s *sealingSink) finish(ctx context.Context, stream bool) error {
	if !stream {
		return s.out.Body(ctx, s.sealer.ReplyBody(s.body))
	}
	if !s.started {
		s.started = true
		if err := s.out.Event(ctx, s.sealer.StartData()); err != nil {
			return err
		}
	}
	return s.out.Event(ctx, s.sealer.FinalData())
}
