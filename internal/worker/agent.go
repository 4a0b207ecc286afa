// Package worker is the agent that runs on each GPU box (`svc worker`): it
// dials out to the gateway, serves the models of its local engines over
// the link, and reports its health.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/moderation"
	"github.com/svc-dev/svc/internal/power"
	"github.com/svc-dev/svc/internal/sock"
	"github.com/svc-dev/svc/internal/web"
)

// Config is what the agent runs with.
type Config struct {
	Gateway       string // the gateway's base URL, http(s)://host:port
	Token         string
	Name          string
	MaxConcurrent int
	Version       string
	Engines       []engine.Engine
	// ModelMeta overrides what engines report about models, by model id.
	ModelMeta map[string]api.Model
	// Aliases offers engines' models under other ids: listed id -> the
	// engine's own name (speech-to-text served as stt-large-v3-turbo by a
	// local whisper build, say). A model with aliases is listed only under
	// them.
	Aliases map[string]string
	// Pull lists models to install at start on an engine that can.
	Pull []string
	// AlwaysOn lists the models, by the ids the worker offers them under,
	// to keep loaded: each is loaded as soon as an engine offers it (once
	// Pull installed it, say), and again whenever a listing shows it
	// dropped, on engines that load models on demand (engine.Keeper).
	AlwaysOn []string
	// DrainTimeout bounds how long running requests may take to finish
	// after a stop is asked for.
	DrainTimeout time.Duration
	// Hurry, once closed, ends the drain as its timeout would (a second
	// interrupt). Nil never hurries.
	Hurry <-chan struct{}
	// RefreshModels is how often engines are asked for their models; an
	// engine that did not answer, or a worker with no model, is asked
	// again sooner, after 1 s, 2 s, 4 s and so on up to it.
	RefreshModels time.Duration
	Keepalive     link.Keepalive
	Logger        *slog.Logger
	// EngineTTFB is how long an engine may produce nothing before it is
	// probed, and how long the probe may take (see watch); 0 is
	// DefaultEngineTTFB.
	EngineTTFB time.Duration
	// Dial replaces the websocket dial, for tests. url is the websocket
	// endpoint to dial: the configured gateway's, or a redirect's.
	Dial func(ctx context.Context, url string) (link.Conn, error)
	// Images fetches moderation checks' image URLs; nil is a Fetcher
	// with its defaults.
	Images *moderation.Fetcher
	// Features are the protocol features announced in the hello; nil is
	// every feature of this release. Fewer stand in for an older release.
	Features []string
	// live shapes live transcriptions; the zero value is
	// defaultLiveWindows. Tests shorten it.
	live liveWindows
	// Power configures the power readings sent to the gateway; nil sends
	// none. With SimulatedPower the readings are the simulator's made-up
	// profile, following the worker's load.
	Power          *power.Config
	SimulatedPower bool
	// E2E is the key pair private inference is sealed to; nil serves none.
	E2E *e2ee.KeyPair
	// Web runs web tools for the chat requests that take them (see
	// web.Offered); nil offers none. Private requests never get them: a
	// fetch would carry the sealed conversation out to the web.
	Web *web.Loop
	// Tracer makes a span for each request served and each engine call,
	// under the gateway's span; nil traces nothing.
	Tracer trace.Tracer
}

// PermanentError is a refusal that retrying cannot fix (a bad token, an
// incompatible gateway); the agent stops on it.
type PermanentError struct{ Reason string }

func (e *PermanentError) Error() string { return e.Reason }

