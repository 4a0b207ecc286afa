package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
)

// e2eKeys is GET /api/v1/e2e/keys: the public keys of the organisation's
// connected workers, with the models each serves privately. A client seals
// a request to one of them; only that worker can open it.
func (s *Server) e2eKeys(c *call) error {
	keys := []e2ee.PublicKeyInfo{}
	for _, k := range s.fleet.PrivateKeys(c.principal.OrgID) {
		keys = append(keys, e2ee.PublicKeyInfo{KeyID: k.Key.KeyID, Version: k.Key.Version, KEMID: k.Key.KEMID,
			KDFID: k.Key.KDFID, AEADID: k.Key.AEADID, PublicKey: k.Key.PublicKey,
			WorkerID: k.WorkerID, WorkerName: k.WorkerName, Models: k.Models})
	}
	writeJSON(c.ctx, http.StatusOK, map[string]any{"keys": keys})
	return nil
}

// sealed reports whether the request is end-to-end encrypted: its body is
// an envelope only the worker holding its key can open.
func sealed(c *call) bool {
	ct, _, _ := strings.Cut(string(c.ctx.Request.Header.ContentType()), ";")
	return strings.EqualFold(strings.TrimSpace(ct), e2ee.ContentType)
}

// privateInference relays a sealed request to the worker holding its key.
// The gateway reads only the envelope's clear routing fields (model,
// stream, key id); the body goes to the worker as it came, and what comes
// back is sealed but for the worker's identity beside it.
func (s *Server) privateInference(c *call, kind string) error {
	if !c.org.Plan.Paid() {
		return api.PlanRequired("Private inference is part of the Pro and Enterprise plans; this organisation is on %s", c.org.Plan)
	}
	body := append([]byte(nil), c.ctx.PostBody()...)
	env, err := e2ee.ParseEnvelope(body)
	if err != nil {
		// The parser's messages name what is wrong, never the content.
		return &api.Error{Kind: api.KindInvalidRequest, Type: api.TypeInvalidEncryptedRequest, Message: err.Error()}
	}
	if kind != api.KindChat && env.Stream {
		return &api.Error{Kind: api.KindInvalidRequest, Type: api.TypeInvalidEncryptedRequest, Message: "Only chat is streamed"}
	}
	holder := s.fleet.KeyHolder(c.principal.OrgID, env.KeyID, env.Model)
	if holder == "" {
		return errNoPrivateWorker(env.KeyID)
	}
	r := inference(c, kind, env.Model, env.Stream)
	if r.Pin != "" && r.Pin != holder {
		// Only the worker holding the key can open the request: a pin to
		// another is one the request cannot keep.
		return api.BadRequest("The request is sealed to the key of worker %s, and X-Svc-Worker-Id names %s, which cannot open it: "+
			"seal it to the key of the worker it pins (GET /api/v1/e2e/keys names each key's worker), or leave the header out", holder, r.Pin)
	}
	r.E2E = true
	r.Pin = holder
	r.Body = body
	if kind == api.KindChat {
		// The worker that opens the request checks it, and seals what it
		// lets through.
		r.ContentFilter = s.contentFilter(c)
	}
	if env.Stream {
		return s.relayStream(c, r)
	}
	return s.relayUnary(c, r, formLate)
}

func errNoPrivateWorker(keyID string) *api.Error {
	return &api.Error{Kind: api.KindUnavailable, Code: api.CodeNoPrivateInferenceWorker, CodeHeader: true,
		RetryAfter: time.Second,
		Message:    fmt.Sprintf("No connected worker holds the key %s; fetch the organisation's keys again and retry", keyID)}
}
