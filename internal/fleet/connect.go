package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
)

// maxConcurrent bounds a worker's slots: enough for tens of thousands of
// mostly idle streams on one box.
const maxConcurrent = 65536

var errGatewayStopping = errors.New("the gateway is shutting down")

// LostError fails the requests of a worker that went away and did not come
// back in time. The gateway answers them with 503 naming the worker, or
// moves them to another worker when nothing was sent yet.
type LostError struct {
	WorkerID   string
	WorkerName string
	Reason     string
}

func (e *LostError) Error() string {
	return fmt.Sprintf("worker %s (%s) lost: %s", e.WorkerName, e.WorkerID, e.Reason)
}

// ReadHello reads the worker's first message.
func ReadHello(conn link.Conn) (api.Hello, error) {
	var h api.Hello
	msg, err := conn.ReadMessage()
	if err != nil {
		return h, fmt.Errorf("read hello: %w", err)
	}
	f, n, err := link.DecodeFrame(msg)
	if err != nil || n != len(msg) || f.Type != link.TypeHello {
		return h, errors.New("read hello: the first message is not a hello")
	}
	if err := json.Unmarshal(f.Payload, &h); err != nil {
		return h, fmt.Errorf("read hello: %w", err)
	}
	return h, nil
}

func writeWelcome(conn link.Conn, w api.Welcome) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	return conn.WriteMessage(link.AppendFrame(nil, &link.Frame{Type: link.TypeWelcome, Payload: b}))
}

// Refuse answers a worker that may not connect and closes the connection.
func Refuse(conn link.Conn, reason string) {
	_ = writeWelcome(conn, api.Welcome{Error: reason})
	_ = conn.Close()
}

// refuseFor answers a worker that may not connect yet, and is to try again
// after a wait, and closes the connection.
func refuseFor(conn link.Conn, reason string, wait time.Duration) {
	_ = writeWelcome(conn, api.Welcome{Error: reason, RetryAfterS: api.RetrySeconds(wait)})
	_ = conn.Close()
}

// An organisation's workers connect at most Config.ConnectRate times a
// second after a burst as large as its fleet, and at least connectBurst: a
// gateway's restart brings every worker back at once, while a token's
// holder looping through connections, each one recorded as events and
// most under a new name, is slowed to the rate.
const connectBurst = 1024

// AllowConnect counts a worker connection of organisation orgID. It
// returns zero when the worker may go on, or else how long to wait before
// trying again.
func (f *Fleet) AllowConnect(orgID string) time.Duration {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.org(orgID)
	burst := max(connectBurst, len(o.workers))
	switch {
	case o.connects == nil:
		o.connects = rate.NewLimiter(rate.Limit(f.cfg.ConnectRate), burst)
	case o.connects.Burst() < burst:
		o.connects.SetBurstAt(now, burst)
	}
	if o.connects.AllowN(now, 1) {
		return 0
	}
	// A refusal takes no token: the wait is the time until a whole one.
	return time.Duration((1 - o.connects.TokensAt(now)) / f.cfg.ConnectRate * float64(time.Second))
}

// errFleetFull refuses a newcomer to an organisation whose fleet lists
// Config.MaxWorkers workers, none of them offline.
var errFleetFull = errors.New("the organisation's fleet is full")

// fleetFullWait is how long a newcomer refused by errFleetFull waits: a
// worker's disconnect frees a place only once it has been offline a while.
const fleetFullWait = time.Minute

// evictOfflineLocked makes room in o for a newcomer by forgetting the
// worker offline longest, and says whether there was one.
func (f *Fleet) evictOfflineLocked(o *org, now time.Time) bool {
	var oldest *worker
	for _, w := range o.workers {
		if !w.offlineSince.IsZero() && (oldest == nil || w.offlineSince.Before(oldest.offlineSince)) {
			oldest = w
		}
	}
	if oldest == nil {
		return false
	}
	delete(o.workers, oldest.id)
	f.reindexLocked(o, oldest, now)
	f.cfg.Power.Forget(oldest.id)
	return true
}

// Redirect answers a worker that is to link to another replica, at the
// base URL url, and closes the connection. It opens no session: the
// worker presents its session to the replica it is sent to.
func Redirect(conn link.Conn, url string) {
	_ = writeWelcome(conn, api.Welcome{Redirect: url})
	_ = conn.Close()
}

func checkHello(h *api.Hello) error {
	h.Name = strings.TrimSpace(h.Name)
	switch {
	case h.Protocol != link.Protocol:
		return fmt.Errorf("link protocol %d is not supported; this gateway speaks %d (upgrade the worker or the gateway)", h.Protocol, link.Protocol)
	case api.WorkerNameError(h.Name) != "":
		return errors.New(api.WorkerNameError(h.Name))
	case h.SessionID == "":
		return errors.New("hello lacks a session id")
	case h.MaxConcurrent < 1 || h.MaxConcurrent > maxConcurrent:
		return fmt.Errorf("max_concurrent %d is outside 1..%d", h.MaxConcurrent, maxConcurrent)
	case h.Heartbeat != nil && len(h.Heartbeat.Stalled) > maxModels:
		return fmt.Errorf("a heartbeat may name at most %d stalled models", maxModels)
	}
	var err error
	h.Models, err = checkModels(h.Models)
	return err
}

