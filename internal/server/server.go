// Package server is svc's fasthttp application: listeners, the route table,
// authentication, error bodies and handlers. It wires the domain packages
// together and holds no business rules of its own.
package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/internal/account"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/ratelimit"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/rental"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/transcription"
	"github.com/svc-dev/svc/internal/usage"
)

const (
	// maxBodySize admits a 25 MB audio upload with its multipart framing.
	maxBodySize = 32 << 20
	headerLimit = 16 << 10
	// anonymousBodyLimit bounds what a caller without a valid key can make
	// the gateway read (and drop) before its 401: a larger body is refused
	// from the headers, with the connection closed.
	anonymousBodyLimit = 1 << 20
)

// Server serves the public API on TCP and the console API on the admin socket.
type Server struct {
	log       *slog.Logger
	build     buildinfo.Info
	accounts  *account.Service
	fleet     *fleet.Fleet
	events    store.Events
	keepalive link.Keepalive
	links     link.Buffers // the worker links' websocket buffers
	// overCapN counts the connections refused at the cap, and badTokenN
	// the worker links refused for their token; each is logged at most
	// once a minute, as a flood of them would flood the log.
	overCapN, badTokenN     atomic.Int64
	overCapLog, badTokenLog logPace
	metrics                 *metrics
	watch                   *clientWatch
	// lives are the live transcriptions on hijacked connections.
	lives liveSessions
	// splices are the worker links carried through to other replicas.
	splices splices
	// forwards are the requests forwarded to other replicas under way.
	forwards forwardSet
	usage    store.Usage
	writes   writeBacklog // nil: not told
	power    *PowerBook
	rentals  *rental.Manager
	cluster  *Cluster // nil on a single host
	inflight *usage.Tracker
	// peers are a cluster replica's links to the replicas it forwards to,
	// and peerAccept holds the links of those forwarding to it; nil on a
	// single host.
	peers      *peer.Pool
	peerAccept *peer.Acceptor
	relay      *relay.Relay
	spoolDir   string
	// rates holds each organisation to its inference requests a minute,
	// counted where its requests are served.
	rates *ratelimit.Limits

	public  *listener
	console *listener
	// gate bounds the public listener's connections; nil for no bound.
	gate *connGate
	// stall is how long a client may leave a response unread before it
	// is cut off.
	stall time.Duration
	// liveIdle is how long a live transcription waits for the client's
	// next frame.
	liveIdle time.Duration
	// bodies bounds the memory of the request bodies read whole.
	bodies *bodyBudget
	// draining is set when Shutdown begins: every public answer from then
	// on closes its connection.
	draining atomic.Bool
	// quiet is how long a connection must have been idle before the drain
	// closes it (quietIdle).
	quiet time.Duration
	// metricsToken is the bearer token GET /metrics asks for; nil for none.
	metricsToken []byte
}

// listener is one fasthttp server and the connections it has open, so that
// a drain that runs out of time can close them.
type listener struct {
	srv      *fasthttp.Server
	mux      *mux
	inflight atomic.Int64
	gate     *connGate // nil: unbounded

	mu sync.Mutex
	// conns holds the open connections, each with the time it went idle
	// between two requests, or zero while it is new or busy; a gatedConn
	// keeps that time itself (see idleSince).
	conns map[net.Conn]time.Time
	// ln is what Serve accepts from; stopped once it has been closed.
	ln      net.Listener
	stopped bool
}

// Deps are what the server is built from.
type Deps struct {
	Logger   *slog.Logger
	Build    buildinfo.Info
	Accounts *account.Service
	Fleet    *fleet.Fleet
	Events   store.Events
	Usage    store.Usage
	// Writes is the store's writer, whose backlog refuses inference at its
	// bound and is shown in /healthz and the metrics.
	Writes  writeBacklog
	Power   *PowerBook
	Rentals *rental.Manager
	// Cluster is set on a replica of a cluster; nil on a single host.
	Cluster   *Cluster
	Keepalive link.Keepalive
	Timing    relay.Timing
	// MaxConns bounds the public listener's connections; 0 is fasthttp's
	// default.
	MaxConns int
	// SpoolDir holds uploads while they are relayed; "" is os.TempDir.
	SpoolDir string
	// ClockSteps counts the steps of the system clock seen; nil exports
	// no count.
	ClockSteps func() uint64
	// StallTimeout is how long a client may take no byte of its response
	// before it is cut off and its request ends as a 499; 0 is
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// LiveIdle is how long a live transcription waits for the client's
	// next frame; 0 is transcription.LiveIdle, the documented minute.
	LiveIdle time.Duration
	// BodyMemory bounds what the large request bodies read whole hold
	// together; 0 is defaultBodyMemory.
	BodyMemory int64
	// MetricsToken, when set, is the bearer token GET /metrics asks for;
	// "" serves the metrics to whoever reaches the address.
	MetricsToken string
	// Tracer makes each inference request's span; nil traces nothing.
	Tracer trace.Tracer
}

