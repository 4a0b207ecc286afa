package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/limit"
	"github.com/svc-dev/svc/internal/link"
)

// Config tunes the fleet. Zero values take the defaults.
type Config struct {
	// Hold is how long a request waits for a free slot before a 429.
	Hold time.Duration
	// Grace is how long a worker whose link dropped may take to come back
	// before its requests fail or move and it is marked offline.
	Grace time.Duration
	// StaleAfter marks a worker stale when no heartbeat arrived for this
	// long (two heartbeats by default): its process may be frozen, or its
	// link dead without a word. A stale worker gets no new request while
	// a punctual one could take it, and its requests that have had no
	// output yet move to another worker that takes them.
	StaleAfter time.Duration
	// FailuresBeforeUnhealthy consecutive failures hold a worker back.
	FailuresBeforeUnhealthy int
	// HoldBack is how long an unhealthy worker gets no traffic.
	HoldBack time.Duration
	// KeepOffline is how long disconnected workers stay listed.
	KeepOffline time.Duration
	// MaxQueue bounds the requests waiting per model.
	MaxQueue int
	// MaxWorkers bounds the workers an organisation's fleet lists,
	// connected or offline: a newcomer past it takes the place of the one
	// offline longest, and waits while none is (default 10,000).
	MaxWorkers int
	// ConnectRate is how many worker links an organisation opens a
	// second after a burst as large as its fleet (AllowConnect; default
	// 20).
	ConnectRate float64
	// Heartbeat is how often workers are asked to report.
	Heartbeat time.Duration
	// Limit tunes the adaptive concurrency limit of each worker and model.
	Limit limit.Config
	// Returning lists, by organisation, the workers connected to the
	// gateway this one replaces (Connected, as it stopped); StartGrace
	// bounds how long after New a request that finds none of them back
	// waits for them to reconnect: zero is 10 s, negative none.
	Returning  map[string][]string
	StartGrace time.Duration
	// Remembered lists, by organisation, the workers the gateway this one
	// replaces listed (Remember, as it stopped): they are listed offline
	// until they reconnect.
	Remembered map[string][]Remembered
	// SettleReturning records, once the start grace ends, the disconnect
	// of each Returning worker not back (settleReturning): for a gateway
	// the workers can only return to. A cluster's replica is not, as
	// their organisation's home may have moved to another replica.
	SettleReturning bool

	// Approval says whether a worker waits for its organisation's
	// approval; nil lets every worker serve.
	Approval ApprovalGate

	Logger *slog.Logger
	Events EventSink
	Power  PowerSink
	// LastEvent reads the newest event the store holds of a worker, which
	// outlives this process. A worker this fleet has no link of is checked
	// when it connects: when its newest event is not a disconnect, its
	// last link ended unrecorded (the gateway crashed or stopped, or the
	// organisation's home moved), and the disconnect is recorded before
	// the connect. Nil: not checked.
	LastEvent LastEventReader
	// TokenLive says whether a worker token still lets its workers in
	// (Hello.TokenID); nil, or a link without a token, lets every one. A
	// link made with a token it refuses is refused, and one made before is
	// ended by DisconnectRevoked. It is called under the fleet's lock: it
	// must answer from memory.
	TokenLive func(tokenID string) bool
}

// LastEventReader reads the newest event recorded of workerID, and false
// when there is none; it should answer within about a second.
type LastEventReader func(ctx context.Context, orgID, workerID string) (api.WorkerEvent, bool, error)

// ApprovalGate says whether worker workerID of organisation orgID waits
// for the organisation's approval before it serves. When it need not, why
// is the detail of the approved event of a worker that waited. It is
// called without the fleet's lock, when a worker connects and about every
// second while one waits: it must answer from memory.
type ApprovalGate func(orgID, workerID string) (pending bool, why string)

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.Hold, 2*time.Second)
	set(&c.Grace, 15*time.Second)
	set(&c.HoldBack, 30*time.Second)
	set(&c.KeepOffline, 24*time.Hour)
	set(&c.Heartbeat, 5*time.Second)
	set(&c.StaleAfter, 2*c.Heartbeat)
	if c.StartGrace == 0 {
		c.StartGrace = 10 * time.Second
	}
	if c.FailuresBeforeUnhealthy <= 0 {
		c.FailuresBeforeUnhealthy = 3
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 1000
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = 10000
	}
	if c.ConnectRate <= 0 {
		c.ConnectRate = 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Events == nil {
		c.Events = discardEvents{}
	}
	if c.Power == nil {
		c.Power = discardPower{}
	}
	if c.Approval == nil {
		c.Approval = func(string, string) (bool, string) { return false, "" }
	}
}