// A worker's models are bounded: each change of them is indexed under the
// fleet's lock, which every organisation's requests take.
const (
	maxModels  = 1024
	maxModelID = api.MaxModelID
)

// checkModels bounds a worker's list of models, and leaves out those whose
// id no request could name (empty, over maxModelID bytes, or with control
// characters): one such model must not keep the worker's others, or its
// later changes, from the fleet. svc worker refuses such ids in --pull and
// --model-alias at its start.
func checkModels(ms []api.Model) ([]api.Model, error) {
	if len(ms) > maxModels {
		return nil, fmt.Errorf("a worker may list at most %d models, not %d", maxModels, len(ms))
	}
	if !slices.ContainsFunc(ms, func(m api.Model) bool { return !api.ValidModelID(m.ID) }) {
		return ms, nil
	}
	return slices.DeleteFunc(slices.Clone(ms), func(m api.Model) bool { return !api.ValidModelID(m.ID) }), nil
}

// Connect serves one worker connection of organisation orgID until it
// ends or ctx does. hello is the worker's first message. A worker that
// comes back with the same session within the grace period resumes its
// streams; a new session replaces an old one of the same name.
func (f *Fleet) Connect(ctx context.Context, orgID string, hello api.Hello, conn link.Conn) error {
	if err := checkHello(&hello); err != nil {
		Refuse(conn, err.Error())
		return err
	}
	if !f.tokenLive(hello.TokenID) {
		// What a worker whose token is refused at the door is told.
		Refuse(conn, "Invalid or revoked worker token")
		return errTokenRevoked
	}
	id := WorkerID(orgID, hello.Name)
	pending, why := f.cfg.Approval(orgID, id)
	// One handshake at a time per worker. A reconnect can overtake the
	// connection it replaces while that one is still being let in; run
	// together, the older would attach after the newer was let in, or its
	// failure would be taken for a drop of the newer, and the worker would
	// go offline at the end of the grace although it is connected.
	turn := f.handshakeTurn(id)
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		_ = conn.Close()
		return ctx.Err()
	}
	var once sync.Once
	endTurn := func() { once.Do(func() { <-turn }) }
	defer endTurn()
	now := time.Now()

	f.mu.Lock()
	o := f.org(orgID)
	w := o.workers[id]
	if w == nil && len(o.workers) >= f.cfg.MaxWorkers && !f.evictOfflineLocked(o, now) {
		f.mu.Unlock()
		f.log.Warn("worker refused: the organisation's fleet is full", "org_id", orgID, "worker", hello.Name, "workers", f.cfg.MaxWorkers)
		refuseFor(conn, fmt.Sprintf("this organisation already has %d workers, none offline, the most a gateway lists", f.cfg.MaxWorkers), fleetFullWait)
		return errFleetFull
	}
	var replaced *link.Session
	closeOld := func() {}
	resumed := w != nil && w.sess != nil && w.sessionID == hello.SessionID && w.offlineSince.IsZero() && w.sess.Err() == nil
	// Where this fleet holds no live link of the worker, its last may
	// have been to another gateway process, which could not record its
	// end: one without a session here was listed by the gateway this one
	// replaced (or the organisation's last home) until it stopped; one
	// offline here may have linked elsewhere since this fleet recorded
	// its end.
	var untracked, crashed bool
	var stoppedAt, endedHere time.Time
	switch {
	case resumed:
	case w == nil:
		untracked = true
	case w.sess == nil:
		untracked, stoppedAt, crashed = !w.endRecorded, w.offlineSince, w.crashed
	case !w.offlineSince.IsZero():
		untracked, endedHere = true, w.offlineSince
	}
	if resumed && w.attached {
		// The old connection has not noticed it is dead yet. It dropped
		// now, as far as the gateway can tell: the resume is a brief drop
		// in the worker's events, not a fresh connection. Its socket is
		// closed once the fleet is unlocked.
		closeOld = w.sess.Release()
		w.attached = false
		if w.droppedAt.IsZero() {
			w.droppedAt = now
			w.drops++
		}
	}
	switch {
	case resumed:
	case w != nil && w.attached && w.sess != nil && w.sess.Err() == nil:
		// A live link of the same name: a restart that overtook its
		// predecessor's end, or another machine under the same name (a
		// copy keeps its host's name), whose agents would replace each
		// other for ever (replacing).
		if !w.replacing(hello.SessionID, now) {
			f.mu.Unlock()
			f.log.Warn("two workers share a name; refusing the newcomer", "worker", hello.Name, "worker_id", id)
			Refuse(conn, fmt.Sprintf("another worker is connected under the name %q, and the two keep taking it from each other: "+
				"give each its own name (svc worker --name)", hello.Name))
			return errNameShared
		}
	case w != nil:
		w.replaced, w.comebacks, w.nameShared = nil, nil, false
	}
	if !resumed {
		if w != nil && w.sess != nil && w.sess.Err() == nil {
			replaced = w.sess
		}
		if w == nil {
			w = &worker{id: id, orgID: orgID}
			o.workers[id] = w
		}
		w.sess = f.newSession(w)
		w.sessionID = hello.SessionID
		w.connectedAt = now
		w.active = 0
		w.health = nil
		// A new process may run other engines or other hardware: what
		// the old one's latency taught does not carry over, nor which
		// of its engines stalled.
		w.limits = nil
		w.heartbeat = api.Heartbeat{}
		if w.leaveTimer != nil {
			w.leaveTimer.Stop()
			w.leaveTimer = nil
		}
	}
	if w.graceTimer != nil {
		w.graceTimer.Stop()
		w.graceTimer = nil
	}
	// What the worker's operator set on its command line, compared with
	// its last connection: a change is a settings_changed event.
	changed := settingsChange(w, &hello)
	w.name = hello.Name
	w.version = hello.Version
	w.maxConcurrent = hello.MaxConcurrent
	for _, l := range w.limits {
		l.setCeiling(w.maxConcurrent)
	}
	w.setModels(hello.Models)
	w.tokenID = hello.TokenID
	w.engines = hello.Engines
	w.features = hello.Features
	w.e2eKey = hello.E2EKey
	w.adopted = nil
	w.draining = hello.Draining
	w.abandoned, w.abandonReason = false, ""
	if !resumed || !w.draining {
		// Sent away is a kind of draining, and ends with it.
		w.awayReason = ""
	}
	wasPending := w.pending
	w.pending = pending
	w.seenLocked(now)
	w.offlineSince = time.Time{}
	if hello.Heartbeat != nil {
		f.heartbeatLocked(w, *hello.Heartbeat, now)
	}
	// The worker counts as connected from here: streams opened before the
	// connection is attached wait in the session and go out right after
	// the welcome, so the worker is usable the moment it hears it is in.
	w.attached = true
	f.returnedLocked(orgID, id)
	f.reindexLocked(o, w, now)
	sess := w.sess
	droppedAt := w.droppedAt
	f.mu.Unlock()
	closeOld()
	var lost *api.WorkerEvent
	if untracked {
		lost = f.unrecordedEnd(ctx, orgID, id, hello, stoppedAt, crashed, endedHere, now)
	}

	if replaced != nil {
		replaced.Close(&LostError{WorkerID: id, WorkerName: hello.Name,
			Reason: "restarted, or another worker took its name, and a new process cannot resume the old one's requests"})
	}
	welcome := api.Welcome{WorkerID: id, Resumed: resumed, HeartbeatS: int(f.cfg.Heartbeat / time.Second),
		PowerThrough: f.cfg.Power.PowerThrough(id)}
	var peer []api.StreamSeq
	if resumed {
		welcome.Streams = sess.RecvState()
		peer = hello.Streams
	}
	err := writeWelcome(conn, welcome)
	var done <-chan struct{}
	if err == nil {
		done, err = sess.Attach(conn, peer)
	}
	if err != nil {
		_ = conn.Close()
		if lost != nil {
			f.mu.Lock()
			w.owedEnd = lost
			f.mu.Unlock()
		}
		f.detached(w, sess, err)
		return fmt.Errorf("connect worker %s: %w", hello.Name, err)
	}

	f.mu.Lock()
	if w.sess == sess && w.attached {
		if w.owedEnd != nil {
			// An earlier try found the end unrecorded and failed: its
			// connected event was never recorded either.
			lost, w.owedEnd = w.owedEnd, nil
		}
		switch {
		case resumed && !droppedAt.IsZero() && lost == nil:
			down := now.Sub(droppedAt)
			f.event(w, api.EventDisconnected, fmt.Sprintf("link dropped; the worker reconnected after %s", down.Round(time.Millisecond)),
				map[string]any{"down_ms": down.Milliseconds(), "streams_resumed": len(peer)}, true, droppedAt)
		case replaced != nil:
			f.event(w, api.EventReplaced, "a new connection of the same name replaced the old one", nil, false, now)
			fallthrough
		default:
			if lost != nil {
				f.cfg.Events.RecordEvent(w.orgID, *lost)
			}
			// What a new home adopting the worker lists of it (Adopt).
			f.event(w, api.EventConnected, "", map[string]any{"version": w.version, "max_concurrent": w.maxConcurrent,
				"models": modelIDs(w.models), "engines": w.engines, "features": w.features,
				"private_inference": w.e2eKey != nil}, false, now)
		}
		if changed != nil {
			ev := newEvent(w, api.EventSettingsChanged, "the worker came back with other settings", changed, false, now)
			actor := workerActor
			ev.Actor = &actor
			f.cfg.Events.RecordEvent(w.orgID, ev)
		}
		switch {
		case w.pending && (!resumed || !wasPending):
			f.event(w, api.EventApprovalPending, awaitingApproval, nil, false, now)
		case wasPending && !w.pending:
			// Approved while it was away (on another replica, say).
			f.event(w, api.EventApproved, why, nil, false, now)
		}
		w.droppedAt = time.Time{}
		if !resumed {
			// A new process: its connected event says it all. A resumed
			// link keeps its status, so that the drop's stale -> healthy
			// is noted.
			w.status = ""
		}
		f.noteStatusLocked(w, now)
		f.dispatchLocked(o, now)
	}
	if w.sess == sess && w.attached && !f.tokenLive(w.tokenID) {
		// Revoked while the link was let in, too late for the check
		// above and perhaps too early for DisconnectRevoked: both look
		// under the lock, so one of them sees it.
		f.disconnectLocked(w, revokedReason)
	} else {
		f.mu.Unlock()
	}
	endTurn()
	if resumed {
		f.log.Info("worker link resumed", "worker", hello.Name, "worker_id", id, "streams", len(peer))
	} else {
		f.log.Info("worker connected", "worker", hello.Name, "worker_id", id, "version", hello.Version,
			"max_concurrent", hello.MaxConcurrent, "models", len(hello.Models))
	}

	select {
	case <-done:
	case <-ctx.Done():
		sess.Close(errGatewayStopping)
		// The caller may release conn only once the link's loops are off it.
		<-done
	}
	return nil
}

