package server

import (
	"context"
	"net/http"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/store"
)

// connectWorker upgrades a worker's request to the link. The token was
// checked by authorize; the organisation comes from it.
func (s *Server) connectWorker(c *call) error {
	if !websocket.FastHTTPIsWebSocketUpgrade(c.ctx) {
		return api.BadRequest("This is the worker link endpoint; connect to it with `svc worker`")
	}
	orgID, tokenID, log, fl, ka, rentals := c.workerOrg, c.workerToken, s.log, s.fleet, s.keepalive, s.rentals.Load()
	leader, standby := s.leaderURL()
	// A standby that knows no leader (the last one's lease lapsed), or
	// whose leader does not answer (dead, its lease not yet lapsed), asks
	// the worker to retry, as a busy gateway would: a refusal in the
	// welcome would stop it for good, and a redirect to a dead leader
	// would only bring it back.
	if standby && (leader == "" || !reachable(leader)) {
		return s.standby(c)
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
	err := up.Upgrade(c.ctx, func(ws *websocket.Conn) {
		conn := s.links.WebSocket(ws, ka)
		hello, err := fleet.ReadHello(conn)
		if err != nil {
			log.Warn("worker link", "err", err)
			fleet.Refuse(conn, err.Error())
			return
		}
		// A standby sends the worker to the leader, which alone links
		// workers.
		if standby {
			log.Debug("worker sent to the leader", "name", hello.Name, "leader", leader)
			fleet.Redirect(conn, leader)
			return
		}
		// A rental's token connects only as its rental's worker.
		if rentals != nil {
			if err := rentals.CheckWorker(orgID, tokenID, hello.Name); err != nil {
				log.Warn("worker refused", "name", hello.Name, "err", err)
				fleet.Refuse(conn, err.Error())
				return
			}
		}
		if err := fl.Connect(context.Background(), orgID, hello, conn); err != nil {
			log.Warn("worker refused", "name", hello.Name, "err", err)
		}
	})
	if err != nil {
		return api.BadRequest("Worker link upgrade failed: %v", err)
	}
	return nil
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

// workerPower checks the worker belongs to the caller's organisation;
// power history itself arrives with the power readers.
// listModels is GET /v1/models: the models the organisation's connected
// workers serve, once each, with their metadata.
func (s *Server) listModels(c *call) error {
	models := s.fleet.Models(c.principal.OrgID)
	created := time.Now().Unix()
	out := api.ModelList{Object: "list", Data: make([]api.ModelEntry, 0, len(models))}
	for _, m := range models {
		out.Data = append(out.Data, api.ModelEntry{
			ID: m.ID, Object: "model", Created: created, OwnedBy: "svc", Capabilities: m.Capabilities, Engine: m.Engine,
			ContextWindow: m.ContextWindow, SamplingDefaults: m.SamplingDefaults, DefaultThinking: m.DefaultThinking,
			Voices: m.Voices, DefaultVoice: m.DefaultVoice, Local: m.Local, Simulated: m.Simulated,
		})
	}
	writeJSON(c.ctx, http.StatusOK, out)
	return nil
}
