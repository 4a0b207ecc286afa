package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// What a FuzzLiveSessions client does next, from one byte of its script.
const (
	liveAudio = iota // a binary frame of PCM, as many bytes as the next byte's 257
	liveText         // a text frame of the next byte's count of the script's bytes
	liveEnd          // {"type":"end"}
	livePing         // a ping
	liveClose        // the client's close frame, then it reads what is left
	liveLeave        // the connection closed, with nothing said
	liveLarge        // a binary frame over 256 KiB
	liveOps
)

// liveSession is what a FuzzLiveSessions client read of its session.
type liveSession struct {
	events    []map[string]any
	closeCode int // of the gateway's close frame; 0 when none came
	err       error
}

// Any live transcription session, from its query to whatever frames its
// client sends and however it leaves, is refused before the upgrade as a
// plain HTTP answer of the spec's shape, or runs as the spec's events:
// session.started naming the request and worker, partials, then one
// final or one error event, each with the close that follows it (normal,
// or a policy violation for the client's mistake); never a hang. Its
// usage row has the status the client was given, or, when the client
// left before its outcome, 499 or that outcome's. Each byte of script is
// a step (liveAudio, ...); a client that did not leave ends its audio
// after the script and reads to the close:
//
//	go test ./internal/server -run '^$' -fuzz FuzzLiveSessions -fuzztime 5m
func FuzzLiveSessions(f *testing.F) {
	f.Add("model=sim-stt", []byte{liveAudio, 200, liveAudio, 17, livePing, liveEnd})
	f.Add("model=sim-stt&sample_rate=8000&language=en", []byte{liveAudio, 255, liveAudio, 255, liveAudio, 255})
	f.Add("model=sim-stt", []byte{liveAudio, 3, liveText, 5, 'h', 'e', 'l', 'l', 'o'})
	f.Add("model=sim-stt", []byte{liveText, 14, '{', '"', 't', 'y', 'p', 'e', '"', ':', '"', 'e', 'n', 'd', '"', '}', liveAudio, 9})
	f.Add("model=sim-stt", []byte{liveAudio, 100, liveLarge})
	f.Add("model=sim-stt", []byte{liveAudio, 100, liveClose})
	f.Add("model=sim-stt", []byte{liveAudio, 100, liveLeave})
	f.Add("model=sim-stt", []byte{liveEnd, liveAudio, 1, liveEnd, liveClose})
	f.Add("model=sim-stt&sample_rate=96000", []byte{liveEnd})
	f.Add("model=sim-chat", []byte{liveEnd})
	f.Add("language=xx", []byte{liveEnd})
	g := startInProcess(f)
	wsURL := "ws" + strings.TrimPrefix(g.url, "http") + "/v1/audio/transcriptions/live?"
	auth := http.Header{"Authorization": {"Bearer " + g.key}}
	f.Fuzz(func(t *testing.T, query string, script []byte) {
		if _, err := url.Parse(wsURL + query); err != nil || strings.ContainsFunc(query, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			t.Skip("a client escapes such a query")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ws, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL+query, auth)
		if errors.Is(err, websocket.ErrBadHandshake) {
			g.checkLiveRefusal(t, query, resp)
			return
		}
		if err != nil {
			t.Fatalf("%q: dial: %v", query, err)
		}
		defer ws.Close()
		id := resp.Header.Get("X-Request-Id")
		read := make(chan liveSession, 1)
		go func() { read <- readLive(ws) }()
		left, closed, audio := runLiveScript(ws, script)
		if !left && !closed {
			_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"end"}`))
		}
		var s liveSession
		select {
		case s = <-read:
		case <-time.After(30 * time.Second):
			_ = ws.Close()
			<-read
			t.Fatalf("%q %v: the session did not end", query, script)
		}
		status, err := s.check(id, left || closed)
		if err != nil {
			t.Fatalf("%q %v: %v\nevents %v, close %d, read %v", query, script, err, s.events, s.closeCode, s.err)
		}
		row, err := g.usageRow(id)
		if err != nil {
			t.Fatalf("%q %v: %v", query, script, err)
		}
		if status == http.StatusOK {
			// The audio the client sent before its end, whole samples,
			// is what the final and the row say it sent.
			want := float64(audio/2) / liveRate(query)
			final := s.events[len(s.events)-1]
			if d, _ := final["duration"].(float64); math.Abs(d-want) > 1e-3 {
				t.Fatalf("%q %v: %d bytes of audio, a final of %v s, want %.4f", query, script, audio, final["duration"], want)
			}
			if secs, _ := row["audio_seconds"].(float64); math.Abs(secs-want) > 1e-3 {
				t.Fatalf("%q %v: %d bytes of audio, a row of %v s, want %.4f: %v", query, script, audio, row["audio_seconds"], want, row)
			}
		}
		got, _ := row["status_code"].(float64)
		switch {
		case status != 0 && int(got) != status:
			t.Fatalf("%q %v: the client was given %d, the row says %v: %v", query, script, status, got, row)
		case status == 0 && got != 499 && got != 200 && !liveClientErrors[int(got)]:
			t.Fatalf("%q %v: the client left, and the row says %v: %v", query, script, got, row)
		}
	})
}

// liveClientErrors are the statuses of the error events a session's
// client can cause.
var liveClientErrors = map[int]bool{400: true, 413: true}

// liveRate is the sample rate a session's query asks for.
func liveRate(query string) float64 {
	q, _ := url.ParseQuery(query)
	if r, err := strconv.Atoi(q.Get("sample_rate")); err == nil {
		return float64(r)
	}
	return 16000
}

// runLiveScript sends what script says, and counts the bytes of audio
// sent before its end; it stops at the first write that fails, which the
// gateway's close after an error event causes.
func runLiveScript(ws *websocket.Conn, script []byte) (left, closed bool, audio int) {
	next := func() int {
		if len(script) == 0 {
			return 0
		}
		b := script[0]
		script = script[1:]
		return int(b)
	}
	ended := false
	for len(script) > 0 {
		var err error
		switch next() % liveOps {
		case liveAudio:
			pcm := make([]byte, next()*257)
			for i := range pcm {
				pcm[i] = byte(i * 7)
			}
			if err = ws.WriteMessage(websocket.BinaryMessage, pcm); err == nil && !ended {
				audio += len(pcm)
			}
		case liveText:
			n := min(next(), len(script))
			err = ws.WriteMessage(websocket.TextMessage, script[:n])
			var end struct{ Type string }
			ended = ended || err == nil && json.Unmarshal(script[:n], &end) == nil && end.Type == "end"
			script = script[n:]
		case liveEnd:
			err = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"end"}`))
			ended = true
		case livePing:
			err = ws.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(time.Second))
		case liveClose:
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return false, true, audio
		case liveLeave:
			_ = ws.NetConn().Close()
			return true, false, audio
		case liveLarge:
			err = ws.WriteMessage(websocket.BinaryMessage, make([]byte, 256<<10+1))
		}
		if err != nil {
			return false, true, audio
		}
	}
	return false, false, audio
}