// handshakeTurn is the one-slot semaphore that lets one connection of
// the worker id through the handshake at a time.
func (f *Fleet) handshakeTurn(id string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.handshakes[id]
	if c == nil {
		c = make(chan struct{}, 1)
		f.handshakes[id] = c
	}
	return c
}

// workerActor is who changes a worker's own settings: its operator,
// through svc worker's flags.
const workerActor = "svc worker"

// settingsChange is what a hello changes of w's settings, as
// {setting: {from, to}}; nil for a worker seen for the first time or
// unchanged. Models have their own event.
func settingsChange(w *worker, hello *api.Hello) map[string]any {
	if w.version == "" {
		return nil
	}
	out := map[string]any{}
	if w.maxConcurrent != hello.MaxConcurrent {
		out["max_concurrent"] = map[string]any{"from": w.maxConcurrent, "to": hello.MaxConcurrent}
	}
	if !slices.Equal(w.engines, hello.Engines) {
		out["engines"] = map[string]any{"from": w.engines, "to": hello.Engines}
	}
	private, known := w.e2eKey != nil, true
	if w.adopted != nil {
		private, known = w.adopted.private, w.adopted.known
	}
	if known && !slices.Equal(w.features, hello.Features) {
		out["features"] = map[string]any{"from": w.features, "to": hello.Features}
	}
	if known && private != (hello.E2EKey != nil) {
		out["private_inference"] = map[string]any{"from": private, "to": hello.E2EKey != nil}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func modelIDs(ms []api.Model) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func (f *Fleet) newSession(w *worker) *link.Session {
	var sess *link.Session
	sess = link.NewSession(link.Options{
		Role:     link.Gateway,
		Control:  func(fr link.Frame) { f.control(w, sess, fr) },
		Detached: func(err error) { f.detached(w, sess, err) },
		Buffers:  &f.buffers,
	})
	return sess
}

// unrecordedEnd is the disconnect owed before the connect of a worker that
// last linked to another gateway process, when the store's newest event
// of it is not one: that gateway crashed, stopped, or gave up the
// organisation's home before it could record the end. It is dated when
// the worker says its last link dropped (down_ms), else at the stop of
// the gateway this one replaced when that one listed the worker (about
// the crash when that was recorded by a checkpoint), else now; never
// before the newest event. A worker that went offline here at endedHere
// owes one only for an event newer than that: this fleet recorded that
// end, which may not be in the store yet. Nil when none is owed or the
// store cannot tell.
func (f *Fleet) unrecordedEnd(ctx context.Context, orgID, id string, hello api.Hello, stoppedAt time.Time, crashed bool, endedHere, now time.Time) *api.WorkerEvent {
	if f.cfg.LastEvent == nil || hello.SentAway {
		// A worker sent away says the gateway that sent it recorded the
		// end, which may not have reached the store yet.
		return nil
	}
	last, ok, err := f.newestEvent(ctx, orgID, id)
	switch {
	case err != nil:
		f.log.Warn("read a reconnecting worker's last event", "worker", hello.Name, "worker_id", id, "err", err)
		return nil
	case !ok || last.EventType == api.EventDisconnected:
		return nil
	case !endedHere.IsZero() && !last.CreatedAt.After(endedHere):
		return nil
	}
	at, detail := now, "the link ended unrecorded; the worker connected again as a new process"
	if hello.DownMS > 0 {
		at = now.Add(-time.Duration(min(hello.DownMS, maxDownMS)) * time.Millisecond)
		detail = "the link ended with the gateway process it was on (a restart, or the organisation's home moved)"
	}
	if !stoppedAt.IsZero() {
		detail = "the link ended when the gateway it was on stopped"
		if crashed {
			detail = "the link ended when the gateway it was on went down without stopping (a crash, or a kill)"
		}
		if hello.DownMS <= 0 {
			at = stoppedAt
		}
	}
	if at.Before(last.CreatedAt) {
		at = last.CreatedAt
	}
	ev := newEvent(&worker{id: id, name: hello.Name}, api.EventDisconnected, detail,
		map[string]any{"down_ms": now.Sub(at).Milliseconds()}, false, at)
	return &ev
}

// newestEvent is the store's newest event of worker id (Config.LastEvent,
// which must be set), within lastEventWait.
func (f *Fleet) newestEvent(ctx context.Context, orgID, id string) (api.WorkerEvent, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, lastEventWait)
	defer cancel()
	return f.cfg.LastEvent(ctx, orgID, id)
}

// lastEventWait bounds the store's answer: a worker's connect, or a
// settlement of hundreds, waits for it.
const lastEventWait = time.Second

// maxDownMS bounds a worker's down_ms where it becomes a duration: a
// year, beyond any event kept.
const maxDownMS = 366 * 24 * 3600 * 1000

// detached starts the grace period of a worker whose link dropped; a
// draining worker that has finished its work is offline at once.
func (f *Fleet) detached(w *worker, sess *link.Session, err error) {
	f.mu.Lock()
	if w.sess != sess || !w.attached {
		f.mu.Unlock()
		return
	}
	now := time.Now()
	w.attached = false
	f.reindexLocked(f.orgs[w.orgID], w, now)
	if w.draining && (sess.Streams() == 0 || w.abandoned) {
		w.offlineSince = now
		detail := "the worker stopped"
		reason := "stopped"
		switch {
		case w.abandoned && w.abandonReason == api.AbandonStopped:
			detail = "the worker stopped at once, as its operator asked, before its requests were done"
			reason = "stopped before it was done: its operator stopped it at once"
		case w.abandoned && w.abandonReason == api.AbandonDrainTimeout:
			detail = "the worker stopped, its drain out of time before its requests were done"
			reason = "stopped before it was done: its drain ran out of time"
		case w.abandoned:
			detail = "the worker stopped before its requests were done"
			reason = "stopped before it was done"
		}
		if w.awayReason != "" {
			detail = "the worker left as the gateway asked: " + w.awayReason
		}
		f.endLocked(w, detail, now)
		f.noteStatusLocked(w, now)
		f.mu.Unlock()
		sess.Close(&LostError{WorkerID: w.id, WorkerName: w.name, Reason: reason})
		return
	}
	f.log.Info("worker link dropped", "worker", w.name, "worker_id", w.id, "err", err)
	w.droppedAt = now
	w.drops++
	w.graceTimer = time.AfterFunc(f.cfg.Grace, func() { f.graceExpired(w, sess) })
	f.noteStatusLocked(w, now)
	f.mu.Unlock()
}

func (f *Fleet) graceExpired(w *worker, sess *link.Session) {
	f.mu.Lock()
	// A nil timer was stopped (reconnect, shutdown) after it had fired.
	if w.graceTimer == nil || w.sess != sess || w.attached || !w.offlineSince.IsZero() {
		f.mu.Unlock()
		return
	}
	now := time.Now()
	w.offlineSince = w.droppedAt
	w.graceTimer = nil
	f.changes.Add(1) // offline now: no longer expected back after a crash
	f.endLocked(w, fmt.Sprintf("the worker did not reconnect within %s", f.cfg.Grace), w.droppedAt)
	f.noteStatusLocked(w, now)
	f.mu.Unlock()
	sess.Close(&LostError{WorkerID: w.id, WorkerName: w.name, Reason: fmt.Sprintf("disconnected and did not return within %s", f.cfg.Grace)})
}

// control handles a worker's reports. It runs on the link's read loop.
func (f *Fleet) control(w *worker, sess *link.Session, fr link.Frame) {
	switch fr.Type {
	case link.TypeHeartbeat:
		var hb api.Heartbeat
		if json.Unmarshal(fr.Payload, &hb) != nil || len(hb.Stalled) > maxModels {
			return
		}
		f.mu.Lock()
		if w.sess == sess {
			now := time.Now()
			wasLate := f.lateLocked(w, now)
			w.seenLocked(now)
			recovered := f.heartbeatLocked(w, hb, now)
			f.noteStatusLocked(w, now)
			if wasLate || recovered {
				// It may take what waits.
				f.dispatchLocked(f.org(w.orgID), now)
			}
		}
		f.mu.Unlock()
	case link.TypeModels:
		var ms []api.Model
		if json.Unmarshal(fr.Payload, &ms) != nil {
			return
		}
		sent := len(ms)
		ms, err := checkModels(ms)
		if err != nil {
			f.log.Warn("a worker's models were refused", "worker", w.name, "worker_id", w.id, "err", err)
			return
		}
		if left := sent - len(ms); left > 0 {
			f.log.Warn("a worker listed models whose ids no request could name; they are left out",
				"worker", w.name, "worker_id", w.id, "left_out", left, "max_id_bytes", maxModelID)
		}
		f.mu.Lock()
		if w.sess == sess {
			now := time.Now()
			added, removed := diffModels(w.models, ms)
			w.setModels(ms)
			w.seenLocked(now)
			f.reindexLocked(f.org(w.orgID), w, now)
			if len(added)+len(removed) > 0 {
				f.event(w, api.EventModelsChanged, "", map[string]any{"added": added, "removed": removed}, false, now)
			}
			f.dispatchLocked(f.org(w.orgID), now)
		}
		f.mu.Unlock()
	case link.TypeEvent:
		// A worker reports its model installs and the loads of its
		// always-on models, and nothing else: its other events are the
		// gateway's to record, and a worker's word that it disconnected,
		// or was approved, is not to be taken.
		var ev api.WorkerEventReport
		if json.Unmarshal(fr.Payload, &ev) != nil {
			return
		}
		install := ev.EventType == api.EventModelInstall && validInstall(ev.Install)
		load := ev.EventType == api.EventModelLoaded && validLoad(ev.Load)
		if !install && !load {
			return
		}
		f.mu.Lock()
		if w.sess == sess && w.allowReport() {
			detail, now := clip(ev.Detail, maxReportDetail), time.Now()
			if install {
				f.installEvent(w, detail, ev.Install, now)
			} else {
				f.event(w, api.EventModelLoaded, detail, ev.Load.Metadata(), false, now)
			}
		}
		f.mu.Unlock()
	case link.TypePower:
		var rep api.PowerReport
		if json.Unmarshal(fr.Payload, &rep) != nil {
			return
		}
		f.mu.Lock()
		current := w.sess == sess
		f.mu.Unlock()
		if current {
			// The sink writes through the group-commit writer: it does not
			// block the read loop on the disk.
			f.cfg.Power.RecordPower(w.id, rep)
		}
	case link.TypeGoAway:
		var ga api.GoAway
		_ = json.Unmarshal(fr.Payload, &ga) // the worker's own carries none, or Abandon
		f.mu.Lock()
		current := w.sess == sess
		if current && ga.Abandon && w.draining {
			w.abandoned, w.abandonReason = true, ga.Reason
			f.mu.Unlock()
			return
		}
		if current && !w.draining {
			now := time.Now()
			w.draining = true
			f.reindexLocked(f.orgs[w.orgID], w, now)
			f.event(w, api.EventDraining, "the worker is finishing its requests and takes no new ones", nil, false, now)
		}
		f.mu.Unlock()
		// Acknowledged after the worker is out of the choice: every stream
		// opened on it before goes ahead of this on the link, so the
		// worker, counting its running requests on the acknowledgement,
		// counts them all.
		if current {
			sess.SendControl(link.TypeGoAway, nil)
		}
	}
}

// heartbeatLocked takes in w's report, recording an event for each
// engine that stalled or answered again, and reports whether one did.
func (f *Fleet) heartbeatLocked(w *worker, hb api.Heartbeat, now time.Time) (recovered bool) {
	// Counts the listing shows and the scheduler weighs: a broken or
	// hostile worker's negative ones are none.
	hb.ActiveTasks, hb.QueueDepth = max(hb.ActiveTasks, 0), max(hb.QueueDepth, 0)
	if !validLivePower(hb.Power) {
		hb.Power = nil // each channel is a series of the gateway's metrics
	}
	stalled, answering := diffIDs(w.heartbeat.Stalled, hb.Stalled)
	w.heartbeat = hb
	if len(stalled) > 0 {
		f.event(w, api.EventEngineStalled, "the engine serving "+strings.Join(stalled, ", ")+
			" stopped answering (nothing in time, nor to a probe, or it refuses connections); the worker takes no requests for it until it answers",
			map[string]any{"models": stalled}, false, now)
	}
	if len(answering) > 0 {
		f.event(w, api.EventEngineRecovered, "the engine serving "+strings.Join(answering, ", ")+" answers again",
			map[string]any{"models": answering}, false, now)
	}
	return len(answering) > 0
}

func diffModels(old, cur []api.Model) (added, removed []string) {
	return diffIDs(modelIDs(old), modelIDs(cur))
}

// diffIDs is what cur adds to old and what it removes.
func diffIDs(oldIDs, curIDs []string) (added, removed []string) {
	in := func(ids []string) func(string) bool {
		if len(ids) <= 16 {
			return func(id string) bool { return slices.Contains(ids, id) }
		}
		set := make(map[string]bool, len(ids))
		for _, id := range ids {
			set[id] = true
		}
		return func(id string) bool { return set[id] }
	}
	inOld, inCur := in(oldIDs), in(curIDs)
	for _, id := range curIDs {
		if !inOld(id) {
			added = append(added, id)
		}
	}
	for _, id := range oldIDs {
		if !inCur(id) {
			removed = append(removed, id)
		}
	}
	return added, removed
}

// SendAway asks every linked worker to finish its running requests and
// reconnect through its configured gateway, usually a load balancer that
// places it on another replica; nothing new is scheduled on them here. It
// returns how many were asked. Workers of releases that know no such
// request stay until their link closes.
func (f *Fleet) SendAway(reason string) int { return f.sendAway("", reason, 0) }

// SendAwayOrg is SendAway for one organisation's workers.
func (f *Fleet) SendAwayOrg(orgID, reason string) int {
	if orgID == "" {
		return 0
	}
	return f.sendAway(orgID, reason, 0)
}

// LeaveOrg sends away the workers of an organisation another replica is
// now the home of, and closes the link of each still here after within:
// one of a release that knows no go-away, or whose requests run on. A
// worker sent away says so when it reconnects (sent_away), so that its
// new home leaves the end of this link to this replica, which records
// it; a link closed under it would read as a drop nobody recorded, and
// be recorded twice.
func (f *Fleet) LeaveOrg(orgID, reason string, within time.Duration) int {
	if orgID == "" {
		return 0
	}
	return f.sendAway(orgID, reason, within)
}

// sendAway sends away the workers of orgID, or every worker for "", and
// after within, when positive, closes the links of those still here.
func (f *Fleet) sendAway(orgID, reason string, within time.Duration) int {
	payload, err := json.Marshal(api.GoAway{Reconnect: true, Reason: reason})
	if err != nil {
		return 0
	}
	now := time.Now()
	var sessions []*link.Session
	f.mu.Lock()
	for id, o := range f.orgs {
		if orgID != "" && id != orgID {
			continue
		}
		for _, w := range o.workers {
			if w.sess == nil || !w.offlineSince.IsZero() {
				continue
			}
			if !w.draining {
				w.draining = true
				f.reindexLocked(o, w, now)
				f.event(w, api.EventDraining, reason, nil, false, now)
			}
			w.awayReason = reason
			if within > 0 && w.leaveTimer == nil {
				sess := w.sess
				w.leaveTimer = time.AfterFunc(within, func() { f.leaveExpired(w, sess, reason) })
			}
			sessions = append(sessions, w.sess)
		}
	}
	f.mu.Unlock()
	for _, s := range sessions {
		s.SendControl(link.TypeGoAway, payload)
	}
	return len(sessions)
}

// errTokenRevoked refuses a link whose worker token was revoked.
var errTokenRevoked = errors.New("its worker token was revoked")

// revokedReason is the end of a link whose worker token was revoked.
const revokedReason = "its worker token was revoked"

// tokenLive says whether links made with tokenID may serve.
func (f *Fleet) tokenLive(tokenID string) bool {
	return tokenID == "" || f.cfg.TokenLive == nil || f.cfg.TokenLive(tokenID)
}

// DisconnectRevoked ends the links made with a worker token TokenLive no
// longer accepts, at once: a revoked token is usually a leaked one, and
// its workers must not serve until they next reconnect. It returns how
// many it ended. The link of a worker that came back with another token
// is left alone.
func (f *Fleet) DisconnectRevoked() int {
	type held struct {
		w    *worker
		sess *link.Session
	}
	var cut []held
	f.mu.Lock()
	for _, o := range f.orgs {
		for _, w := range o.workers {
			if w.sess != nil && w.offlineSince.IsZero() && !f.tokenLive(w.tokenID) {
				cut = append(cut, held{w, w.sess})
			}
		}
	}
	f.mu.Unlock()
	for _, l := range cut {
		f.disconnectSession(l.w, l.sess, revokedReason)
	}
	return len(cut)
}

// disconnectSession is Disconnect of w's link sess, if it is still w's.
func (f *Fleet) disconnectSession(w *worker, sess *link.Session, reason string) {
	f.mu.Lock()
	if w.sess != sess {
		f.mu.Unlock()
		return
	}
	f.disconnectLocked(w, reason)
}

// leaveExpired closes the link of a worker sent away that is still here.
func (f *Fleet) leaveExpired(w *worker, sess *link.Session, reason string) {
	f.mu.Lock()
	if w.leaveTimer == nil || w.sess != sess {
		f.mu.Unlock()
		return
	}
	w.leaveTimer = nil
	f.disconnectLocked(w, reason)
}

// Disconnect ends a worker's link and takes it offline at once, without a
// grace period: the machine it ran on is gone (a stopped rental). Its
// streams fail with the reason.
func (f *Fleet) Disconnect(orgID, workerID, reason string) {
	f.mu.Lock()
	o := f.orgs[orgID]
	if o == nil || o.workers[workerID] == nil {
		f.mu.Unlock()
		return
	}
	f.disconnectLocked(o.workers[workerID], reason)
}

// disconnectLocked is Disconnect of w; it unlocks the fleet.
func (f *Fleet) disconnectLocked(w *worker, reason string) {
	o := f.orgs[w.orgID]
	workerID := w.id
	if w.graceTimer != nil {
		w.graceTimer.Stop()
		w.graceTimer = nil
	}
	sess, name := w.sess, w.name
	now := time.Now()
	if w.offlineSince.IsZero() {
		w.offlineSince = now
		w.attached = false
		f.reindexLocked(o, w, now)
		f.endLocked(w, reason, now)
		f.noteStatusLocked(w, now)
	}
	f.mu.Unlock()
	if sess != nil {
		sess.Close(&LostError{WorkerID: workerID, WorkerName: name, Reason: reason})
	}
}

// What a worker reports is kept for the event log's retention, so it is
// bounded: a detail's length, and how many reports a worker makes (an
// install reports its progress at most once a second; a worker pulling
// many models it already has reports two for each at once).
const (
	maxReportDetail = 512 // bytes
	reportsPerSec   = 2
	reportsBurst    = 256
)

// allowReport reports whether w may have one more report recorded. The
// bucket is the worker's record's, so reconnecting does not refill it.
func (w *worker) allowReport() bool {
	if w.reports == nil {
		w.reports = rate.NewLimiter(reportsPerSec, reportsBurst)
	}
	return w.reports.Allow()
}

func validInstall(in *api.ModelInstall) bool {
	if in == nil || !api.ValidModelID(in.Model) {
		return false
	}
	switch in.State {
	case api.InstallStarted, api.InstallCompleted, api.InstallFailed:
		return true
	case api.InstallProgress:
		return in.Total > 0 && in.Completed >= 0 && in.Completed <= in.Total
	}
	return false
}

// validLoad reports whether a worker's load of an always-on model is one
// to record: a model id a request could name, and a load time, when
// given, under a day.
func validLoad(l *api.ModelLoad) bool {
	if l == nil || !api.ValidModelID(l.Model) {
		return false
	}
	return l.LoadMs == nil || *l.LoadMs >= 0 && *l.LoadMs < float64(24*time.Hour/time.Millisecond)
}

// clip cuts s to at most n bytes, at a character's start, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// errNameShared refuses a worker whose name a live link holds, the two
// having taken it from each other too often.
var errNameShared = errors.New("worker name shared by two connected workers")

// replaceWindow is how long a replaced session is remembered, and
// maxComebacks how many replaced sessions may come back within it.
const (
	replaceWindow = time.Minute
	maxComebacks  = 1
)

// replacedSession is a session a newer one replaced while it was live.
type replacedSession struct {
	id string
	at time.Time
}

// replacing notes session replacing w's live one at now, and reports
// whether it may. A restart brings a new session, and the one it
// replaces never comes back; one that does is another agent under the
// name, alive. Past maxComebacks in replaceWindow the name is taken to be
// shared, and newcomers are refused until w's link ends.
func (w *worker) replacing(session string, now time.Time) bool {
	if w.nameShared {
		return false
	}
	old := func(t time.Time) bool { return now.Sub(t) > replaceWindow }
	w.replaced = slices.DeleteFunc(w.replaced, func(r replacedSession) bool { return old(r.at) })
	w.comebacks = slices.DeleteFunc(w.comebacks, old)
	if slices.ContainsFunc(w.replaced, func(r replacedSession) bool { return r.id == session }) {
		if len(w.comebacks) >= maxComebacks {
			w.nameShared = true
			return false
		}
		w.comebacks = append(w.comebacks, now)
	}
	if len(w.replaced) < 16 {
		w.replaced = append(w.replaced, replacedSession{w.sessionID, now})
	}
	return true
}

// validLivePower reports whether a live reading's channels can be a
// machine's: few, and well named. None is valid.
func validLivePower(p *api.LivePower) bool {
	if p == nil {
		return true
	}
	if len(p.Watts) > api.MaxPowerChannels || len(p.Channels) > api.MaxPowerChannels {
		return false
	}
	for k := range p.Watts {
		if !api.ValidPowerKey(k) {
			return false
		}
	}
	for _, c := range p.Channels {
		if !api.ValidPowerKey(c.Key) {
			return false
		}
	}
	return true
}