// DefaultStallTimeout is how long a client may stop reading: far longer
// than a live client's pause (a stream's chunks and keep-alives are at most
// 15 s apart), short enough that idle sockets cannot hold a model's worker
// slots.
const DefaultStallTimeout = 30 * time.Second

// New builds the server and its route tables.
func New(d Deps) *Server {
	if d.Keepalive.Ping <= 0 {
		d.Keepalive = link.DefaultKeepalive()
	}
	s := &Server{log: d.Logger, build: d.Build, accounts: d.Accounts, fleet: d.Fleet, events: d.Events,
		usage: d.Usage, power: d.Power, cluster: d.Cluster, inflight: usage.NewTracker(),
		keepalive: d.Keepalive, metrics: newMetrics(d.Build), watch: newClientWatch(200 * time.Millisecond),
		spoolDir: d.SpoolDir, stall: d.StallTimeout, liveIdle: d.LiveIdle, quiet: quietIdle, rates: ratelimit.New(time.Now)}
	s.rentals = d.Rentals
	if d.MetricsToken != "" {
		s.metricsToken = []byte(d.MetricsToken)
	}
	if s.stall <= 0 {
		s.stall = DefaultStallTimeout
	}
	if s.liveIdle <= 0 {
		s.liveIdle = transcription.LiveIdle
	}
	s.bodies = &bodyBudget{max: cmp.Or(d.BodyMemory, defaultBodyMemory)}
	s.relay = relay.New(relay.Config{Fleet: d.Fleet, Usage: newCountedUsage(d.Usage, s.metrics), InFlight: s.inflight, Timing: d.Timing, Logger: d.Logger,
		Tracer: d.Tracer})
	s.metrics.reg.MustRegister(s.power.energy, newLiveWatts(d.Fleet), newConcurrencyLimits(d.Fleet))
	if d.ClockSteps != nil {
		s.metrics.reg.MustRegister(newClockSteps(d.ClockSteps))
	}
	if d.Cluster != nil {
		s.metrics.reg.MustRegister(newClusterMetrics(d.Cluster))
		if d.Cluster.Secret != "" {
			s.newPeers(d.Cluster.ReplicaID, d.Cluster.Secret)
		}
	}
	if d.Writes != nil {
		s.writes = d.Writes
		s.metrics.reg.MustRegister(newStoreMetrics(d.Writes))
	}
	s.metrics.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svc_request_body_bytes",
			Help: "Memory the request bodies read whole hold now, past the first 16 KiB of each: bodies arriving, and those of requests running."},
			func() float64 { return float64(s.bodies.used.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svc_request_body_limit_bytes",
			Help: "The bound on svc_request_body_bytes (--body-memory-mb), past which a request whose body needs more is refused with 503."},
			func() float64 { return float64(s.bodies.max) }))
	routes := s.routes()
	var consoleRoutes []*route
	for _, r := range routes {
		if r.access == accessConsole || r.path == "/healthz" {
			consoleRoutes = append(consoleRoutes, r)
		}
	}
	if d.MaxConns > 0 {
		s.gate = newConnGate(d.MaxConns, idleTimeout)
	}
	s.public = s.newListener(newMux(routes), false)
	s.console = s.newListener(newMux(consoleRoutes), true)
	return s
}

// idleTimeout is how long a keep-alive connection may wait for its next
// request while the listener has room.
const idleTimeout = 2 * time.Minute

// headerTimeout is how long a client has to send a request's head: from
// its connection's acceptance to the first byte, and from the first byte
// of each request to the head's end. A connection that sends nothing, or
// a head a byte at a time, holds a place under --max-connections
// meanwhile. The body then goes at its own pace (see bodyIdle).
const headerTimeout = 20 * time.Second

