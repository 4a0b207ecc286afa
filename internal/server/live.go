package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/transcription"
)

// liveProtocol is the WebSocket subprotocol the gateway answers with when
// the client offers any: a browser offers it beside svc-key.<KEY>, which
// carries its key, and must be answered with one it offered.
const liveProtocol = "svc.live"

// liveWriteWait bounds one write to the client: a client that stops
// reading is gone.
const liveWriteWait = 30 * time.Second

// liveTranscription is GET /v1/audio/transcriptions/live: a WebSocket on
// which the client streams PCM and reads transcript events. Everything
// that can be refused is refused before the upgrade, as a plain HTTP
// answer: the query, the model, a worker (429, 503).
func (s *Server) liveTranscription(c *call) error {
	// Live audio has no encrypted form, so an organisation that requires
	// encryption takes none of it, whatever content type the upgrade
	// names.
	if c.org.Settings.RequireE2E {
		return errE2ERequired
	}
	if !websocket.FastHTTPIsWebSocketUpgrade(c.ctx) {
		return api.BadRequest("Live transcription is a WebSocket: connect to this URL with a WebSocket client (GET with Upgrade: websocket)")
	}
	if keyWithoutLiveProtocol(c.ctx.Request.Header.Peek("Sec-WebSocket-Protocol")) {
		// A browser that offers subprotocols fails a handshake answered
		// with none of them, after the session took a worker's slot.
		return api.BadRequest("Offer the WebSocket subprotocol " + liveProtocol + " beside svc-key.<KEY>: the gateway answers with it")
	}
	args := c.ctx.QueryArgs()
	req, err := transcription.ParseLive(func(k string) string { return string(args.Peek(k)) })
	if req != nil {
		c.model = req.Model
	}
	if err != nil {
		return err
	}
	r := inference(c, api.KindTranscriptionLive, req.Model, true)
	r.Feature = api.FeatureLiveTranscription
	r.AudioFormat = api.AudioPCMStream
	if r.Params, err = json.Marshal(req.Params); err != nil {
		return err
	}
	c.rowed = true
	rc := s.relay.Start(r)
	// Until the upgrade the client may leave while a worker is found.
	unwatch := s.watchClient(c.ctx.Conn(), rc.Cancel)
	live, err := rc.Live(req.BytesPerSecond())
	unwatch()
	if err != nil {
		return err
	}
	worker := live.Worker()
	started, _ := json.Marshal(api.LiveEvent{Type: api.LiveSessionStarted, RequestID: c.requestID,
		Worker: &api.LiveWorker{ID: worker.ID, Name: worker.Name}})
	workerHeaders(&c.ctx.Response.Header, worker)
	up := websocket.FastHTTPUpgrader{
		ReadBufferSize:  4 << 10,
		WriteBufferSize: 4 << 10,
		Subprotocols:    []string{liveProtocol},
		// The key, not a cookie, authenticates the session, so a page of
		// any origin holds only what its own key gives it.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
	}
	if !s.lives.add() {
		live.Abort(errShuttingDown)
		_ = live.Events(func([]byte) error { return nil })
		return errShuttingDown
	}
	maxBytes := req.MaxBytes()
	// The connection fasthttp closes once the session is over: one ended
	// for an error is drained first (gatedConn.drain), as a client that
	// still sends would otherwise be reset, and lose the error event and
	// the close frame before it read them.
	gc, _ := c.ctx.Conn().(*gatedConn)
	linger := func() {
		if gc != nil {
			gc.linger.Store(true)
		}
	}
	err = up.Upgrade(c.ctx, func(ws *websocket.Conn) {
		defer s.lives.done()
		stop := s.lives.watch(func() { live.Abort(errShuttingDown) })
		defer stop()
		serveLive(ws, live, started, maxBytes, s.liveIdle, linger)
	})
	if err != nil {
		s.lives.done()
		live.Abort(upgradeError(err))
		_ = live.Events(func([]byte) error { return nil })
		return upgradeError(err)
	}
	return nil
}

// upgradeError is the 400 of a WebSocket handshake that failed.
func upgradeError(err error) error { return api.BadRequest("WebSocket upgrade failed: %v", err) }

var errShuttingDown error = &api.Error{Kind: api.KindUnavailable, Code: api.CodeShuttingDown, RetryAfter: time.Second,
	Message: "The gateway is shutting down; reconnect"}

