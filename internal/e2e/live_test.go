package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/svc-dev/svc/internal/harness"
)

// pcmTone is a 440 Hz tone as 16-bit little-endian mono PCM.
func pcmTone(seconds float64, rate int) []byte {
	n := int(seconds * float64(rate))
	b := make([]byte, 0, 2*n)
	for i := range n {
		v := int16(0.3 * 32767 * math.Sin(2*math.Pi*440*float64(i)/float64(rate)))
		b = binary.LittleEndian.AppendUint16(b, uint16(v))
	}
	return b
}

func liveURL(s *server, prefix, query string) string {
	return "ws" + strings.TrimPrefix(s.URL, "http") + prefix + "/audio/transcriptions/live?" + query
}

type liveEvent struct {
	Type      string  `json:"type"`
	Text      *string `json:"text"`
	Start     float64 `json:"start"`
	End       float64 `json:"end"`
	Duration  float64 `json:"duration"`
	RequestID string  `json:"request_id"`
	Worker    *struct {
		ID, Name string
	} `json:"worker"`
	Segments []map[string]any `json:"segments"`
	Error    *struct {
		Status  int    `json:"status"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func readEvent(t *testing.T, ws *websocket.Conn) liveEvent {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	typ, msg, err := ws.ReadMessage()
	if err != nil || typ != websocket.TextMessage {
		t.Fatalf("read event: %v %v %s", typ, err, msg)
	}
	var ev liveEvent
	if err := json.Unmarshal(msg, &ev); err != nil {
		t.Fatalf("event %s: %v", msg, err)
	}
	return ev
}

// endAndFinal ends a session's audio and returns the first event after
// its partials: the final, or what came instead.
func endAndFinal(t *testing.T, ws *websocket.Conn) liveEvent {
	t.Helper()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"end"}`)); err != nil {
		t.Fatal(err)
	}
	for {
		if ev := readEvent(t, ws); ev.Type != "transcript.partial" {
			return ev
		}
	}
}

// Live transcription through real svc serve and svc worker processes: a
// partial comes while the audio still arrives, then the final, and the
// session's usage row counts the seconds sent.
func TestLiveTranscription(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	for _, tc := range []struct {
		prefix string
		header http.Header
		dialer websocket.Dialer
	}{
		{"/v1", http.Header{"Authorization": {"Bearer " + key}}, websocket.Dialer{}},
		// A browser's way: the key as a subprotocol, beside svc.live.
		{"/api/v1", nil, websocket.Dialer{Subprotocols: []string{"svc.live", "svc-key." + key}}},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ws, resp, err := tc.dialer.DialContext(ctx, liveURL(s, tc.prefix, "model=stt-large-v3-turbo&sample_rate=16000&language=en"), tc.header)
			if err != nil {
				t.Fatalf("dial: %v %v", err, resp)
			}
			defer ws.Close()
			if tc.header == nil && ws.Subprotocol() != "svc.live" {
				t.Fatalf("subprotocol %q", ws.Subprotocol())
			}
			started := readEvent(t, ws)
			id := resp.Header.Get("X-Request-Id")
			if started.Type != "session.started" || started.RequestID == "" || started.RequestID != id ||
				started.Worker == nil || started.Worker.Name != "audio-box" || started.Worker.ID == "" {
				t.Fatalf("first event %+v (request id %q)", started, id)
			}
			pcm := pcmTone(7, 16000)
			send := func(b []byte) {
				for len(b) > 0 {
					n := min(len(b), 8000) // a quarter second
					if err := ws.WriteMessage(websocket.BinaryMessage, b[:n]); err != nil {
						t.Fatal(err)
					}
					b = b[n:]
					time.Sleep(10 * time.Millisecond)
				}
			}
			// Four seconds, then a partial before any more audio is sent.
			send(pcm[:4*32000])
			partial := readEvent(t, ws)
			if partial.Type != "transcript.partial" || partial.Text == nil || *partial.Text == "" || partial.End < 3 || partial.End > 4 {
				t.Fatalf("partial %+v", partial)
			}
			send(pcm[4*32000:])
			final := endAndFinal(t, ws)
			if final.Type != "transcript.final" || final.Text == nil || *final.Text == "" || final.Duration != 7 || len(final.Segments) == 0 {
				t.Fatalf("final %+v", final)
			}
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Fatalf("after the final: %v", err)
			}
			row := s.usageRow(key, id)
			if row["request_type"] != "audio" || row["audio_format"] != "audio/pcm;stream" || row["audio_seconds"] != 7.0 ||
				row["status_code"] != 200.0 || row["worker_name"] != "audio-box" || row["model"] != "stt-large-v3-turbo" {
				t.Fatalf("usage row %v", row)
			}
		})
	}
}