// EventSink stores worker events.
type EventSink interface {
	RecordEvent(orgID string, ev api.WorkerEvent)
}

type discardEvents struct{}

func (discardEvents) RecordEvent(string, api.WorkerEvent) {}

// PowerSink keeps the power windows workers report. PowerThrough is the
// end of the last window it holds for a worker: the worker's welcome says
// so, and the worker sends again only what came after, so windows kept
// through a drop arrive once.
// Forget is told of a worker the fleet no longer lists (offline past
// KeepOffline): what is kept per worker for export can go.
type PowerSink interface {
	RecordPower(workerID string, rep api.PowerReport)
	PowerThrough(workerID string) time.Time
	Forget(workerID string)
}

type discardPower struct{}

func (discardPower) RecordPower(string, api.PowerReport) {}
func (discardPower) PowerThrough(string) time.Time       { return time.Time{} }
func (discardPower) Forget(string)                       {}

// Fleet is every organisation's workers.
type Fleet struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	orgs map[string]*org
	// handshakes holds a turn per worker id (Connect): a worker's
	// connections are let in one after another.
	handshakes map[string]chan struct{}
	// queued counts the requests waiting in every queue, read without the
	// lock: while none waits, no request can be refused for a backlog.
	queued    atomic.Int64
	returning *returning
	// adopted are the Adopt calls whose workers are awaited back, under
	// mu.
	adopted []adoption
	// changes counts the changes of what the fleet lists (reindexLocked),
	// for Changes.
	changes atomic.Uint64
	// seek is modelIndex.seek's scratch.
	seek []int
	// buffers lends the workers' sessions the batches they write.
	buffers link.Buffers
	// waiters keeps the waiters of requests that queued, with their
	// channel and timer, for the next: under load most requests queue.
	waiters sync.Pool
}

type org struct {
	id       string
	workers  map[string]*worker
	queues   map[string]*queue // by model
	affinity *lru
	service  map[string]time.Duration // average service time by model

	models map[string]*modelIndex // by model
	// held are the workers kept out of the ready heaps while held back;
	// none is due back before nextUnhold.
	held       []*worker
	nextUnhold time.Time
	keys       map[string][]*worker // by private-inference key id
	// connects is the bucket of the organisation's worker connections
	// (AllowConnect), made on the first.
	connects *rate.Limiter
}

