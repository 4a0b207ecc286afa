package server

import (
	"github.com/fasthttp/websocket"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/peer"
)

// peer.Path, where the replica links begin, answers only a replica: its
// peer proves in the link that it holds the cluster's secret.

var errNotPeer = &api.Error{Kind: api.KindUnauthenticated, Code: "not_a_peer",
	Message: "This endpoint answers only the cluster's gateway replicas"}

func (s *Server) authorizePeer(c *call) error {
	// A link is not begun on a link.
	if c.route.path != peer.Path || s.peerAccept == nil || c.forwarded || !websocket.FastHTTPIsWebSocketUpgrade(c.ctx) {
		return errNotPeer
	}
	return nil
}
