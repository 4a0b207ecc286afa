package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/rental"
)

// The peer routes are how the leader, which runs the rentals, follows the
// workers of rentals whose organisations are homed on other replicas:
// whether a rental's worker is connected (billing starts then), and
// closing its link when the rental stops. They answer only requests signed
// with the cluster's secret.

// peerHeader carries a peer request's signature: the unix time it was
// made, a dot, and the HMAC of the method, the request URI and the time.
const peerHeader = "X-Svc-Peer"

// peerSkew bounds how old a peer's signature may be.
const peerSkew = time.Minute

var errNotPeer = &api.Error{Kind: api.KindUnauthenticated, Code: "not_a_peer",
	Message: "This endpoint answers only the cluster's gateway replicas"}

func (f *forwarder) signPeer(method, uri string, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	m := hmac.New(sha256.New, f.secret)
	fmt.Fprintf(m, "peer\n%s\n%s\n%s", method, uri, ts)
	return ts + "." + hex.EncodeToString(m.Sum(nil))
}

// peerSigned reports whether v signs method and uri, made within
// peerSkew of now.
func (f *forwarder) peerSigned(method, uri, v string, now time.Time) bool {
	if f == nil {
		return false
	}
	ts, _, ok := strings.Cut(v, ".")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return false
	}
	at := time.Unix(sec, 0)
	if now.Sub(at).Abs() > peerSkew {
		return false
	}
	return hmac.Equal([]byte(v), []byte(f.signPeer(method, uri, at)))
}

func (s *Server) authorizePeer(c *call) error {
	if !s.forwarder.peerSigned(string(c.ctx.Method()), string(c.ctx.Request.RequestURI()),
		string(c.ctx.Request.Header.Peek(peerHeader)), time.Now()) {
		return errNotPeer
	}
	return nil
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

// callPeer sends a signed request to the peer at base and decodes its
// JSON answer into out, when out is not nil.
func (s *Server) callPeer(ctx context.Context, method, base, uri string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+uri, rd)
	if err != nil {
		return err
	}
	req.Header.Set(peerHeader, s.forwarder.signPeer(method, uri, time.Now()))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.forwarder.client.Do(req)
	if err != nil {
		s.forwarder.mark(base, false)
		return err
	}
	defer resp.Body.Close()
	s.forwarder.mark(base, true)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s", method, base+uri, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, wholeAnswer)).Decode(out)
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

// home is the URL of orgID's home when it is a live peer; "" when it is
// here or has none (an organisation without a home has no workers).
func (f rentalFleet) home(orgID string) string {
	h, ok := f.s.cluster.Homes.Lookup(orgID)
	if !ok || h.ReplicaID == f.s.cluster.ReplicaID || !h.Alive {
		return ""
	}
	return h.AdvertiseURL
}

func (f rentalFleet) Workers(orgID string) []api.Worker {
	base := f.home(orgID)
	if base == "" {
		return f.s.fleet.Workers(orgID)
	}
	var out struct {
		Workers []api.Worker `json:"workers"`
	}
	if err := f.s.callPeer(context.Background(), "GET", base, "/api/v1/peers/workers?org_id="+url.QueryEscape(orgID), nil, &out); err != nil {
		f.s.log.Warn("cluster: the workers of an organisation homed on a peer", "org", orgID, "home", base, "err", err)
		return nil
	}
	return out.Workers
}

func (f rentalFleet) Disconnect(orgID, workerID, reason string) {
	base := f.home(orgID)
	if base == "" {
		f.s.fleet.Disconnect(orgID, workerID, reason)
		return
	}
	if err := f.s.callPeer(context.Background(), "POST", base, "/api/v1/peers/disconnect",
		peerDisconnect{OrgID: orgID, WorkerID: workerID, Reason: reason}, nil); err != nil {
		f.s.log.Warn("cluster: disconnect a worker at its organisation's home", "org", orgID, "worker_id", workerID, "home", base, "err", err)
	}
}
