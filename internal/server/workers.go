package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/cluster"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/store"
)

// connectWorker upgrades a worker's request to the link. The token was
// checked by authorize; the organisation comes from it.
func (s *Server) connectWorker(c *call) error {
	if !websocket.FastHTTPIsWebSocketUpgrade(c.ctx) {
		return api.BadRequest("This is the worker link endpoint; connect to it with `svc worker`")
	}
	orgID, tokenID, log, fl, ka := c.workerOrg, c.workerToken, s.log, s.fleet, s.keepalive
	home, err := s.workerHome(c)
	if err != nil {
		return err
	}
	if home != "" && c.ctx.QueryArgs().Has(link.SpliceParam) && len(c.ctx.Request.Header.Peek(link.SplicedHeader)) == 0 {
		return s.spliceWorker(c, home)
	}
	if home == "" {
		if wait := fl.AllowConnect(orgID); wait > 0 {
			return connectsRefused(wait)
		}
	}
	// An idle link holds only its read buffer, which is small: messages
	// are read past it, and fasthttp's connection buffer lies beneath it.
	// A write buffer is borrowed for each message written.
	up := websocket.FastHTTPUpgrader{
		ReadBufferSize:  1 << 10,
		WriteBufferSize: 4 << 10,
		WriteBufferPool: s.links.WritePool(),
		// Workers are programs, not browsers: there is no origin to check.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
	}
	// The handler runs after this one returns, on the hijacked connection;
	// it uses nothing of the request.
	err = up.Upgrade(c.ctx, func(ws *websocket.Conn) {
		conn := s.links.WebSocket(ws, ka)
		hello, err := fleet.ReadHello(conn)
		if err != nil {
			log.Warn("worker link", "err", err)
			fleet.Refuse(conn, err.Error())
			return
		}
		// A worker links to its organisation's home, which alone
		// schedules the organisation's requests.
		if home != "" {
			log.Debug("worker sent to its organisation's home", "name", hello.Name, "home", home)
			fleet.Redirect(conn, home)
			return
		}
		// A rental's token connects only as its rental's worker.
		if err := s.rentals.CheckWorker(orgID, tokenID, hello.Name); err != nil {
			log.Warn("worker refused", "name", hello.Name, "err", err)
			fleet.Refuse(conn, err.Error())
			return
		}
		// The fleet ends the link if its token is revoked.
		hello.TokenID = tokenID
		if err := fl.Connect(context.Background(), orgID, hello, conn); err != nil {
			log.Warn("worker refused", "name", hello.Name, "err", err)
		}
	})
	if err != nil {
		return api.BadRequest("Worker link upgrade failed: %v", err)
	}
	return nil
}

// connectsRefused is the 429 of a worker connection over its
// organisation's rate (fleet.AllowConnect). The worker retries after
// Retry-After.
func connectsRefused(wait time.Duration) *api.Error {
	secs := api.RetrySeconds(wait)
	return &api.Error{Kind: api.KindRateLimited, Code: api.CodeRateLimited, RetryAfter: time.Duration(secs) * time.Second,
		Message: fmt.Sprintf("This organisation's workers are connecting faster than the gateway lets them; retry in %d s", secs)}
}

// workerHome is where the worker of the call's organisation links: "" here,
// or the URL of its organisation's home, to redirect it to. A replica
// that cannot tell, or whose peer does not answer (dead, its registration
// not yet lapsed), asks the worker to retry, as a busy gateway would: a
// refusal in the welcome would stop it for good, and a redirect to a dead
// peer would only bring it back.
func (s *Server) workerHome(c *call) (string, error) {
	if s.cluster == nil {
		return "", nil
	}
	h, err := s.cluster.Homes.Where(context.Background(), c.workerOrg)
	switch {
	case err == nil && h.ReplicaID == s.cluster.ReplicaID:
		return "", nil
	case err == nil && reachable(h.AdvertiseURL):
		return h.AdvertiseURL, nil
	case err == nil:
		c.ctx.SetConnectionClose()
		return "", &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
			Message: "The organisation's home replica does not answer; retry once another replica has taken it over"}
	case errors.Is(err, cluster.ErrReleased):
		return "", s.notHome(c, "This gateway replica is stopping and links no worker")
	}
	return "", s.homeUnknown(c, c.workerOrg, err)
}

func (s *Server) listWorkers(c *call) error {
	ws := s.fleet.Workers(c.principal.OrgID)
	s.withEnergyToday(ws)
	writeJSON(c.ctx, http.StatusOK, map[string]any{"workers": ws})
	return nil
}

