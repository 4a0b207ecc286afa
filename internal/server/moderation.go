package server

import (
	"encoding/json"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/moderation"
	"github.com/svc-dev/svc/internal/relay"
)

// moderations is POST /v1/moderations: check the input, run each check on
// a worker serving the guard model (the organisation's moderation model
// when the body names none), answer the verdicts.
func (s *Server) moderations(c *call) error {
	if sealed(c) {
		// A verdict needs the text, which only the worker could read.
		return moderationErr(api.KindInvalidRequest, api.CodeEncryptedInputNotSupported, "input",
			"Moderation does not take end-to-end encrypted input; send the text in clear")
	}
	req, err := moderation.Parse(c.ctx.PostBody(), moderation.Options{
		AllowRemoteImages: c.org.Settings.AllowRemoteImageURLs,
		DefaultModel:      moderationModel(c),
	})
	if err != nil {
		return err
	}
	named := "Model " + api.ShortModelID(req.Model)
	if req.Defaulted {
		named = "The organisation's moderation model (moderation_model), " + req.Model + ","
	}
	family, ok := moderation.Lookup(req.Model)
	switch {
	case !ok && s.fleet.Model(c.principal.OrgID, req.Model) != nil:
		return moderationErr(api.KindInvalidRequest, api.CodeModelNotModeration, "model",
			named+" is not a moderation model; use one of the guard models ("+strings.Join(moderation.Catalogue(), ", ")+")")
	case !ok:
		return moderationErr(api.KindNotFound, api.CodeModelNotFound, "model",
			named+" is not in the moderation catalogue: "+strings.Join(moderation.Catalogue(), ", "))
	case req.Images && !family.Images():
		return moderationErr(api.KindInvalidRequest, api.CodeImageInputNotSupported, "input",
			named+" checks text only; send images to a model that sees them, such as guard-c:4b")
	}
	body, err := json.Marshal(api.ModerationRequest{Checks: req.Checks, AllowRemoteImages: c.org.Settings.AllowRemoteImageURLs})
	if err != nil {
		return err
	}
	r := inference(c, api.KindModeration, req.Model, false)
	r.Body = body
	r.Feature = api.FeatureModeration
	r.Shape = moderation.ShapeError
	r.Render = func(a relay.Answer) (relay.Output, error) {
		var rep api.ModerationReply
		if err := json.Unmarshal(a.Body, &rep); err != nil || len(rep.Results) != len(req.Checks) {
			return relay.Output{}, relay.BadReply(a.Worker, "one verdict per check", err)
		}
		out, err := json.Marshal(moderationBody{ID: "modr-" + c.requestID, Model: req.Model, Results: rep.Results, Svc: a.Svc})
		return relay.Output{ContentType: "application/json", Body: out, Verdicts: rep.Results}, err
	}
	return s.relayUnary(c, r, formLateModeration)
}

// moderationBody is the reply: the common shape plus svc.
type moderationBody struct {
	ID      string                 `json:"id"`
	Model   string                 `json:"model"`
	Results []api.ModerationResult `json:"results"`
	Svc     json.RawMessage        `json:"svc"`
}

// moderationErr is an error of the moderation table: its code in
// error.code and X-Svc-Error-Code.
func moderationErr(kind api.Kind, code, param, msg string) *api.Error {
	return &api.Error{Kind: kind, Code: code, CodeHeader: true, Param: param, Message: msg}
}