// worker is the gateway's record of one worker; it survives disconnects.
type worker struct {
	id, name, orgID string
	version         string
	maxConcurrent   int
	models          []api.Model    // replaced, never changed in place: listings share it
	byID            map[string]int // models' indexes by id (setModels)
	engines         []api.EngineInfo
	features        []string // protocol features of its release
	e2eKey          *api.E2EKey
	// adopted is set for a worker listed from the events of its
	// organisation's last home (Adopt) until it connects here: they do
	// not hold its private-inference key.
	adopted   *adoptedSettings
	sessionID string
	sess      *link.Session
	// replaced are the sessions lately replaced while live, comebacks
	// when one of them came back, and nameShared is set once too many
	// have, until the link ends (replacing).
	replaced   []replacedSession
	comebacks  []time.Time
	nameShared bool
	// reports bounds the events the worker reports (allowReport).
	reports *rate.Limiter
	// endRecorded: listed from the gateway this one replaced, the end of
	// its link to that gateway is recorded already (settleReturning).
	endRecorded bool
	// crashed: listed from the last record of a gateway that went down
	// without stopping (Remembered.Checkpoint).
	crashed bool
	// tokenID is the worker token the current link was made with.
	tokenID string
	// owedEnd is the end of a link to another gateway process that a
	// connect found unrecorded and then failed before recording: it
	// goes before the next connected event, or is the end itself when
	// the worker goes without one.
	owedEnd *api.WorkerEvent

	attached bool // the link has a connection now
	draining bool
	// pending is set while the worker awaits its organisation's
	// approval: it is listed and connected, and routed nothing.
	pending     bool
	connectedAt time.Time
	droppedAt   time.Time // when the link last dropped, during the grace
	// drops counts the link's drops: a request that lived through one
	// took the link's outage as well as the engine's time.
	drops        uint64
	offlineSince time.Time // zero while the session lives
	lastSeen     time.Time
	heartbeat    api.Heartbeat
	graceTimer   *time.Timer
	// abandoned is set when the worker said its drain was cut short
	// (abandonReason says how): the requests still open end with its
	// process.
	abandoned     bool
	abandonReason string
	// awayReason is why the gateway sent the worker away, until it
	// connects again; leaveTimer closes the link of one sent away that
	// stays (LeaveOrg).
	awayReason string
	leaveTimer *time.Timer
	// late is closed once the worker's heartbeats are late (lateLocked):
	// the leases on it watch it to move requests that had no output. A
	// heartbeat replaces it with an open one.
	late       chan struct{}
	lateClosed bool

	active int
	// limits holds back a worker's slots for a model while its latency
	// shows requests queueing in the engine (by model: each has its own
	// latency). A model without one has every slot.
	limits       map[string]*modelLimits
	lastAssigned time.Time
	// health holds, by model, the worker's recent failures of it and the
	// hold-back they earned: one model failing (an engine's fault, or
	// requests that make it fail) takes no traffic from the others.
	health map[string]*modelHealth
	status string // last status reported in an event

	// Its places in the organisation's indexes (reindexLocked).
	listed  []*modelIndex
	members []member
	parked  bool
	keyID   string
}

// modelHealth is a worker's record of one model's requests: consecutive
// failures, when the run of them began, the last one's time, and the end
// of the hold-back they earned.
type modelHealth struct {
	failures  int
	since     time.Time
	last      time.Time
	heldUntil time.Time
}

// failureSpan is how long failures must go on without a success between
// them to hold a worker back. A count alone is met by a few requests
// that fail at once (a client's bad requests, a burst) between successes
// that take seconds each, and would take a working model away from
// every request; an engine that is broken fails for longer than this.
const failureSpan = time.Second

// failureMemory, in hold-backs, is how long a failure counts toward the
// next: one that comes later starts the count over, so that failures far
// apart (a bad request an hour, after one hold-back long ago) hold no
// worker back.
const failureMemory = 10

// heldUntil is the end of w's hold-back from model, in the past when it
// has none.
func (w *worker) heldUntil(model string) time.Time {
	if h := w.health[model]; h != nil {
		return h.heldUntil
	}
	return time.Time{}
}

// held reports whether w is held back from model now.
func (w *worker) held(model string, now time.Time) bool {
	return now.Before(w.heldUntil(model))
}

// heldBack reports whether w is held back from any model now, and the
// earliest end of those hold-backs.
func (w *worker) heldBack(now time.Time) (bool, time.Time) {
	var first time.Time
	for _, h := range w.health {
		if now.Before(h.heldUntil) && (first.IsZero() || h.heldUntil.Before(first)) {
			first = h.heldUntil
		}
	}
	return !first.IsZero(), first
}

// adoptedSettings is what the events of an adopted worker tell of the
// settings its record cannot hold.
type adoptedSettings struct {
	// known is false for events from before they told the worker's
	// features and private inference: neither can then be compared.
	known   bool
	private bool
}

// New returns an empty fleet.
func New(cfg Config) *Fleet {
	cfg.defaults()
	now := time.Now()
	f := &Fleet{cfg: cfg, log: cfg.Logger, orgs: map[string]*org{}, handshakes: map[string]chan struct{}{},
		returning: newReturning(cfg.Returning, cfg.StartGrace, now)}
	f.mu.Lock()
	f.rememberLocked(cfg.Remembered, now)
	f.mu.Unlock()
	return f
}

// WorkerID is the stable id of the worker named name in an organisation:
// the same machine keeps its id across restarts and token rotations.
func WorkerID(orgID, name string) string {
	h := sha256.Sum256([]byte(orgID + "\x00" + name))
	return "wk_" + hex.EncodeToString(h[:8])
}