// A client that leaves mid-session gets a 499 row.
func TestLiveTranscriptionClientGone(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	ws, resp, err := websocket.DefaultDialer.Dial(liveURL(s, "/v1", "model=stt-large-v3-turbo"), http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	readEvent(t, ws)
	if err := ws.WriteMessage(websocket.BinaryMessage, pcmTone(1, 16000)); err != nil {
		t.Fatal(err)
	}
	_ = ws.Close()
	row := s.usageRow(key, resp.Header.Get("X-Request-Id"))
	if row["status_code"] != 499.0 || row["request_type"] != "audio" {
		t.Fatalf("usage row %v", row)
	}
}

// What can be refused is refused before the upgrade, as plain HTTP; a
// broken protocol is an error event and a close.
func TestLiveTranscriptionRefusals(t *testing.T) {
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=0")
	auth := http.Header{"Authorization": {"Bearer " + key}}

	r := s.do("GET", "/v1/audio/transcriptions/live?model=stt-large-v3-turbo", "", bearer(key))
	if r.Status != 400 || !strings.Contains(string(r.Body), "WebSocket") {
		t.Fatalf("plain GET: %d %s", r.Status, r.Body)
	}
	for _, tc := range []struct {
		query  string
		header http.Header
		status int
	}{
		{"model=no-such-model", auth, 404},
		{"", auth, 400},
		{"model=stt-large-v3-turbo&sample_rate=96000", auth, 400},
		{"model=stt-large-v3-turbo&language=english", auth, 400},
		{"model=stt-large-v3-turbo", nil, 401},
	} {
		_, resp, err := websocket.DefaultDialer.Dial(liveURL(s, "/v1", tc.query), tc.header)
		if err == nil || resp == nil || resp.StatusCode != tc.status {
			t.Fatalf("%s: err %v, response %v, want %d", tc.query, err, resp, tc.status)
		}
	}
	// A browser that offers its key but not svc.live would fail a
	// handshake answered without a subprotocol: refused before it takes
	// a worker.
	keyOnly := websocket.Dialer{Subprotocols: []string{"svc-key." + key}}
	if _, resp, err := keyOnly.Dial(liveURL(s, "/v1", "model=stt-large-v3-turbo"), nil); err == nil || resp == nil ||
		resp.StatusCode != 400 {
		t.Fatalf("the key offered without svc.live: err %v, response %v, want 400", err, resp)
	}

	// A frame the protocol has no place for, and one over 256 KiB, also
	// one over any bound a WebSocket library sets: each an error event
	// with its status and code, then a close; also when the client's
	// audio is still on its way, which the gateway takes and drops rather
	// than reset the connection and lose the event.
	for _, tc := range []struct {
		name     string
		typ      int
		frame    []byte
		status   int
		code     string
		inFlight bool
	}{
		{"text", websocket.TextMessage, []byte(`hello`), 400, "invalid_frame", false},
		{"large", websocket.BinaryMessage, make([]byte, 256<<10+2), 413, "frame_too_large", false},
		// One frame that says it holds 5 MiB, as a browser sends it.
		{"huge", websocket.BinaryMessage, make([]byte, 5<<20), 413, "frame_too_large", false},
		{"text, audio behind it", websocket.TextMessage, []byte(`{"type":"config"}`), 400, "invalid_frame", true},
		{"large, audio behind it", websocket.BinaryMessage, make([]byte, 300_000), 413, "frame_too_large", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dialer := websocket.Dialer{WriteBufferSize: 6 << 20}
			ws, _, err := dialer.Dial(liveURL(s, "/v1", "model=stt-large-v3-turbo"), auth)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			readEvent(t, ws)
			// Audio keeps coming after the frame until the client has
			// read the close, faster than real time: the gateway must
			// take it rather than reset the connection, which loses the
			// event in clients that stop at a failed write.
			stop, sent := make(chan struct{}), make(chan error, 1)
			go func() {
				err := ws.WriteMessage(tc.typ, tc.frame)
				for pcm := pcmTone(0.25, 16000); err == nil && tc.inFlight; {
					select {
					case <-stop:
						sent <- nil
						return
					default:
					}
					err = ws.WriteMessage(websocket.BinaryMessage, pcm)
				}
				sent <- err
			}()
			ev := readEvent(t, ws)
			if ev.Type != "error" || ev.Error == nil || ev.Error.Status != tc.status || ev.Error.Code != tc.code {
				t.Fatalf("error event %+v, want %d %s", ev.Error, tc.status, tc.code)
			}
			if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
				t.Fatalf("after the error: %v", err)
			}
			close(stop)
			if err := <-sent; errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
				t.Fatalf("the client's audio after the frame: %v; want it taken until the client closed", err)
			}
		})
	}

	// A session with no audio ends with a final that has every member.
	ws, _, err := websocket.DefaultDialer.Dial(liveURL(s, "/v1", "model=stt-large-v3-turbo"), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	readEvent(t, ws)
	_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"end"}`))
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, msg, err := ws.ReadMessage()
	var final map[string]any
	if err != nil || json.Unmarshal(msg, &final) != nil || final["type"] != "transcript.final" {
		t.Fatalf("final %s: %v", msg, err)
	}
	for _, k := range []string{"text", "segments", "language", "duration"} {
		if _, ok := final[k]; !ok {
			t.Errorf("the final of a silent session has no %s: %s", k, msg)
		}
	}
}

// After the client's end, nothing more is owed: a final that takes longer
// than the wait for the next frame still comes.
func TestLiveTranscriptionSlowFinal(t *testing.T) {
	// The engine takes twice the audio's length: 2 s of audio, a final
	// about 4 s after the end, twice the wait.
	s, key := audioGateway(t, "tps=0,ttft=0,rtf=2", "--live-idle", "2s")
	ws, resp, err := websocket.DefaultDialer.Dial(liveURL(s, "/v1", "model=stt-large-v3-turbo"), http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	readEvent(t, ws)
	if err := ws.WriteMessage(websocket.BinaryMessage, pcmTone(2, 16000)); err != nil {
		t.Fatal(err)
	}
	if ev := endAndFinal(t, ws); ev.Type != "transcript.final" || ev.Duration != 2 {
		t.Fatalf("after the end: %+v %+v", ev, ev.Error)
	}
	if row := s.usageRow(key, resp.Header.Get("X-Request-Id")); row["status_code"] != 200.0 || row["audio_seconds"] != 2.0 {
		t.Fatalf("usage row %v", row)
	}

	// Before the end, the wait holds: a client that sends nothing is told.
	idle, _, err := websocket.DefaultDialer.Dial(liveURL(s, "/v1", "model=stt-large-v3-turbo"), http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer idle.Close()
	readEvent(t, idle)
	if ev := readEvent(t, idle); ev.Type != "error" || ev.Error == nil || ev.Error.Status != 504 || ev.Error.Code != "timeout" {
		t.Fatalf("a silent client: %+v %+v", ev, ev.Error)
	}
}

// A session the gateway ends for its worker's failure closes within the
// close's wait whatever the client does: also when its end frame comes as
// the session closes, and it never answers the close.
func TestLiveTranscriptionClosesOnAnErrorWhateverTheClientSends(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sim, simURL, err := harness.StartSim(ctx, harness.SimSpec{Spec: harness.Spec{Bin: "svc"}, Options: "tps=0,ttft=0,rtf=0"})
	if err != nil {
		t.Fatal(err)
	}
	adopt(t, sim)
	startWorker(t, s.URL, s.tokenFile(), "ears", "--engine", "openai="+simURL)
	ws, _, err := websocket.DefaultDialer.Dial(liveURL(s, "/v1", "model=sim-stt"), http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	readEvent(t, ws)
	// The engine goes: the next decode, at 3 s of audio, fails.
	_ = sim.Kill() // its error is the signal's
	if err := ws.WriteMessage(websocket.BinaryMessage, pcmTone(4, 16000)); err != nil {
		t.Fatal(err)
	}
	// Read the connection as it is, answering nothing, until the close
	// frame (1011) has come; then send the end, and wait for the gateway
	// to close the connection.
	nc := ws.NetConn()
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte("\x88\x07\x03\xf3error")) {
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("before the close frame: %v; read %q", err, got)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Contains(got, []byte(`"type":"error"`)) {
		t.Fatalf("no error event before the close: %q", got)
	}
	// Every error event has a code, a failure with none of its own too.
	if !regexp.MustCompile(`"error":\{"status":5\d\d,"code":"[a-z_]+","message":`).Match(got) {
		t.Fatalf("error event without a code: %q", got)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"end"}`)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, err := nc.Read(buf); err != nil {
			if d := time.Since(start); d > 12*time.Second {
				t.Fatalf("the gateway closed the connection %v after the end, want within the close's wait and the linger", d)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the gateway never closed the connection")
			}
			break
		}
	}
}