// serveLive runs a session on its upgraded connection: a goroutine reads
// the client's frames into the session while this one writes the events,
// then closes the connection and waits for the reader. A session ended
// for an error calls linger.
func serveLive(ws *websocket.Conn, live *relay.Live, started []byte, maxBytes int64, idle time.Duration, linger func()) {
	// readLive bounds a frame itself, reading no more of one than the
	// bound, so that one over it gets the error event whatever length it
	// says it has: the library's limit would close the connection itself
	// first, and no event could follow.
	ws.SetReadLimit(0)
	write := func(msg []byte) error {
		_ = ws.SetWriteDeadline(time.Now().Add(liveWriteWait))
		return ws.WriteMessage(websocket.TextMessage, msg)
	}
	var wg sync.WaitGroup
	var reads readDeadline
	if write(started) != nil {
		live.Abort(relay.ErrClientGone)
	} else {
		wg.Go(func() { readLive(ws, &reads, live, maxBytes, idle) })
	}
	err := live.Events(write)
	code, reason := websocket.CloseNormalClosure, "done"
	if err != nil && !errors.Is(err, relay.ErrClientGone) {
		ae := api.ErrorOf(err)
		msg, _ := json.Marshal(api.LiveEvent{Type: api.LiveError, Error: &api.LiveErrorBody{
			// Every error event has a code: a failure with none of its
			// own (a worker's engine that died) gives its type.
			Status: ae.HTTPStatus(), Code: cmp.Or(ae.Code, ae.ErrorType()), Message: ae.Message}})
		_ = write(msg)
		code, reason = websocket.CloseInternalServerErr, "error"
		if st := ae.HTTPStatus(); st >= 400 && st < 500 {
			code = websocket.ClosePolicyViolation
		}
		linger()
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	// The reader waits for the client's close, or no longer than this.
	reads.close(ws, time.Now().Add(liveCloseWait))
	_ = ws.Close()
	wg.Wait()
}

// readDeadline sets the reader's deadline until the session closes, and
// then the close's alone: a frame the reader takes as the close begins
// (the client's end) must not lift it.
type readDeadline struct {
	mu      sync.Mutex
	closing bool
}

// set sets the reader's deadline, t zero for none, unless the session
// is closing.
func (d *readDeadline) set(ws *websocket.Conn, t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closing {
		_ = ws.SetReadDeadline(t)
	}
}

// close sets the deadline of the close, which set changes no more.
func (d *readDeadline) close(ws *websocket.Conn, t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closing = true
	_ = ws.SetReadDeadline(t)
}

// liveCloseWait is how long a session's reader waits for the client to
// answer its close.
const liveCloseWait = 5 * time.Second

// readLive passes the client's audio to the session until it ends its
// audio, breaks the protocol, goes over a limit, leaves, or sends nothing
// for idle before its end.
func readLive(ws *websocket.Conn, deadline *readDeadline, live *relay.Live, maxBytes int64, idle time.Duration) {
	ended := false
	for {
		if !ended {
			// After the end, nothing more is owed: the final may take
			// as long as the engine needs.
			deadline.set(ws, time.Now().Add(idle))
		}
		typ, msg, err := readFrame(ws)
		switch {
		case err != nil:
			var ne net.Error
			switch {
			case errors.Is(err, errFrameTooLarge) || errors.Is(err, websocket.ErrReadLimit):
				live.Abort(&api.Error{Kind: api.KindTooLarge, Code: "frame_too_large",
					Message: "A binary frame is over 256 KiB; send the audio in smaller pieces"})
			case errors.As(err, &ne) && ne.Timeout():
				live.Abort(&api.Error{Kind: api.KindTimeout, Code: api.CodeTimeout,
					Message: "No frame came for " + idle.String() + `; send {"type":"end"} when the audio is over`})
			default:
				// The connection closed or broke: if it was before the
				// final, the client left (499); after it, nothing is
				// running to stop.
				live.Abort(relay.ErrClientGone)
			}
			return
		case ended:
			// After the end, only a close is expected; anything else is
			// ignored until the final is out.
		case typ == websocket.BinaryMessage:
			if live.Received()+int64(len(msg)) > maxBytes {
				live.Abort(&api.Error{Kind: api.KindTooLarge, Code: "audio_too_long",
					Message: "A live session takes at most " + transcription.LiveMaxDuration.String() + " of audio; start another"})
				return
			}
			if live.Audio(msg) != nil {
				// The session is over; its events say why.
				return
			}
		case typ == websocket.TextMessage && isEnd(msg):
			ended = true
			deadline.set(ws, time.Time{})
			if live.EndAudio() != nil {
				return
			}
		default:
			live.Abort(&api.Error{Kind: api.KindInvalidRequest, Code: "invalid_frame",
				Message: `Send audio as binary frames of 16-bit little-endian mono PCM, and {"type":"end"} as a text frame when it is over`})
			return
		}
	}
}

var errFrameTooLarge = errors.New("frame too large")

// readFrame reads the next message, at most transcription.LiveMaxFrame
// bytes of it: a longer one is errFrameTooLarge, read no further.
func readFrame(ws *websocket.Conn) (int, []byte, error) {
	typ, r, err := ws.NextReader()
	if err != nil {
		return typ, nil, err
	}
	msg, err := io.ReadAll(io.LimitReader(r, transcription.LiveMaxFrame+1))
	if err == nil && len(msg) > transcription.LiveMaxFrame {
		err = errFrameTooLarge
	}
	return typ, msg, err
}

// keyWithoutLiveProtocol reports whether a handshake offers its key as a
// subprotocol (svc-key.<KEY>, a browser's way) but not liveProtocol, the
// one the gateway answers with.
func keyWithoutLiveProtocol(header []byte) bool {
	key, live := false, false
	for p := range bytes.SplitSeq(header, []byte(",")) {
		p = bytes.TrimSpace(p)
		key = key || bytes.HasPrefix(p, []byte("svc-key."))
		live = live || string(p) == liveProtocol
	}
	return key && !live
}

func isEnd(msg []byte) bool {
	var m struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(bytes.TrimSpace(msg), &m) == nil && m.Type == "end"
}

// liveSessions tracks the sessions on hijacked connections, which
// fasthttp's shutdown no longer sees: Shutdown stops them and waits.
type liveSessions struct {
	mu     sync.Mutex
	closed bool
	stops  map[*func()]struct{}
	wg     sync.WaitGroup
}

// add counts a session about to start; false once shutdown began.
func (l *liveSessions) add() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

func (l *liveSessions) done() { l.wg.Done() }

// watch runs stop if shutdown begins while the session runs.
func (l *liveSessions) watch(stop func()) (unwatch func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		stop()
		return func() {}
	}
	if l.stops == nil {
		l.stops = map[*func()]struct{}{}
	}
	key := &stop
	l.stops[key] = struct{}{}
	return func() {
		l.mu.Lock()
		delete(l.stops, key)
		l.mu.Unlock()
	}
}

// close stops every session and waits for them to end.
func (l *liveSessions) close() {
	l.mu.Lock()
	l.closed = true
	for stop := range l.stops {
		(*stop)()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