func (f *Fleet) org(id string) *org {
	o := f.orgs[id]
	if o == nil {
		o = &org{id: id, workers: map[string]*worker{}, queues: map[string]*queue{},
			affinity: newLRU(10000), service: map[string]time.Duration{},
			models: map[string]*modelIndex{}, keys: map[string][]*worker{}}
		f.orgs[id] = o
	}
	return o
}

// statusLocked is a worker's status now.
func (f *Fleet) statusLocked(w *worker, now time.Time) string {
	if !w.offlineSince.IsZero() {
		return api.StatusOffline
	}
	// Unhealthy while any of its models is held back or stalls: the
	// others are served meanwhile.
	if held, _ := w.heldBack(now); held || len(w.heartbeat.Stalled) > 0 {
		return api.StatusUnhealthy
	}
	switch {
	case !w.attached || f.lateLocked(w, now):
		return api.StatusStale
	default:
		return api.StatusHealthy
	}
}

// slots is how many requests for model w takes at once: its
// max_concurrent, or fewer while its adaptive limit for the model is lower.
func (w *worker) slots(model string) int {
	if l := w.limits[model]; l != nil {
		return min(w.maxConcurrent, l.limit())
	}
	return w.maxConcurrent
}

// observeLocked feeds the latency of a request for model that succeeded to the
// model's limit on w.
func (f *Fleet) observeLocked(w *worker, model string, class sampleClass, d time.Duration, now time.Time) {
	m := w.limits[model]
	if m == nil {
		if w.limits == nil {
			w.limits = map[string]*modelLimits{}
		}
		m = &modelLimits{}
		w.limits[model] = m
	}
	l := m[class]
	if l == nil {
		l = limit.New(f.cfg.Limit, w.maxConcurrent, now)
		m[class] = l
	}
	l.Observe(now, d, w.active)
}

// sampleClass is the kind of request a latency sample is of.
type sampleClass int

const (
	unstreamed sampleClass = iota
	streamed
)

// modelLimits are a model's limits on a worker, one per sampleClass. Each
// compares its samples with its own no-load latency: a stream takes as
// long as its output, and a mix of short unstreamed answers and streams
// would read as queueing whenever the mix changed. Queueing in the engine
// shows in both, so the model takes the lower.
type modelLimits [2]*limit.Limiter

func (m *modelLimits) limit() int {
	n := math.MaxInt
	for _, l := range m {
		if l != nil {
			n = min(n, l.Limit())
		}
	}
	return n
}

func (m *modelLimits) setCeiling(c int) {
	for _, l := range m {
		if l != nil {
			l.SetCeiling(c)
		}
	}
}

// usable reports whether w may take new requests at all (free slot aside).
// Stale workers are usable: a late heartbeat is not a failure, and
// refusing a whole fleet whose reports are late (the gateway itself
// stalled, say) would be worse than trying; the choice of a worker
// passes them over while a punctual one can serve (tryLocked).
func (f *Fleet) usableLocked(w *worker, now time.Time) bool {
	// An attached worker is never offline; a hold-back is a model's
	// (eligibleLocked).
	return w.attached && !w.draining && !w.pending
}

// lateLocked reports whether w's heartbeats are late.
func (f *Fleet) lateLocked(w *worker, now time.Time) bool {
	return now.Sub(w.lastSeen) > f.cfg.StaleAfter
}

// seenLocked notes a sign of life from w: a heartbeat or another report.
func (w *worker) seenLocked(now time.Time) {
	w.lastSeen = now
	if w.late == nil || w.lateClosed {
		w.late, w.lateClosed = make(chan struct{}), false
	}
}

// signalLateLocked tells the leases on w that its heartbeats are late.
func (w *worker) signalLateLocked() {
	if w.late != nil && !w.lateClosed {
		close(w.late)
		w.lateClosed = true
	}
}

// stalls reports whether w's engine for model stopped answering, as the
// worker's heartbeat says.
func (w *worker) stalls(model string) bool {
	return model != "" && slices.Contains(w.heartbeat.Stalled, model)
}

// event records an event about w.
func (f *Fleet) event(w *worker, typ, detail string, meta map[string]any, transient bool, at time.Time) {
	f.cfg.Events.RecordEvent(w.orgID, newEvent(w, typ, detail, meta, transient, at))
}

