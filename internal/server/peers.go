package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/rental"
)

// The peer routes are how the leader, which runs the rentals, follows the
// workers of rentals whose organisations are homed on other replicas:
// whether a rental's worker is connected (billing starts then), and
// closing its link when the rental stops. They answer only requests that
// came over a replica link, whose peer proved it holds the cluster's
// secret; and peer.Path, where those links begin, proves it in the link.

var errNotPeer = &api.Error{Kind: api.KindUnauthenticated, Code: "not_a_peer",
	Message: "This endpoint answers only the cluster's gateway replicas"}

func (s *Server) authorizePeer(c *call) error {
	switch {
	case c.route.path == peer.Path:
		// A link is not begun on a link.
		if s.peerAccept == nil || c.forwarded || !websocket.FastHTTPIsWebSocketUpgrade(c.ctx) {
			return errNotPeer
		}
		return nil
	case c.forwarded:
		return nil
	}
	return errNotPeer
}

// peerWorkers is GET /api/v1/peers/workers?org_id=: the organisation's
// workers linked here.
func (s *Server) peerWorkers(c *call) error {
	writeJSON(c.ctx, http.StatusOK, map[string]any{"workers": s.fleet.Workers(string(c.ctx.QueryArgs().Peek("org_id")))})
	return nil
}

// peerDisconnect is the body of POST /api/v1/peers/disconnect.
type peerDisconnect struct {
	OrgID    string `json:"org_id"`
	WorkerID string `json:"worker_id"`
	Reason   string `json:"reason"`
}

// disconnectForPeer closes a worker's link here for a peer.
func (s *Server) disconnectForPeer(c *call) error {
	var d peerDisconnect
	if err := json.Unmarshal(c.ctx.PostBody(), &d); err != nil || d.OrgID == "" || d.WorkerID == "" {
		return api.BadRequest("Expected {\"org_id\", \"worker_id\", \"reason\"}")
	}
	s.fleet.Disconnect(d.OrgID, d.WorkerID, d.Reason)
	c.ctx.SetStatusCode(http.StatusNoContent)
	return nil
}

// peerTimeout bounds a call to a peer's routes.
const peerTimeout = 5 * time.Second

// callPeer sends a request to the peer to over its link and decodes its
// JSON answer into out, when out is not nil.
func (s *Server) callPeer(ctx context.Context, method string, to target, uri string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	sess, err := s.peers.Session(ctx, to.id, to.url)
	if err != nil {
		return err
	}
	req := fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		method, uri, to.id, len(b))
	st, err := sess.Open(ctx, peer.AppendRequest(nil, "", nil), append(req, b...))
	if err != nil {
		return err
	}
	defer context.AfterFunc(ctx, st.Reset)()
	ar := newAnswerReader(st)
	defer ar.release()
	var resp fasthttp.Response
	if err := resp.Read(ar.br); err != nil {
		return fmt.Errorf("%s %s: %w", method, to.url+uri, err)
	}
	// The stream's end, so that the peer lets it go.
	_, _ = io.Copy(io.Discard, ar.br)
	if resp.StatusCode() >= 300 {
		return fmt.Errorf("%s %s: %d", method, to.url+uri, resp.StatusCode())
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Body(), out)
}

// rentalFleet is the fleet as the leader's rentals see it: each
// organisation's workers at its home, here or on a peer.
type rentalFleet struct{ s *Server }

// RentalFleet is the fleet the rentals of a cluster's leader follow; on a
// single host, the local one.
func (s *Server) RentalFleet() rental.Fleet {
	if s.cluster == nil {
		return s.fleet
	}
	return rentalFleet{s}
}

// home is orgID's home when it is a live peer; the zero target when it
// is here or has none (an organisation without a home has no workers).
func (f rentalFleet) home(orgID string) target {
	h, ok := f.s.cluster.Homes.Lookup(orgID)
	if !ok || h.ReplicaID == f.s.cluster.ReplicaID || !h.Alive {
		return target{}
	}
	return target{id: h.ReplicaID, url: h.AdvertiseURL}
}

func (f rentalFleet) Workers(orgID string) []api.Worker {
	home := f.home(orgID)
	if home.url == "" {
		return f.s.fleet.Workers(orgID)
	}
	var out struct {
		Workers []api.Worker `json:"workers"`
	}
	if err := f.s.callPeer(context.Background(), "GET", home, "/api/v1/peers/workers?org_id="+url.QueryEscape(orgID), nil, &out); err != nil {
		f.s.log.Warn("cluster: the workers of an organisation homed on a peer", "org", orgID, "home", home.url, "err", err)
		return nil
	}
	return out.Workers
}

func (f rentalFleet) Disconnect(orgID, workerID, reason string) {
	home := f.home(orgID)
	if home.url == "" {
		f.s.fleet.Disconnect(orgID, workerID, reason)
		return
	}
	if err := f.s.callPeer(context.Background(), "POST", home, "/api/v1/peers/disconnect",
		peerDisconnect{OrgID: orgID, WorkerID: workerID, Reason: reason}, nil); err != nil {
		f.s.log.Warn("cluster: disconnect a worker at its organisation's home", "org", orgID, "worker_id", workerID, "home", home.url, "err", err)
	}
}