// Agent is a running worker.
type Agent struct {
	cfg Config
	log *slog.Logger
	// beating is held while a heartbeat is made and sent.
	beating sync.Mutex

	mu           sync.Mutex
	models       []api.Model
	byModel      map[string]served
	engineModels map[engine.Engine][]api.Model // each engine's last answer
	sess         *link.Session
	// listed says whether every engine answered the last listing and the
	// worker lists a model: until then the listing is asked again sooner.
	listed bool
	// goAwayAcked is closed when the gateway acknowledges the current
	// session's GoAway: every stream it opened before is then known here.
	goAwayAcked chan struct{}
	draining    bool
	// sentAway is signalled when the gateway asks the worker to reconnect
	// elsewhere once its running requests are done (api.GoAway).
	sentAway chan struct{}
	// missingAliases are the aliases last warned about (refreshModels
	// only), so a refresh repeats no warning.
	missingAliases string
	// hiddenByAlias are the engine models last warned about as hidden by
	// an alias that takes their id.
	hiddenByAlias string

	slots   chan struct{}
	active  atomic.Int64
	waiting atomic.Int64

	// images fetches the https image URLs of moderation checks.
	images *moderation.Fetcher

	// replays are the sealed requests already served.
	replays replays

	// watches are the engines as requests use them, under the
	// time-to-first-byte limit; fixed at New.
	watches map[engine.Engine]*watch

	// power samples the machine's power draw; nil without telemetry.
	power *power.Sampler
	// powerWake is signalled when a power window closes.
	powerWake chan struct{}
	// keepWake is signalled when the models were listed, for keepLoop.
	keepWake chan struct{}
}

// New checks cfg and returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Gateway == "" {
		return nil, errors.New("no gateway URL: set --gateway or SVC_GATEWAY")
	}
	if _, err := connectURL(cfg.Gateway); err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, errors.New("no worker token: set --token, SVC_WORKER_TOKEN or --token-file")
	}
	if cfg.Name == "" {
		return nil, errors.New("worker name is empty")
	}
	if len(cfg.Engines) == 0 {
		return nil, errors.New("no engine: give at least one --engine")
	}
	if cfg.MaxConcurrent < 1 {
		cfg.MaxConcurrent = 1
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 5 * time.Minute
	}
	if cfg.RefreshModels <= 0 {
		cfg.RefreshModels = 30 * time.Second
	}
	if cfg.EngineTTFB <= 0 {
		cfg.EngineTTFB = DefaultEngineTTFB
	}
	if cfg.Keepalive.Ping <= 0 {
		cfg.Keepalive = link.DefaultKeepalive()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Features == nil {
		cfg.Features = []string{api.FeatureModeration, api.FeatureLiveTranscription}
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, byModel: map[string]served{}, slots: make(chan struct{}, cfg.MaxConcurrent),
		images: cfg.Images, sentAway: make(chan struct{}, 1), keepWake: make(chan struct{}, 1)}
	if a.images == nil {
		a.images = &moderation.Fetcher{}
	}
	a.watches = make(map[engine.Engine]*watch, len(cfg.Engines))
	for _, e := range cfg.Engines {
		a.watches[e] = newWatch(e, cfg.EngineTTFB, cfg.Logger, a.sendHeartbeat)
	}
	if cfg.Power != nil {
		pc := *cfg.Power
		if cfg.SimulatedPower {
			pc.Simulated = func() int { return int(a.active.Load()) }
		}
		a.powerWake = make(chan struct{}, 1)
		pc.OnWindow = func() { signalOne(a.powerWake) }
		if pc.Logger == nil {
			pc.Logger = cfg.Logger
		}
		var err error
		if a.power, err = power.New(pc); err != nil {
			return nil, fmt.Errorf("power readings: %w", err)
		}
	}
	if cfg.Dial == nil {
		a.cfg.Dial = a.dialWebSocket
	}
	return a, nil
}

// connectURL turns the gateway's base URL into its websocket endpoint.
func connectURL(gateway string) (string, error) {
	u, err := url.Parse(strings.TrimRight(gateway, "/"))
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("gateway URL %q is not http(s)://host:port", gateway)
	}
	switch u.Scheme {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("gateway URL %q is not http(s)://host:port", u.Redacted())
	}
	if u.User != nil {
		// The websocket dialer refuses such a URL on every try.
		return "", fmt.Errorf("gateway URL %q has a user name or password: the worker signs in with its token; leave them out", u.Redacted())
	}
	u.Path = strings.TrimSuffix(u.Path, "/api/v1") + link.Path
	return u.String(), nil
}