func (s *Server) workerEvents(c *call) error {
	q := query{c: c}
	limit := q.intRange("limit", 50, 1, 1000)
	offset := q.intRange("offset", 0, 0, 1<<31-1)
	if err := q.v.Err(); err != nil {
		return err
	}
	args := c.ctx.QueryArgs()
	evs, err := s.events.ListEvents(c.principal.OrgID, store.EventQuery{
		WorkerID: string(args.Peek("worker_id")), EventType: string(args.Peek("event_type")),
		Limit: limit, Offset: offset,
	})
	if err != nil {
		return err
	}
	writeJSON(c.ctx, http.StatusOK, evs)
	return nil
}

// listModels is GET /v1/models: the models the organisation's connected
// workers serve, once each, with their metadata, in the order of their
// ids. Anthropic's paging (limit, after_id, before_id) applies when asked
// for; without it the list is whole, as OpenAI's clients expect.
func (s *Server) listModels(c *call) error {
	models := s.fleet.Models(c.principal.OrgID)
	page, more, err := modelPage(models, c.ctx.QueryArgs())
	if err != nil {
		return err
	}
	out := api.ModelList{Object: "list", Data: make([]api.ModelEntry, 0, len(page)), HasMore: more}
	for _, m := range page {
		out.Data = append(out.Data, modelEntry(m))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	writeJSON(c.ctx, http.StatusOK, out)
	return nil
}

// modelPage is the page of models, sorted by id, that Anthropic's list
// parameters ask for, and whether more lie beyond it in the direction
// asked: after after_id, or before before_id, at most limit (1 to 1,000).
// An id the list no longer holds still marks its place.
func modelPage(models []api.Model, args *fasthttp.Args) ([]api.Model, bool, error) {
	after, before := string(args.Peek("after_id")), string(args.Peek("before_id"))
	var v api.Validator
	limit := len(models)
	if args.Has("limit") {
		n, err := strconv.Atoi(string(args.Peek("limit")))
		if err != nil || n < 1 || n > maxModelPage {
			v.Add("limit", api.FieldOutOfRange, "must be a whole number from 1 to 1000")
		}
		limit = n
	}
	if after != "" && before != "" {
		v.Add("before_id", api.FieldInvalid, "give after_id or before_id, not both")
	}
	if err := v.Err(); err != nil {
		return nil, false, err
	}
	ids := func(m api.Model, id string) int { return strings.Compare(m.ID, id) }
	if before != "" {
		end, _ := slices.BinarySearchFunc(models, before, ids)
		start := max(0, end-limit)
		return models[start:end], start > 0, nil
	}
	start := 0
	if after != "" {
		i, found := slices.BinarySearchFunc(models, after, ids)
		if found {
			i++
		}
		start = i
	}
	end := min(len(models), start+limit)
	return models[start:end], end < len(models), nil
}

// maxModelPage is the largest page of models Anthropic's list returns.
const maxModelPage = 1000

// getModel is GET /v1/models/{model}: one entry of the list.
func (s *Server) getModel(c *call) error {
	id := c.params.get("model")
	for _, m := range s.fleet.Models(c.principal.OrgID) {
		if m.ID == id {
			writeJSON(c.ctx, http.StatusOK, modelEntry(m))
			return nil
		}
	}
	return modelNotListed(id)
}

// modelNotListed is the 404 for a model no connected worker lists.
func modelNotListed(id string) *api.Error {
	return &api.Error{Kind: api.KindNotFound, Code: api.CodeModelNotFound, Param: "model",
		Message: "Model " + api.ShortModelID(id) + " is not installed on any connected worker; GET /v1/models lists those that are"}
}

func modelEntry(m api.Model) api.ModelEntry {
	return api.ModelEntry{
		ID: m.ID, Object: "model", Created: m.Since.Unix(), OwnedBy: "svc",
		Type: "model", DisplayName: m.ID, CreatedAt: m.Since.UTC().Format(time.RFC3339), Capabilities: m.Capabilities, Engine: m.Engine,
		ContextWindow: m.ContextWindow, SamplingDefaults: m.SamplingDefaults, DefaultThinking: m.DefaultThinking,
		Voices: m.Voices, DefaultVoice: m.DefaultVoice, Local: m.Local, Simulated: m.Simulated, Incomplete: m.Incomplete,
	}
}