// quietIdle is how long the drain lets a keep-alive connection idle
// before it closes it. A client in the middle of a run of requests sends
// its next one well within it, and that request is answered (closing the
// connection) rather than crossing the close, which would fail it with
// no answer. A connection idle for longer is not in such a run.
const quietIdle = 500 * time.Millisecond

func (s *Server) newListener(m *mux, console bool) *listener {
	l := &listener{mux: m, conns: map[net.Conn]time.Time{}}
	if !console {
		l.gate = s.gate
	}
	l.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if gc, ok := ctx.Conn().(*gatedConn); ok {
				gc.serving()
			}
			l.inflight.Add(1)
			defer l.inflight.Add(-1)
			s.dispatch(ctx, m, console)
			if console && !ctx.IsGet() && !ctx.IsHead() {
				// What changed the accounts, the settings or the credit,
				// for the record. The path names the object; one that
				// names a key by its whole secret (a revocation of a
				// leaked key) is logged with the secret masked.
				s.log.Info("console", "method", string(ctx.Method()), "path", auth.Redact(string(ctx.Path())), "status", ctx.Response.StatusCode())
			}
		},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) { s.parseError(ctx, m, console, err) },
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			return s.headerReceived(h, m, console)
		},
		ExpectHandler: func(ctx *fasthttp.RequestCtx) int { return s.expectContinue(ctx, m, console) },
		// Uploads are read by their handlers as streams; fasthttp would
		// otherwise parse every multipart body, spilling files to disk.
		DisablePreParseMultipartForm: true,
		// A body is read by dispatch or its handler as it arrives (see
		// body.go), so an upload costs a buffer, not its size. The price is
		// that fasthttp keeps a connection's read buffer between requests.
		StreamRequestBody:  true,
		Name:               "svc",
		ReadTimeout:        headerTimeout,
		IdleTimeout:        idleTimeout,
		MaxRequestBodySize: maxBodySize,
		ReadBufferSize:     headerLimit,
		// A connection's 16 KB read buffer goes back to the pool once the
		// request is read, and its write buffer once the answer is out:
		// a gateway holding thousands of long streams or idle keep-alive
		// connections would otherwise keep 20 KB per connection.
		ReduceMemoryUsage:    true,
		NoDefaultContentType: true,
		CloseOnShutdown:      true,
		// fasthttp's parse errors quote the request they failed on:
		// its key, cookies and prompt. They are logged, and must not.
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{s.log},
		ConnState:             l.track,
	}
	return l
}

func (l *listener) track(c net.Conn, st fasthttp.ConnState) {
	if gc, ok := c.(*gatedConn); ok {
		switch st {
		case fasthttp.StateActive:
			gc.idle.Store(0)
			return
		case fasthttp.StateIdle:
			// Waiting for the next request's head from now: one time
			// read serves both, and a request's first byte reads none.
			now := time.Now().UnixNano()
			gc.idle.Store(now)
			gc.waiting.Store(now)
			return
		}
	}
	if l.gate != nil {
		l.gate.state(c, st)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case fasthttp.StateNew, fasthttp.StateActive:
		l.conns[c] = time.Time{}
	case fasthttp.StateIdle:
		l.conns[c] = time.Now()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(l.conns, c)
	}
}

// serving records ln as the listener Serve accepts from; false when the
// listener was stopped before it began.
func (l *listener) serving(ln net.Listener) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ln = ln
	return !l.stopped
}