func (a *Agent) dialWebSocket(ctx context.Context, u string) (link.Conn, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10,
		NetDialContext: sock.Dial(&net.Dialer{})}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+a.cfg.Token)
	h.Set("User-Agent", "svc-worker/"+a.cfg.Version)
	ws, resp, err := d.DialContext(ctx, u, h)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			var body struct {
				Detail string `json:"detail"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			msg := fmt.Sprintf("gateway refused the worker link: %s %s", resp.Status, body.Detail)
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound {
				return nil, &PermanentError{Reason: msg}
			}
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
				return nil, &retryAfterError{msg: msg, after: time.Duration(secs) * time.Second}
			}
			return nil, errors.New(msg)
		}
		return nil, err
	}
	return link.WebSocket(ws, a.cfg.Keepalive), nil
}

// Run serves until ctx ends, then drains: it tells the gateway it takes
// nothing new, lets running requests finish for up to DrainTimeout, and
// returns. It returns early on a PermanentError.
func (a *Agent) Run(ctx context.Context) error {
	// The link outlives ctx by the drain, so it has its own context.
	linkCtx, stopLink := context.WithCancel(context.Background())
	defer stopLink()

	a.refreshModels(ctx)
	a.mu.Lock()
	a.sess = a.newSession()
	a.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	// Installs end with the worker's stop, before its drain, so that how
	// they ended reaches the gateway while the link is up.
	var pulls sync.WaitGroup
	defer pulls.Wait()
	pullCtx, stopPull := context.WithCancel(ctx)
	defer stopPull()
	wg.Go(func() { a.modelLoop(linkCtx) })
	pulls.Go(func() { a.pullModels(pullCtx) })
	pulls.Go(func() { a.keepLoop(pullCtx) })
	for _, w := range a.watches {
		wg.Go(func() { w.run(linkCtx) })
	}
	if a.power != nil {
		wg.Go(func() {
			if err := a.power.Run(linkCtx); err != nil && linkCtx.Err() == nil {
				a.log.Warn("power readings stopped", "err", err)
			}
		})
	}

	errc := make(chan error, 1)
	go func() { errc <- a.connectLoop(linkCtx) }()

	select {
	case err := <-errc:
		stopLink()
		a.closeSession(err)
		a.closeEngines()
		return err
	case <-ctx.Done():
	}
	pulls.Wait()
	a.drain(linkCtx)
	stopLink()
	<-errc
	a.closeSession(errors.New("the worker stopped"))
	a.closeEngines()
	return nil
}

// closeEngines stops what the engines run, once no request uses them.
func (a *Agent) closeEngines() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range a.cfg.Engines {
		if c, ok := e.(engine.Closer); ok {
			if err := c.Close(ctx); err != nil {
				a.log.Warn("engine did not stop cleanly", "engine", e.Kind(), "err", err)
			}
		}
	}
}

func (a *Agent) closeSession(err error) {
	a.mu.Lock()
	s := a.sess
	a.mu.Unlock()
	if s != nil {
		s.Close(err)
	}
}

// drain tells the gateway to send nothing new and waits for running
// requests (and their delivery) to finish.
func (a *Agent) drain(ctx context.Context) {
	a.mu.Lock()
	a.draining = true
	s, acked := a.sess, a.goAwayAcked
	a.mu.Unlock()
	sent := s.SendControl(link.TypeGoAway, nil)
	deadline := time.NewTimer(a.cfg.DrainTimeout)
	defer deadline.Stop()
	// A request the gateway sent before it read the GoAway may still be
	// on its way: the gateway's acknowledgement comes after it on the
	// link, so the running requests are counted once it is here. A
	// gateway that does not acknowledge is waited for briefly. A GoAway
	// that found the link down is never acknowledged, so it is not waited
	// for; a reconnect's hello says that the worker drains.
	if sent {
		select {
		case <-acked:
		case <-time.After(goAwayAckWait):
		case <-deadline.C:
			return
		case <-a.cfg.Hurry:
			return
		case <-ctx.Done():
			return
		}
	}
	a.log.Info("draining: finishing running requests", "running", s.Streams(), "timeout", a.cfg.DrainTimeout.String())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s.Streams() > 0 {
		select {
		case <-deadline.C:
			a.abandon(ctx, s, api.AbandonDrainTimeout, "drain timed out; abandoning running requests")
			return
		case <-a.cfg.Hurry:
			a.abandon(ctx, s, api.AbandonStopped, "stopping now; abandoning running requests")
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			if !a.isCurrent(s) {
				return
			}
		}
	}
}

// abandon gives up the running requests of a drain cut short, saying so
// to the gateway, which then ends them at once rather than wait for a
// reconnect that could not resume them.
func (a *Agent) abandon(ctx context.Context, s *link.Session, reason, why string) {
	a.log.Warn(why, "running", s.Streams())
	if b, err := json.Marshal(api.GoAway{Abandon: true, Reason: reason}); err == nil && s.SendControl(link.TypeGoAway, b) {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		s.Flush(fctx)
		cancel()
	}
}

func (a *Agent) isCurrent(s *link.Session) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sess == s
}

// goAwayAckWait bounds the wait for the gateway's acknowledgement of a
// GoAway, for gateways of releases that send none.
const goAwayAckWait = 2 * time.Second

// newSession starts a session with the gateway; a.mu is held.
func (a *Agent) newSession() *link.Session {
	acked := make(chan struct{})
	var once sync.Once
	a.goAwayAcked = acked
	return link.NewSession(link.Options{Role: link.Worker, Accept: a.serve, Control: func(f link.Frame) {
		if f.Type != link.TypeGoAway {
			return
		}
		var g api.GoAway
		if len(f.Payload) > 0 && json.Unmarshal(f.Payload, &g) == nil && g.Reconnect {
			a.log.Info("the gateway sends the worker away; reconnecting once the running requests are done", "reason", g.Reason)
			signalOne(a.sentAway)
			return
		}
		once.Do(func() { close(acked) })
	}})
}

// maxRedirects bounds the redirects followed in a row without a session
// in between, so that replicas that name each other cannot keep the
// worker bouncing between them.
const maxRedirects = 4

// spliceFor is how long a worker whose redirect did not answer asks the
// configured gateway to splice its link through to the replica it would
// have been sent to, before trying redirects again: networks that let a
// worker reach only the balancer do not change often.
const spliceFor = 10 * time.Minute

// connectLoop keeps the link up until ctx ends, reconnecting with
// jittered exponential backoff.
//
// A gateway may redirect the worker to another replica: it is dialled at
// once, and again after a drop for as long as it answers. When it does
// not, the worker goes back to the configured gateway (usually a load
// balancer), which knows where to go now: an advertised URL that stopped
// answering is never dialled again and again. The worker then asks the
// configured gateway to splice its link to the replica it would redirect
// to, for a while (spliceFor): where only the balancer is reachable, the
// link goes through it.
func (a *Agent) connectLoop(ctx context.Context) error {
	sessionID := uuid.NewString()
	backoff := newBackoff()
	target, redirects := a.cfg.Gateway, 0
	var spliceUntil time.Time
	var last lastLink
	for {
		splice := target == a.cfg.Gateway && time.Now().Before(spliceUntil)
		connected, redirect, err := a.connectOnce(ctx, sessionID, target, splice, last)
		redirected := target != a.cfg.Gateway
		var perm *PermanentError
		// Only the configured gateway's refusal stops the worker: a
		// replica's advertised URL that leads somewhere else (a wrong
		// path, another service) is a fault of that replica.
		if errors.As(err, &perm) && !redirected {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		// Backoff grows over failed attempts only: a link that was up and
		// dropped is retried at once, which is what lets a brief drop heal
		// within the gateway's grace period.
		if connected {
			backoff.reset()
			redirects = 0
			last = lastLink{droppedAt: time.Now(), sentAway: errors.Is(err, errSentAway)}
		}
		switch {
		case errors.Is(err, errSentAway):
			// Straight back to the configured gateway, which places the
			// worker where it is wanted now.
			a.log.Info("reconnecting through the configured gateway", "from", target, "gateway", a.cfg.Gateway)
			target, redirects = a.cfg.Gateway, 0
			continue
		case redirect != "":
			if err = a.checkRedirect(redirect); err != nil {
				a.log.Error("the gateway sent a redirect the worker does not follow", "from", target, "err", err)
			} else if redirects == maxRedirects {
				err = fmt.Errorf("redirected %d times in a row without a session; the last redirect, from %s to %s, is not followed", redirects+1, target, redirect)
			} else {
				redirects++
				a.log.Info("the gateway redirected the worker", "from", target, "to", redirect)
				target = redirect
				continue
			}
			target, redirects = a.cfg.Gateway, 0
		case redirected && !connected:
			a.log.Warn("the gateway redirected to does not answer; back to the configured gateway, asking it to splice the link through",
				"gateway", target, "configured", a.cfg.Gateway, "err", err)
			target, spliceUntil = a.cfg.Gateway, time.Now().Add(spliceFor)
			continue
		}
		wait := reconnectWait(backoff, last.droppedAt, time.Now(), err)
		a.log.Warn("gateway link down; reconnecting", "err", err, "retry_in", wait.Round(time.Millisecond).String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// checkRedirect says why the worker does not follow a redirect to base
// URL to, if it does not.
func (a *Agent) checkRedirect(to string) error {
	u, err := url.Parse(to)
	if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("redirect to %q is not http(s)://host:port", to)
	}
	// The token goes with the dial: a gateway configured with TLS must
	// not send it anywhere in clear.
	if g, _ := url.Parse(a.cfg.Gateway); u.Scheme == "http" && g != nil && (g.Scheme == "https" || g.Scheme == "wss") {
		return fmt.Errorf("redirect to %q drops TLS, with which the gateway %s is configured", to, a.cfg.Gateway)
	}
	return nil
}

// lastLink is how the worker's last connection to a gateway ended, which
// its next hello tells.
type lastLink struct {
	droppedAt time.Time // zero before the first
	// sentAway: it ended at the gateway's word (GoAway), and that
	// gateway recorded the end.
	sentAway bool
}

// connectOnce dials gateway, shakes hands and serves one connection until
// it ends. It reports whether the handshake let the worker in, or else
// where the gateway redirected it.
func (a *Agent) connectOnce(ctx context.Context, sessionID, gateway string, splice bool, last lastLink) (connected bool, redirect string, err error) {
	u, err := connectURL(gateway)
	if err != nil {
		return false, "", err
	}
	if splice {
		// A gateway that is the organisation's home ignores it.
		u += "?" + link.SpliceParam + "=1"
	}
	dialCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	conn, err := a.cfg.Dial(dialCtx, u)
	cancel()
	if err != nil {
		return false, "", err
	}
	hb := a.heartbeat()
	a.mu.Lock()
	sess := a.sess
	hello := api.Hello{
		Protocol: link.Protocol, Name: a.cfg.Name, Version: a.cfg.Version, MaxConcurrent: a.cfg.MaxConcurrent,
		SessionID: sessionID, Models: a.models, Streams: sess.RecvState(), Draining: a.draining,
		Heartbeat: hb, Engines: a.engineInfo(), Features: a.cfg.Features,
	}
	switch {
	case last.sentAway:
		hello.SentAway = true
	case !last.droppedAt.IsZero():
		// The gateway records the drop, if nobody could, at its time.
		hello.DownMS = max(1, time.Since(last.droppedAt).Milliseconds())
	}
	if a.cfg.E2E != nil {
		p := a.cfg.E2E.Public()
		hello.E2EKey = &api.E2EKey{KeyID: p.KeyID, Version: p.Version, KEMID: p.KEMID, KDFID: p.KDFID, AEADID: p.AEADID, PublicKey: p.PublicKey}
	}
	a.mu.Unlock()
	welcome, err := handshake(conn, hello)
	if err != nil {
		_ = conn.Close()
		return false, "", err
	}
	if welcome.Redirect != "" {
		// No session was opened: ours, and the streams it holds, are
		// presented to the gateway redirected to, which resumes it if it
		// knows it and otherwise starts a new one (below).
		_ = conn.Close()
		return false, welcome.Redirect, nil
	}
	if !welcome.Resumed && sess.Streams() > 0 {
		// The gateway does not know our session any more (it restarted, or
		// we were gone too long): what we were running is lost.
		sess.Close(errors.New("the gateway started a new session"))
		a.mu.Lock()
		a.sess = a.newSession()
		sess = a.sess
		a.mu.Unlock()
	}
	var peer []api.StreamSeq
	if welcome.Resumed {
		peer = welcome.Streams
	}
	done, err := sess.Attach(conn, peer)
	if err != nil {
		_ = conn.Close()
		return false, "", err
	}
	// Only a session this process already had can be resumed, so a resume
	// is never the first connection.
	if welcome.Resumed {
		a.log.Info("link resumed", "worker_id", welcome.WorkerID, "streams", len(welcome.Streams))
	} else {
		a.log.Info("connected to the gateway", "gateway", gateway, "worker_id", welcome.WorkerID, "name", a.cfg.Name, "models", len(hello.Models))
	}
	t := time.NewTicker(heartbeatEvery(welcome.HeartbeatS))
	defer t.Stop()
	// The gateway holds power windows through welcome.PowerThrough: what
	// came after, kept through a drop, goes now.
	sent := welcome.PowerThrough
	if a.power != nil {
		a.power.Forget(sent)
		sent = a.sendPower(sess, sent)
	}
	// away ticks while the worker, sent away, waits for its running
	// requests to end.
	var away <-chan time.Time
	for {
		select {
		case <-done:
			return true, "", errors.New("link closed")
		case <-ctx.Done():
			sess.Drop()
			// The link's loops are off the connection once done closes.
			<-done
			return true, "", nil
		case <-t.C:
			a.sendHeartbeat()
		case <-a.powerWake:
			sent = a.sendPower(sess, sent)
		case <-a.sentAway:
			if away == nil {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				away = tick.C
			}
		case <-away:
			if sess.Streams() > 0 {
				continue
			}
			sess.Drop()
			<-done
			return true, "", errSentAway
		}
	}
}

// Heartbeats go as often as the gateway's welcome asks, within bounds.
const (
	defaultHeartbeat = 5 * time.Second
	maxHeartbeat     = 5 * time.Minute
)

// heartbeatEvery is the heartbeat period for a welcome's heartbeat_s,
// whole seconds, so at least one. Taken as it came, a huge one overflowed
// into a ticker of nanoseconds that spun the worker; any past the bound
// is the gateway's mistake, and a report every five minutes still keeps
// it informed. None, or a negative one, is the gateway's default.
func heartbeatEvery(seconds int) time.Duration {
	switch {
	case seconds <= 0:
		return defaultHeartbeat
	case seconds > int(maxHeartbeat/time.Second):
		return maxHeartbeat
	}
	return time.Duration(seconds) * time.Second
}

// errSentAway ends a connection the gateway sent the worker away from.
var errSentAway = errors.New("the gateway sent the worker away")

// sendPower sends the power windows closed after sent and returns the end
// of the last one sent. A window goes again after a reconnect until the
// gateway's welcome says it holds it: control frames are not acknowledged.
func (a *Agent) sendPower(sess *link.Session, sent time.Time) time.Time {
	windows := a.power.Pending(sent)
	if len(windows) == 0 {
		return sent
	}
	for _, r := range powerReports(a.power.Channels(), a.power.Machine(), windows) {
		if !sess.SendControl(link.TypePower, r.payload) {
			break
		}
		sent = r.through
	}
	return sent
}

// powerBatch is how many windows one report carries at most: twenty
// minutes of ten-second windows, 150 kB for a machine of sixteen
// GPUs, so that the backlog of a long outage never makes a frame larger
// than the link carries.
const powerBatch = 120

// powerReport is an encoded report and the end of its last window.
type powerReport struct {
	payload []byte
	through time.Time
}

// powerReports encodes windows as reports of at most powerBatch windows.
func powerReports(channels []api.PowerChannel, machine string, windows []api.PowerWindow) []powerReport {
	var out []powerReport
	for batch := range slices.Chunk(windows, powerBatch) {
		b, err := json.Marshal(api.PowerReport{Channels: channels, Machine: machine, Windows: batch})
		if err != nil || len(b) > link.MaxPayload {
			break // not a number JSON can carry, or channels beyond reason
		}
		last := batch[len(batch)-1]
		out = append(out, powerReport{payload: b, through: last.Start.Add(time.Duration(last.Seconds * float64(time.Second)))})
	}
	return out
}

// signalOne wakes a waiter without blocking.
func signalOne(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// handshake sends the hello and reads the welcome.
func handshake(conn link.Conn, hello api.Hello) (api.Welcome, error) {
	var w api.Welcome
	b, err := json.Marshal(hello)
	if err != nil {
		return w, err
	}
	if err := conn.WriteMessage(link.AppendFrame(nil, &link.Frame{Type: link.TypeHello, Payload: b})); err != nil {
		return w, fmt.Errorf("send hello: %w", err)
	}
	msg, err := conn.ReadMessage()
	if err != nil {
		return w, fmt.Errorf("read welcome: %w", err)
	}
	f, _, err := link.DecodeFrame(msg)
	if err != nil || f.Type != link.TypeWelcome {
		return w, errors.New("read welcome: the gateway did not answer with a welcome")
	}
	if err := json.Unmarshal(f.Payload, &w); err != nil {
		return w, fmt.Errorf("read welcome: %w", err)
	}
	if w.Error != "" {
		msg := "gateway refused the worker: " + w.Error
		if w.RetryAfterS > 0 {
			return w, &retryAfterError{msg: msg, after: time.Duration(w.RetryAfterS) * time.Second}
		}
		return w, &PermanentError{Reason: msg}
	}
	return w, nil
}

// heartbeat is the current report.
func (a *Agent) heartbeat() *api.Heartbeat {
	hb := &api.Heartbeat{ActiveTasks: int(a.active.Load()), QueueDepth: int(a.waiting.Load()), Stalled: a.stalledModels()}
	if a.power != nil {
		hb.Power = a.power.Live()
		hb.GPUs, hb.DriverVersion = a.power.GPUs()
	}
	return hb
}

// sendHeartbeat sends the current report, if the link is up.
func (a *Agent) sendHeartbeat() {
	a.mu.Lock()
	s := a.sess
	a.mu.Unlock()
	if s == nil {
		return
	}
	// One heartbeat is made and sent at a time, so that the last sent is
	// the last made: a periodic one made just before an engine stalled
	// must not follow the one that reports the stall, and take it back
	// until the next.
	a.beating.Lock()
	defer a.beating.Unlock()
	if b, err := json.Marshal(a.heartbeat()); err == nil {
		s.SendControl(link.TypeHeartbeat, b)
	}
}

// stalledModels lists the models the worker offers whose engine stalled,
// or that their engine stopped answering for alone.
func (a *Agent) stalledModels() []string {
	if !slices.ContainsFunc(a.cfg.Engines, func(e engine.Engine) bool {
		w := a.watches[e]
		return w.stalledNow.Load() || w.anyStuck.Load()
	}) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id, s := range a.byModel {
		if w := a.watches[s.eng]; w.stalledNow.Load() || w.stuckModel(s.local) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (a *Agent) engineInfo() []api.EngineInfo {
	var out []api.EngineInfo
	for _, e := range a.cfg.Engines {
		if i, ok := e.(engine.Info); ok {
			out = append(out, i.Info())
		} else {
			out = append(out, api.EngineInfo{Kind: e.Kind()})
		}
	}
	return out
}

// retryAfterError is a gateway's refusal that says when to try again.
type retryAfterError struct {
	msg   string
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.msg }

// resumeWindow is how long after a link drops the worker retries at least
// every resumeRetry: the gateway's default grace (--worker-grace), during
// which the requests running on the link wait for it to come back.
const (
	resumeWindow = 15 * time.Second
	resumeRetry  = time.Second
)

// reconnectWait is how long the worker waits before it dials again after
// err, its link having last dropped at droppedAt.
func reconnectWait(b *backoff, droppedAt, now time.Time, err error) time.Duration {
	wait := b.next()
	if now.Sub(droppedAt) < resumeWindow {
		// The gateway keeps the dropped link's requests for its grace
		// period: tried often meanwhile, the link is back within it soon
		// after the network is.
		wait = min(wait, resumeRetry)
	}
	// A gateway that says when to come back (a cluster's standby while no
	// replica leads) is taken at its word: its leader may be there in a
	// second or two, sooner than the backoff's turn.
	var later *retryAfterError
	if errors.As(err, &later) {
		wait = min(later.after, maxRetryAfter)
	}
	return wait
}

// maxRetryAfter bounds the wait a gateway's Retry-After asks for.
const maxRetryAfter = 10 * time.Second

// backoff is exponential with full jitter, from 100 ms to 10 s.
type backoff struct{ n int }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) reset() { b.n = 0 }

func (b *backoff) next() time.Duration {
	ceiling := min(100*time.Millisecond<<min(b.n, 7), 10*time.Second)
	b.n++
	return time.Duration(rand.Int64N(int64(ceiling)) + int64(10*time.Millisecond))
}