// installEvent records the progress of a model install w reported.
func (f *Fleet) installEvent(w *worker, detail string, in *api.ModelInstall, at time.Time) {
	ev := newEvent(w, api.EventModelInstall, detail, in.Metadata(), false, at)
	ev.Install = in
	f.cfg.Events.RecordEvent(w.orgID, ev)
}

// endLocked records the disconnect that ends w's link: the one a failed
// connect owed when there is one, since no connected event followed it.
func (f *Fleet) endLocked(w *worker, detail string, at time.Time) {
	f.log.Info("worker disconnected", "worker", w.name, "worker_id", w.id, "reason", detail)
	if ev := w.owedEnd; ev != nil {
		w.owedEnd = nil
		f.cfg.Events.RecordEvent(w.orgID, *ev)
		return
	}
	f.event(w, api.EventDisconnected, detail, nil, false, at)
}

func newEvent(w *worker, typ, detail string, meta map[string]any, transient bool, at time.Time) api.WorkerEvent {
	ev := api.WorkerEvent{
		ID: uuid.NewString(), WorkerID: w.id, WorkerName: w.name, EventType: typ,
		Metadata: meta, CreatedAt: at.UTC(), Transient: transient,
	}
	if detail != "" {
		ev.Detail = &detail
	}
	if ev.Metadata == nil {
		ev.Metadata = map[string]any{}
	}
	return ev
}

// noteStatusLocked emits a health_changed event when w's status moved.
func (f *Fleet) noteStatusLocked(w *worker, now time.Time) {
	s := f.statusLocked(w, now)
	if s == w.status {
		return
	}
	from := w.status
	w.status = s
	if from == "" || s == api.StatusOffline || from == api.StatusOffline {
		// Connects and disconnects have their own events.
		return
	}
	f.event(w, api.EventHealthChanged, from+" -> "+s, map[string]any{"from": from, "to": s}, false, now)
}

// Run sweeps time-driven changes until ctx ends: workers turning stale,
// coming back from being held back, and long-offline workers being
// forgotten. It then closes every worker connection.
func (f *Fleet) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var settling sync.WaitGroup
	defer settling.Wait()
	for {
		select {
		case <-ctx.Done():
			f.closeAll()
			return nil
		case <-t.C:
			f.recheckApprovals()
			f.sweep()
			now := time.Now()
			due := f.dueAdopted(now)
			if f.cfg.SettleReturning {
				if st := f.dueReturning(now); st != nil {
					due = append(due, st)
				}
			}
			for _, st := range due {
				// The store may be slow to answer for hundreds of workers:
				// the sweep goes on meanwhile.
				settling.Go(func() { f.settleUnreturned(ctx, st) })
			}
		}
	}
}

func (f *Fleet) sweep() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for _, o := range f.orgs {
		for id, w := range o.workers {
			if !w.offlineSince.IsZero() && now.Sub(w.offlineSince) > f.cfg.KeepOffline {
				delete(o.workers, id)
				f.reindexLocked(o, w, now)
				f.cfg.Power.Forget(id)
				continue
			}
			if f.lateLocked(w, now) {
				w.signalLateLocked()
			}
			f.noteStatusLocked(w, now)
		}
		f.dispatchLocked(o, now)
	}
}

// stopTimersLocked stops w's grace period and leave, so that neither
// fires once w is no longer the fleet's record of its worker.
func (w *worker) stopTimersLocked() {
	if w.graceTimer != nil {
		w.graceTimer.Stop()
		w.graceTimer = nil
	}
	if w.leaveTimer != nil {
		w.leaveTimer.Stop()
		w.leaveTimer = nil
	}
}

// closeAll closes every worker connection; their sessions end. Pending
// grace periods and leaves are stopped so no timer fires after Run
// returns.
func (f *Fleet) closeAll() {
	f.mu.Lock()
	var sessions []*link.Session
	for _, o := range f.orgs {
		for _, w := range o.workers {
			w.stopTimersLocked()
			if w.sess != nil {
				sessions = append(sessions, w.sess)
			}
		}
	}
	f.mu.Unlock()
	for _, s := range sessions {
		s.Close(errGatewayStopping)
	}
}