// stopAccepting closes the listener: no connection is accepted after it,
// while those open are still served.
func (l *listener) stopAccepting() {
	l.mu.Lock()
	ln := l.ln
	l.stopped = true
	l.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

// drainConns closes each connection once it has idled for quiet and
// returns when none is left, or when ctx ends. Busy ones close after
// their answer, which says so (see dispatch). fasthttp's own drain would
// close an idle connection at once, and so cut off the next request of a
// client between two requests; one idle for quiet is not in such a run.
func (l *listener) drainConns(ctx context.Context, quiet time.Duration) {
	t := time.NewTicker(min(quiet/5, 100*time.Millisecond))
	defer t.Stop()
	for {
		l.mu.Lock()
		open := len(l.conns)
		now := time.Now()
		for c, since := range l.conns {
			if since = idleSince(c, since); !since.IsZero() && now.Sub(since) >= quiet {
				_ = c.Close()
			}
		}
		l.mu.Unlock()
		if open == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// shutdown drains, then closes whatever is left when ctx ends and waits up
// to grace for handlers still running.
func (l *listener) shutdown(ctx context.Context, grace time.Duration) error {
	err := l.srv.ShutdownWithContext(ctx)
	if err == nil {
		return nil
	}
	l.mu.Lock()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	deadline := time.Now().Add(grace)
	for l.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// ServePublic serves the public API on ln until Shutdown.
func (s *Server) ServePublic(ln net.Listener) error {
	ln = &onceListener{Listener: ln}
	if !s.public.serving(ln) {
		return nil
	}
	gl := gatedListener{Listener: ln, g: s.gate, stall: s.stall, stalled: s.stalled, overCap: s.overCap}
	if s.gate == nil {
		return s.public.srv.Serve(gl)
	}
	gl.refused = newRefusals(errOverCapacity)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.gate.reap(stop) })
	defer func() {
		close(stop)
		wg.Wait()
		gl.refused.wait()
	}()
	return s.public.srv.Serve(gl)
}

// stalled counts a client cut off for not reading its response.
func (s *Server) stalled(c net.Conn) {
	s.metrics.stalls.Inc()
	s.log.Debug("client stopped reading; connection cut off", "remote", c.RemoteAddr().String(), "stall_timeout", s.stall.String())
}

// overCap counts a connection refused at the cap, and says so in the log
// at most once a minute: a gateway at its cap refuses thousands.
func (s *Server) overCap() {
	s.metrics.overCap.Inc()
	if n := s.overCapN.Add(1); s.overCapLog.due(time.Now()) {
		s.log.Warn("connections refused: the gateway holds --max-connections already; raise it if the host has room",
			"max_connections", s.gate.max, "refused_since_start", n)
	}
}

// logPace lets a line that may come thousands of times a second go to the
// log at most once a minute.
type logPace struct{ last atomic.Int64 } // Unix nanoseconds

// due reports whether a line may be logged at now, and if so counts it.
func (p *logPace) due(now time.Time) bool {
	last, t := p.last.Load(), now.UnixNano()
	return t-last >= int64(time.Minute) && p.last.CompareAndSwap(last, t)
}

// ServeConsole serves the console API on ln (the admin socket) until Shutdown.
func (s *Server) ServeConsole(ln net.Listener) error { return s.console.srv.Serve(ln) }

// ErrDrainTimeout is returned by Shutdown when requests were still running
// at the deadline and their connections were closed.
var ErrDrainTimeout = errors.New("drain timed out; open connections were closed")

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends; then it closes the remaining connections. Every public
// answer from the start of the drain closes its connection, and idle
// keep-alive connections are closed once they have been idle for a
// moment (quietIdle), so that a client's next request on one is answered
// rather than cut off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.public.stopAccepting()
	s.public.mu.Lock()
	open := len(s.public.conns)
	s.public.mu.Unlock()
	s.log.Info("stopped accepting connections; draining", "connections", open)
	s.public.drainConns(ctx, s.quiet)
	if ctx.Err() != nil {
		// Out of time: the requests still running end now, each answering
		// its client 503 (a stream with its error event) and writing its
		// row, and a connection is closed once its answer is out, or
		// after a second at most.
		if n := s.relay.Abort() + s.forwards.abort(); n > 0 {
			s.log.Warn("drain timed out; ending the requests still running", "requests", n)
			answered, cancel := context.WithTimeout(context.Background(), time.Second)
			s.public.drainConns(answered, 10*time.Millisecond)
			cancel()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, l := range []*listener{s.public, s.console} {
		wg.Go(func() { errs[i] = l.shutdown(ctx, 5*time.Second) })
	}
	wg.Wait()
	s.lives.close()
	s.splices.close()
	s.watch.close()
	if s.peerAccept != nil {
		// The forwarded requests have ended with the drain; the fronts'
		// links go with this replica.
		s.peerAccept.Close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %v", ErrDrainTimeout, err)
	}
	return nil
}

// Close ends what outlives the drain: the links to the peer replicas.
func (s *Server) Close() {
	if s.peers != nil {
		s.peers.Close()
	}
}

// call is one request as a handler sees it. It lives only as long as the
// handler: nothing in it may be kept after the handler returns.
type call struct {
	ctx       *fasthttp.RequestCtx
	route     *route
	principal auth.Principal
	// org is the principal's organisation as authorize found it; the zero
	// value when it no longer exists.
	org api.Organization
	// workerOrg is the organisation of a worker token, on the worker link.
	workerOrg string
	// workerToken is the id of that token.
	workerToken string
	params      params
	requestID   string
	// forwarded: a peer replica forwarded the request here, and it is
	// served here or refused, never forwarded again.
	forwarded bool
	// model is the model an inference request named, once its handler
	// read it; bodyRead says its body is in memory, and bodyHeld what of
	// it the server's body budget gave (readBody).
	model    string
	bodyRead bool
	bodyHeld int64
	// rowed: the request has its usage row (the relay wrote it, or the
	// peer it was forwarded to does), or is to have none (refused because
	// the store takes no rows).
	rowed bool
}

// dispatch is the one path every request takes: request id, route, auth,
// handler, error body, metrics.
func (s *Server) dispatch(ctx *fasthttp.RequestCtx, m *mux, console bool) {
	start := time.Now()
	c := call{ctx: ctx}
	c.requestID, c.forwarded = forwardedID(ctx)
	if c.requestID == "" {
		c.requestID = uuid.NewString()
	}
	ctx.Response.Header.Set("X-Request-Id", c.requestID)
	method, path := string(ctx.Method()), string(ctx.Path())
	r, allow := m.match(method, path, &c.params)
	if r == nil && method == fasthttp.MethodHead {
		// HEAD is GET without the body, which fasthttp leaves out itself.
		r, allow = m.match(fasthttp.MethodGet, path, &c.params)
	}
	label := "unmatched"
	var err error
	// peer is the replica the request was forwarded to, which answers
	// for it, usage row and all.
	var peer target
	// drain is how much of a body left unread may be read and dropped to
	// keep the connection: a route's limit once its caller is authorized.
	drain := 0
	defer s.releaseBody(ctx, &c)
	ambiguous, closing := readFraming(ctx.Request.Header.RawHeaders())
	if closing {
		ctx.SetConnectionClose()
	}
	switch {
	case ambiguous != "":
		ctx.SetConnectionClose()
		err = api.BadRequest("Malformed HTTP request: %s", ambiguous)
	case !httpOne(ctx.Request.Header.Protocol()):
		// fasthttp reads any HTTP/x.y request line as HTTP/1.0: another
		// major version is another protocol, answered and closed, after
		// what the client still sends, as for a body over its limit.
		closeUnread(ctx)
		err = errHTTPVersion
	case console && pathTricks(ctx.Request.Header.RequestURI()):
		// fasthttp decodes and resolves the path it routes on: a name
		// holding an encoded '/', or a '..', would name another object
		// than the one the operator meant, in another organisation.
		err = api.BadRequest("Malformed path: a name or id in a console path may not hold '/' or '\\', nor be '.' or '..'")
	case unread(ctx):
		// The body was left on the connection, which cannot be used again.
		closeUnread(ctx)
		if r != nil && (r.access == accessKey || r.access == accessConsole) {
			// A caller the route refuses (its key, its permissions, its
			// organisation's require_e2e) is told that before it is told
			// to shrink a body it could never send; either way an
			// inference request has its row like any other refusal, in
			// the organisation its key names.
			label, c.route = r.path, r
			if err = s.authorize(&c, console); err == nil {
				err = overLimit(ctx, m)
			}
		} else {
			err = s.tooLarge(ctx, m, console)
		}
	case r != nil:
		label = r.path
		c.route = r
		if r.anthropic || r.requestIDHeader {
			// Anthropic's SDKs read the request id from its own header
			// (a message's _request_id, an error's requestID).
			ctx.Response.Header.Set("Request-Id", c.requestID)
		}
		// In a cluster, an API request another replica serves is
		// forwarded there: an upload as it arrives, any other body read
		// whole first, as here.
		if err = s.authorize(&c, console); err == nil && r.access == accessKey {
			peer, err = s.serveAt(&c)
		}
		if err == nil && r.kind != "" && peer.url == "" {
			// An inference request counts against its organisation's rate
			// where it is served, so one forwarded to the home replica is
			// counted once, there; and before its body is read, so that a
			// refusal costs no parse.
			if err = s.rates.Allow(c.principal.OrgID, c.org.RequestsPerMinute()); err != nil {
				s.metrics.rateLimited.Inc()
			}
		}
		if err == nil {
			drain = m.limitFor(ctx.Request.Header.RequestURI())
			if !r.streamed {
				if err = readBody(ctx, drain, s.bodies, &c.bodyHeld); errors.Is(err, errOverLimit) {
					err = s.tooLarge(ctx, m, console)
				}
				if err == nil {
					if err = decodeBody(ctx, drain, s.bodies, &c.bodyHeld); errors.Is(err, errOverLimit) {
						err = overLimit(ctx, m)
					}
				}
				c.bodyRead = err == nil
				if err == nil && !utf8.Valid(ctx.PostBody()) {
					// Every body read whole is JSON, which is UTF-8 text
					// (RFC 8259); one that is not would reach an engine
					// with its bytes replaced or be refused there.
					err = errNotUTF8
				}
			} else if codedUpload(ctx) {
				err = errCodedUpload
			}
			switch {
			case err != nil:
			case peer.url != "":
				err = s.forwardOrServe(&c, peer)
			default:
				err = r.handle(&c)
			}
		}
	case len(allow) > 0:
		label = m.pattern(path)
		ctx.Response.Header.Set("Allow", strings.Join(allow, ", "))
		err = methodNotAllowed(method, path, allow)
	default:
		err = s.notFound(m, method, path, console)
	}
	if drain == 0 && ctx.RequestBodyStream() != nil {
		drain = anonymousBodyLimit
		if console || s.keyError(&ctx.Request.Header) == nil {
			drain = m.limitFor(ctx.Request.Header.RequestURI())
		}
	}
	// A body over its limit is refused as such whatever else is wrong
	// with the request, as when every body was read before its route.
	if finishBody(ctx, drain) && err != nil {
		err = s.tooLarge(ctx, m, console)
	}
	if err != nil {
		s.recordRefusal(&c, err)
		s.writeError(&c, err)
	}
	if !console && s.draining.Load() && !ctx.Hijacked() {
		ctx.SetConnectionClose()
	}
	s.metrics.observe(label, method, ctx.Response.StatusCode(), time.Since(start))
}

// releaseBody gives back what c's body took of the body budget. A relayed
// stream is written once dispatch returns, and the request, its body too,
// lives until it is done: its body's share is given back then.
func (s *Server) releaseBody(ctx *fasthttp.RequestCtx, c *call) {
	if c.bodyHeld == 0 {
		return
	}
	held := c.bodyHeld
	if rb, ok := ctx.Response.BodyStream().(*relayBody); ok {
		rb.closed = func() { s.bodies.give(held) }
		return
	}
	s.bodies.give(held)
}

// errNotUTF8 answers a JSON body that is not UTF-8 text.
var errNotUTF8 = api.BadRequest("Malformed JSON: the body is not UTF-8 text")

// readFraming reads what fasthttp does not of a request's head. ambiguous
// says why its framing cannot be trusted, "" when it can: a request that
// declares both Content-Length and Transfer-Encoding. fasthttp reads its
// body as chunked and would keep the connection open, but a proxy in
// front that went by Content-Length sees the rest of the chunked body as
// the next request: request smuggling.
// RFC 9112 section 6.3 lets a server refuse it and requires the connection
// closed either way; fasthttp keeps no other trace of the Content-Length
// once Transfer-Encoding wins, so the raw header lines are read.
//
// A Transfer-Encoding other than chunked is refused too: fasthttp takes
// identity for none and reads the body it announces as the next request,
// which a proxy that went by the header would not.
//
// closing reports a Connection header naming close in any case, as RFC
// 9110 has its options: fasthttp knows only "close".
func readFraming(raw []byte) (ambiguous string, closing bool) {
	var length, encoding bool
	for line := range bytes.Lines(raw) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		switch {
		case bytes.EqualFold(name, []byte(fasthttp.HeaderContentLength)):
			length = true
		case bytes.EqualFold(name, []byte(fasthttp.HeaderTransferEncoding)):
			if !bytes.EqualFold(bytes.TrimSpace(value), []byte("chunked")) {
				return "a Transfer-Encoding other than chunked", closing
			}
			encoding = true
		case bytes.EqualFold(name, []byte(fasthttp.HeaderConnection)):
			for opt := range bytes.SplitSeq(value, []byte(",")) {
				closing = closing || bytes.EqualFold(bytes.TrimSpace(opt), []byte("close"))
			}
		}
	}
	if length && encoding {
		return "Content-Length and Transfer-Encoding together", closing
	}
	return "", closing
}

// httpOne reports whether a request line's protocol is HTTP/1.x.
func httpOne(protocol []byte) bool {
	v, ok := bytes.CutPrefix(protocol, []byte("HTTP/"))
	return !ok || bytes.HasPrefix(v, []byte("1.")) && len(v) > 2
}

var errHTTPVersion = &api.Error{Kind: api.KindHTTPVersion,
	Message: "HTTP version not supported: the gateway speaks HTTP/1.1"}

// apiKey reads the key from Authorization: Bearer or x-api-key.
func apiKey(ctx *fasthttp.RequestCtx) string { return keyOf(&ctx.Request.Header) }

// keyError is why the request's API key does not authenticate, or nil
// when it does; what the key may do is decided later, by its route.
func (s *Server) keyError(h *fasthttp.RequestHeader) error {
	key := keyOf(h)
	if key == "" {
		return errNoKey
	}
	_, err := s.accounts.Authenticate(key)
	return err
}

// keyOf is the request's API key: a bearer token, else x-api-key, else a
// WebSocket's key. An Authorization header of another scheme (Basic, put
// there by a proxy or a client library) is not a key and hides none.
func keyOf(hdr *fasthttp.RequestHeader) string {
	if h := hdr.Peek(fasthttp.HeaderAuthorization); len(h) > 0 {
		// The scheme's name in any case, then blanks: a space, as RFC
		// 9110 has it, or a tab, which some clients send.
		const bearer = "bearer"
		if len(h) > len(bearer) && bytes.EqualFold(h[:len(bearer)], []byte(bearer)) && (h[len(bearer)] == ' ' || h[len(bearer)] == '\t') {
			if k := bytes.TrimSpace(h[len(bearer):]); len(k) > 0 {
				return string(k)
			}
		}
	}
	if k := bytes.TrimSpace(hdr.Peek("X-Api-Key")); len(k) > 0 {
		return string(k)
	}
	return websocketKey(hdr)
}

// websocketKey is a key offered as the WebSocket subprotocol
// svc-key.<KEY>: a browser's WebSocket cannot set headers. Only a
// WebSocket handshake offers subprotocols, so only one is read for it.
func websocketKey(hdr *fasthttp.RequestHeader) string {
	if !bytes.EqualFold(bytes.TrimSpace(hdr.Peek("Upgrade")), []byte("websocket")) {
		return ""
	}
	const prefix = "svc-key."
	for _, p := range bytes.Split(hdr.Peek("Sec-WebSocket-Protocol"), []byte(",")) {
		if p = bytes.TrimSpace(p); bytes.HasPrefix(p, []byte(prefix)) {
			return string(p[len(prefix):])
		}
	}
	return ""
}

type fasthttpLogger struct{ log *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.log.Debug("fasthttp", "detail", redactRequest(fmt.Sprintf(format, args...)))
}

// redactRequest keeps fasthttp's account of what went wrong and drops the
// request bytes some of its messages quote (", contents: ..."), which hold
// keys, tokens and prompts; a credential quoted any other way is masked.
func redactRequest(msg string) string {
	if i := strings.Index(msg, "contents: "); i >= 0 {
		msg = msg[:i] + "contents: (not logged)"
	}
	return auth.Redact(msg)
}

// onceListener closes its listener once: the drain stops accepting before
// fasthttp's Shutdown closes the listeners it serves, which would take a
// second close's error for a failed drain.
type onceListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// pathTricks reports a request target whose path, as sent, has an encoded
// '/' or '\\', or a '.' or '..' segment, plain or encoded: none is in a
// path the console's clients make, whose names hold neither.
func pathTricks(uri []byte) bool {
	path, _, _ := bytes.Cut(uri, []byte("?"))
	lower := bytes.ToLower(path)
	if bytes.Contains(lower, []byte("%2f")) || bytes.Contains(lower, []byte("%5c")) || bytes.Contains(lower, []byte("%2e")) {
		return true
	}
	for seg := range bytes.SplitSeq(path, []byte("/")) {
		if string(seg) == "." || string(seg) == ".." {
			return true
		}
	}
	return false
}
