package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/relay"
)

// A cluster's replicas forward requests to each other over replica links
// (internal/peer): the front dials the home's public port, at peer.Path,
// upgrades to a websocket, and both prove they hold the cluster's secret
// before the link carries anything. Each forwarded request is one stream;
// the home serves it with its public listener's fasthttp server, on a
// connection (peerConn) whose bytes come and go on the stream, so that
// everything a request meets at its home (usage rows, errors, 429s, SSE,
// a client's departure ending it as a 499) is exactly what a client
// connected there would meet.

// newPeers makes the replica's two ends of its links: the pool it
// forwards through and the acceptor its peers' links land in.
func (s *Server) newPeers(me, secret string) {
	s.peerAccept = peer.NewAcceptor(peer.AcceptorOptions{Me: me, Secret: []byte(secret), Serve: s.servePeerStream,
		Logger: s.log, Buffers: &s.links})
	s.peers = peer.NewPool(peer.PoolOptions{Me: me, Secret: []byte(secret), Dial: s.dialPeer, Logger: s.log, Buffers: &s.links})
}

// connectPeer upgrades a peer replica's request to its link. The peer
// proves itself in the link's handshake, not in the request.
func (s *Server) connectPeer(c *call) error {
	acc, ka := s.peerAccept, s.keepalive
	up := websocket.FastHTTPUpgrader{
		ReadBufferSize:  1 << 10,
		WriteBufferSize: 4 << 10,
		WriteBufferPool: s.links.WritePool(),
		CheckOrigin:     func(*fasthttp.RequestCtx) bool { return true },
	}
	err := up.Upgrade(c.ctx, func(ws *websocket.Conn) {
		if err := acc.Serve(s.links.WebSocket(ws, ka)); err != nil {
			s.log.Warn("cluster: a peer replica's link", "err", err)
		}
	})
	if err != nil {
		return api.BadRequest("Peer link upgrade failed: %v", err)
	}
	return nil
}

// dialPeer opens a websocket to the peer at base.
func (s *Server) dialPeer(ctx context.Context, base string) (link.Conn, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Host == "" {
		return nil, errors.New("peer URL is not http(s)://host:port")
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path += peer.Path
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10,
		WriteBufferPool: s.links.WritePool(), Proxy: nil}
	h := http.Header{}
	h.Set("User-Agent", "svc-replica/"+s.build.Version)
	ws, resp, err := d.DialContext(ctx, u.String(), h)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return s.links.WebSocket(ws, s.keepalive), nil
}

// servePeerStream serves one request a peer forwarded, on the public
// listener's server.
func (s *Server) servePeerStream(ctx context.Context, st *link.Stream) {
	hdr, body, err := st.OpenRequest(ctx)
	if err != nil {
		st.Reset()
		return
	}
	id, addr, err := peer.ParseRequest(hdr)
	if err != nil {
		s.log.Warn("cluster: a peer replica's stream", "err", err)
		st.Reset()
		return
	}
	conn := &peerConn{st: st, body: body, id: id}
	if len(addr) > 0 {
		conn.addr, conn.remote = addr, nil
	}
	if err := s.public.srv.ServeConn(conn); err != nil {
		s.log.Debug("cluster: a forwarded request's connection", "err", err)
	}
}

// peerConn is a forwarded request's stream as the connection fasthttp
// serves it on: the request's bytes are the stream's OPEN message, the
// answer's are its DATA frames, and closing it ends the stream.
type peerConn struct {
	st   *link.Stream
	body *link.Body
	id   string // the request id the front gave the request
	// addr is the client's address as the front sent it, read into
	// remote when asked for: most requests never ask.
	addr   []byte
	remote net.Addr
	closed atomic.Bool
}

func (c *peerConn) Read(p []byte) (int, error) { return c.body.Read(p) }

// Write sends p as it is: fasthttp writes each flush of a stream's
// chunks in one call, so an SSE event crosses as it is produced. It
// blocks while the front has a window unread, which is how a slow client
// holds back its own answer at the home.
func (c *peerConn) Write(p []byte) (int, error) {
	if err := c.st.Send(context.Background(), p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the stream: the answer is complete.
func (c *peerConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if err := c.st.End(context.Background(), nil); err != nil && !errors.Is(err, link.ErrReset) && !errors.Is(err, link.ErrClosed) {
		return err
	}
	return nil
}

// departed is why a forwarded request's client is no longer there: nil
// when the front reset the stream, as it does when its client leaves.
// A front whose drain ran out of time says so in its reset, and answered
// its client that it shut down; one that lost its link to this replica for
// good (it gave this replica up, frozen past the link's timers, or it
// died) answered its client 503 itself. Neither client left.
func (c *peerConn) departed() error {
	err := c.st.Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, link.ErrPeerStopping):
		return relay.ErrShuttingDown
	case errors.Is(err, link.ErrReset):
		return nil
	}
	return errFrontLost
}

// errFrontLost is the failure recorded for a forwarded request whose link
// to its front was lost.
var errFrontLost error = &api.Error{Kind: api.KindUnavailable, Code: api.CodeWorkerLost, RetryAfter: time.Second,
	Message: "The gateway replica the request came through lost its link to this one before the answer was complete"}

func (c *peerConn) LocalAddr() net.Addr { return peerAddr{} }

// RemoteAddr is the forwarded client's address; a peer's own calls have
// none. fasthttp asks from the handler's goroutine only.
func (c *peerConn) RemoteAddr() net.Addr {
	if c.remote == nil {
		c.remote = peerAddr{}
		var ap netip.AddrPort
		if err := ap.UnmarshalText(c.addr); err == nil && ap.IsValid() {
			c.remote = net.TCPAddrFromAddrPort(ap)
		}
	}
	return c.remote
}

// The deadlines fasthttp sets bound a client's slowness; the front
// bounds its own client's, and a stream's failure ends reads and writes.
func (c *peerConn) SetDeadline(time.Time) error      { return nil }
func (c *peerConn) SetReadDeadline(time.Time) error  { return nil }
func (c *peerConn) SetWriteDeadline(time.Time) error { return nil }

// peerAddr is the address of a replica link's end.
type peerAddr struct{}

func (peerAddr) Network() string { return "svc-peer" }
func (peerAddr) String() string  { return "peer" }

// forwardedID is the request id a peer gave the request on ctx, forwarded
// over a replica link; "" for any other request.
func forwardedID(ctx *fasthttp.RequestCtx) (string, bool) {
	pc, ok := ctx.Conn().(*peerConn)
	if !ok {
		return "", false
	}
	return pc.id, true
}

// watchClient calls cancel once if the client of conn goes away, until
// stop is called: a socket's client as the kernel tells (clientWatch), a
// forwarded request's when its front resets the stream or the link to it
// is lost for good.
func (s *Server) watchClient(conn net.Conn, cancel func()) (stop func()) {
	if pc, ok := conn.(*peerConn); ok {
		unwatch := pc.st.AfterFail(cancel)
		return func() { unwatch() }
	}
	e := s.watch.add(conn, cancel)
	return func() { s.watch.remove(e) }
}
