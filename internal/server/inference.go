package server

import (
	"cmp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/completions"
	"github.com/svc-dev/svc/internal/embeddings"
	"github.com/svc-dev/svc/internal/images"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/rerank"
)

// chatCompletions is POST /v1/chat/completions: validate, fit the request
// to the model, relay.
func (s *Server) chatCompletions(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindChat)
	}
	return s.chat(c, c.ctx.PostBody(), nil)
}

// chat validates a chat request, fits it to the model and relays it; d,
// when set, is the dialect its answer is translated into.
func (s *Server) chat(c *call, body []byte, d *dialect) error {
	req, err := chat.Parse(body, chat.Options{AllowRemoteImages: c.org.Settings.AllowRemoteImageURLs})
	if err != nil {
		return d.restate(err)
	}
	// The dialects' output caps (Anthropic's max_tokens, the Responses
	// API's max_output_tokens) count thinking; chat's caps the answer.
	req.CapIncludesThinking = d != nil
	r := inference(c, api.KindChat, req.Model, req.Stream)
	r.Chat = req
	r.ModelInfo = s.fleet.ModelFor(c.principal.OrgID, req.Model, r.Pin)
	if err := req.Prepare(r.ModelInfo); err != nil {
		err = d.restate(err)
		s.refuse(c, r, err)
		return err
	}
	r.Body = req.Body
	r.Affinity = relay.Affinity(req.Model, req.Messages)
	r.ContentFilter = s.contentFilter(c)
	if d != nil {
		if req.Stream {
			return s.relayStreamAs(c, r, d.stream())
		}
		r.Translate = d.reply
		return s.answerUnaryAs(c, s.start(c, r), formLate, d)
	}
	if req.Stream {
		return s.relayStream(c, r)
	}
	return s.relayUnary(c, r, formLate)
}

// contentFilter is the moderation model a chat is checked with on its
// worker, when the key or the organisation has content filtering on.
func (s *Server) contentFilter(c *call) string {
	if c.principal.ContentFilter || c.org.Settings.ContentFiltering {
		return moderationModel(c)
	}
	return ""
}

// moderationModel is the organisation's moderation model: what content
// filtering checks with, and what a moderation naming no model uses.
func moderationModel(c *call) string {
	return cmp.Or(c.org.Settings.ModerationModel, api.DefaultModerationModel)
}

// textCompletions is POST /v1/completions: a raw prompt continued by a
// chat model, with no chat template around it (the engine's own raw
// completion: /v1/completions of an OpenAI-compatible server, Ollama's
// generate with raw set).
func (s *Server) textCompletions(c *call) error {
	if sealed(c) {
		return errNotSealable("text completions", "send the prompt as an encrypted chat completion")
	}
	body := append([]byte(nil), c.ctx.PostBody()...)
	req, err := completions.Parse(body)
	if err != nil {
		return err
	}
	r := inference(c, api.KindCompletion, req.Model, req.Stream)
	r.ModelInfo = s.fleet.ModelFor(c.principal.OrgID, req.Model, r.Pin)
	r.PromptChars = req.PromptChars
	r.Body = req.Body
	if s.contentFilter(c) != "" {
		// The worker's filter reads chat messages; a raw prompt would pass
		// it unchecked, so it is not sent at all.
		err := api.Forbidden("Content filtering is on for this key or organisation, and text completions are not filtered: use /v1/chat/completions")
		s.refuse(c, r, err)
		return err
	}
	if req.Stream {
		return s.relayStream(c, r)
	}
	return s.relayUnary(c, r, formLate)
}

// embeddings is POST /v1/embeddings.
func (s *Server) embeddings(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindEmbeddings)
	}
	model, body, err := embeddings.Parse(append([]byte(nil), c.ctx.PostBody()...))
	if err != nil {
		return err
	}
	r := inference(c, api.KindEmbeddings, model, false)
	r.ModelInfo = s.fleet.Model(c.principal.OrgID, model)
	r.Body = body
	return s.relayUnary(c, r, formLate)
}

// rerank is POST /v1/rerank. The body goes to the worker as it came: its
// engine adapter sends the documents in the form the engine reads.
func (s *Server) rerank(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindRerank)
	}
	body := append([]byte(nil), c.ctx.PostBody()...)
	req, err := rerank.Parse(body)
	if err != nil {
		return err
	}
	r := inference(c, api.KindRerank, req.Model, false)
	r.ModelInfo = s.fleet.Model(c.principal.OrgID, req.Model)
	r.Body = req.Body
	return s.relayUnary(c, r, formLate)
}

// images is POST /v1/images/generations: the images come back as
// b64_json, counted for the usage row.
func (s *Server) images(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindImages)
	}
	req, err := images.Parse(c.ctx.PostBody())
	if err != nil {
		return err
	}
	r := inference(c, api.KindImages, req.Model, false)
	r.ModelInfo = s.fleet.Model(c.principal.OrgID, req.Model)
	r.Body = req.Body
	r.Render = func(a relay.Answer) (relay.Output, error) {
		out, n, err := images.Reply(a.Body, a.Svc)
		if err != nil {
			return relay.Output{}, relay.BadReply(a.Worker, "images", err)
		}
		return relay.Output{ContentType: "application/json", Body: out, Images: n}, nil
	}
	return s.relayUnary(c, r, formLate)
}
