package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/moderation"
)

// guard is a moderation model as the worker runs it: the family that
// says how to ask it and read it, on the engine serving it.
type guard struct {
	family moderation.Family
	eng    engine.Engine
	local  string // the engine's name for the model
	window int    // its context window in tokens, 0 when unknown
}

// guardFor returns the guard for a moderation model the worker lists, or
// an error result when it cannot run one.
func (a *Agent) guardFor(id string) (*guard, *api.Result) {
	family, ok := moderation.Lookup(id)
	if !ok {
		return nil, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeModelNotModeration,
			"model "+id+" is not a moderation model")
	}
	s := a.servedFor(id)
	if s.eng == nil {
		r := engine.Failure(http.StatusConflict, api.TypeConflict, "this worker does not serve the moderation model "+id)
		r.Error.Code = api.CodeModerationUnavailable
		r.Retryable = true // another worker may: our model list was out of date
		return nil, r
	}
	return &guard{family: family, eng: a.watchOf(s.eng), local: s.local, window: s.window}, nil
}

// moderate runs a moderation request: each check through the guard, one
// after another, answered with one result each.
func (a *Agent) moderate(ctx context.Context, id string, body []byte, out engine.Sink) *api.Result {
	g, res := a.guardFor(id)
	if res != nil {
		return res
	}
	var req api.ModerationRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "malformed moderation request: "+err.Error())
	}
	reply := api.ModerationReply{Results: make([]api.ModerationResult, 0, len(req.Checks))}
	fetched := 0
	for _, c := range req.Checks {
		check := moderation.Check{Role: moderation.RoleUser, Texts: c.Texts}
		for _, img := range c.Images {
			if img.URL != "" {
				got, res := a.fetchImage(ctx, img.URL, req.AllowRemoteImages)
				if res != nil {
					return res
				}
				// 32 inputs of 20 MB each would be 640 MB held for one
				// small request: the images fetched share one bound.
				if fetched += len(got.Data); fetched > maxRemoteImageBytes {
					return finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused,
						fmt.Sprintf("the request's remote images come to more than %d MiB together", maxRemoteImageBytes>>20))
				}
				img = got
			}
			check.Images = append(check.Images, img)
		}
		r, _, res := g.judge(ctx, check)
		if res != nil {
			return res
		}
		reply.Results = append(reply.Results, r)
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode the verdicts: "+err.Error())
	}
	if err := out.Body(ctx, b); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// judge asks the guard about one check and maps its verdict; res is the
// failure when there is none.
func (g *guard) judge(ctx context.Context, c moderation.Check) (api.ModerationResult, moderation.Verdict, *api.Result) {
	call, err := g.family.Call(g.local, c)
	if err != nil {
		return api.ModerationResult{}, moderation.Verdict{}, engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, err.Error())
	}
	var got captureSink
	if res := g.eng.Serve(ctx, &engine.Request{Kind: call.Kind, Model: g.local, Body: call.Body}, &got); res == nil || res.Status != http.StatusOK {
		return api.ModerationResult{}, moderation.Verdict{}, res
	}
	answer, err := answerText(call.Kind, got.body)
	if err == nil {
		var v moderation.Verdict
		if v, err = g.family.Parse(answer); err == nil {
			return g.family.Result(v, c), v, nil
		}
	}
	return api.ModerationResult{}, moderation.Verdict{}, finalFailure(http.StatusBadGateway, api.TypeUpstream, api.CodeModerationInvalidVerdict,
		"the moderation model replied with neither safe nor unsafe: "+quoteStart(answer))
}

// answerText is the text of an engine's answer to a guard call: the
// message of a chat completion or the text of a completion.
func answerText(kind string, body []byte) (string, error) {
	var reply struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		return "", err
	}
	if len(reply.Choices) == 0 {
		return "", errors.New("the engine answered with no choices")
	}
	ch := reply.Choices[0]
	if kind == api.KindCompletion {
		return ch.Text, nil
	}
	if ch.Message.Content == nil {
		return "", errors.New("the engine answered with no message")
	}
	return *ch.Message.Content, nil
}

// fetchImage fetches an https image URL for a check, when the
// organisation allows remote images.
func (a *Agent) fetchImage(ctx context.Context, url string, allowed bool) (api.ModerationImage, *api.Result) {
	if !allowed {
		return api.ModerationImage{}, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageURLNotAllowed,
			"image URLs are not allowed for this organisation; send the image as a data: URL")
	}
	img, err := a.images.Fetch(ctx, url)
	if err == nil {
		return img, nil
	}
	if ctx.Err() != nil {
		return api.ModerationImage{}, engine.Cancelled()
	}
	var fe *moderation.FetchError
	if errors.As(err, &fe) && fe.Refused {
		return api.ModerationImage{}, finalFailure(http.StatusBadRequest, api.TypeInvalidRequest, api.CodeRemoteImageRefused, err.Error())
	}
	return api.ModerationImage{}, finalFailure(http.StatusBadGateway, api.TypeUpstream, api.CodeRemoteImageUnavailable, err.Error())
}

// finalFailure is a failure any worker would answer alike: the gateway
// does not try another.
func finalFailure(status int, typ, code, msg string) *api.Result {
	r := engine.Failure(status, typ, msg)
	r.Error.Code = code
	r.Final = true
	return r
}

// quoteStart quotes the start of a model's answer for a message.
func quoteStart(s string) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) > 120 {
		return `"` + string(r[:120]) + `…"`
	}
	return `"` + string(r) + `"`
}