// readLive reads a session's events until its close.
func readLive(ws *websocket.Conn) liveSession {
	var s liveSession
	for {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		typ, msg, err := ws.ReadMessage()
		if err != nil {
			if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
				s.closeCode = ce.Code
			} else {
				s.err = err
			}
			return s
		}
		var ev map[string]any
		if typ != websocket.TextMessage || json.Unmarshal(msg, &ev) != nil {
			s.err = fmt.Errorf("not a JSON event: %d %q", typ, msg)
			return s
		}
		s.events = append(s.events, ev)
	}
}

// check holds a session's events and close to the spec, and returns the
// status its client was given: 200 for a final, an error event's status,
// or 0 when it left without either.
func (s *liveSession) check(id string, left bool) (int, error) {
	if len(s.events) == 0 {
		if left {
			return 0, nil
		}
		return 0, errors.New("no session.started")
	}
	if first := s.events[0]; first["type"] != "session.started" || first["request_id"] != id || first["worker"] == nil {
		return 0, fmt.Errorf("first event %v, request %s", first, id)
	}
	status := 0
	for i, ev := range s.events[1:] {
		if status != 0 {
			return 0, fmt.Errorf("event %d after the session's outcome: %v", i+1, ev)
		}
		switch ev["type"] {
		case "transcript.partial":
			if _, ok := ev["text"].(string); !ok {
				return 0, fmt.Errorf("partial without text: %v", ev)
			}
		case "transcript.final":
			if _, ok := ev["text"].(string); !ok {
				return 0, fmt.Errorf("final without text: %v", ev)
			}
			status = http.StatusOK
		case "error":
			e, _ := ev["error"].(map[string]any)
			code, _ := e["code"].(string)
			msg, _ := e["message"].(string)
			st, _ := e["status"].(float64)
			if code == "" || msg == "" || !liveClientErrors[int(st)] {
				return 0, fmt.Errorf("error event %v", ev)
			}
			status = int(st)
		default:
			return 0, fmt.Errorf("event %v", ev)
		}
	}
	switch {
	case left && status == 0:
		return 0, nil
	case status == 0:
		return 0, fmt.Errorf("no final and no error event, close %d", s.closeCode)
	case s.err != nil && !errors.Is(s.err, io.EOF) && !left:
		return 0, fmt.Errorf("reading: %w", s.err)
	}
	want := websocket.CloseNormalClosure
	if status != http.StatusOK {
		want = websocket.ClosePolicyViolation
	}
	if s.closeCode != want && !left {
		return 0, fmt.Errorf("closed with %d after a %d, want %d", s.closeCode, status, want)
	}
	return status, nil
}

// checkLiveRefusal checks a refused handshake: the spec's answer to a
// client's mistake, with its request id and usage row.
func (g *inProcess) checkLiveRefusal(t *testing.T, query string, resp *http.Response) {
	t.Helper()
	if resp == nil {
		t.Fatalf("%q: a refused handshake without an answer", query)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: reading the refusal: %v", query, err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	if err := checkAnswer(a); err != nil || a.status == http.StatusOK {
		t.Fatalf("%q: %v\nstatus %d: %.2000s", query, err, a.status, a.body)
	}
	row, err := g.usageRow(a.header.Get("X-Request-Id"))
	if err != nil {
		t.Fatalf("%q (status %d): %v", query, a.status, err)
	}
	if got := row["status_code"]; got != float64(a.status) {
		t.Fatalf("%q: answered %d, logged %v: %v", query, a.status, got, row)
	}
}
