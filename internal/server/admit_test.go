package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/link/linktest"
	"github.com/svc-dev/svc/internal/relay"
)

type rowLog struct {
	mu   sync.Mutex
	rows []api.UsageRow
}

func (l *rowLog) Record(_ string, row api.UsageRow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, row)
}

// connectWorker attaches a worker serving models to f under org; it
// answers nothing, which these tests never ask of it.
func connectWorker(t testing.TB, ctx context.Context, f *fleet.Fleet, org string, maxConc int, models ...api.Model) {
	t.Helper()
	sess := link.NewSession(link.Options{Role: link.Worker, Accept: func(context.Context, *link.Stream) {}})
	t.Cleanup(func() { sess.Close(nil) })
	gc, wc := linktest.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = f.Connect(ctx, org, api.Hello{Protocol: link.Protocol, Name: "w", Version: "v1", MaxConcurrent: maxConc,
			SessionID: uuid.NewString(), Models: models, Streams: sess.RecvState()}, gc)
	})
	t.Cleanup(wg.Wait)
	msg, err := wc.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	fr, _, err := link.DecodeFrame(msg)
	if err != nil {
		t.Fatal(err)
	}
	var w api.Welcome
	if err := json.Unmarshal(fr.Payload, &w); err != nil || w.Error != "" {
		t.Fatalf("welcome %+v %v", w, err)
	}
	if _, err := sess.Attach(wc, w.Streams); err != nil {
		t.Fatal(err)
	}
}

// backUp leaves model's queue in org backed up on f: its one slot busy,
// served slower than the hold, and one request waiting. release undoes it.
func backUp(t testing.TB, ctx context.Context, f *fleet.Fleet, org, model string, hold time.Duration) (release func()) {
	t.Helper()
	need := fleet.Need{OrgID: org, Model: model, Capability: api.CapChat}
	l, err := f.Acquire(ctx, need)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * hold)
	l.Release(fleet.Succeeded)
	busy, err := f.Acquire(ctx, need)
	if err != nil {
		t.Fatal(err)
	}
	waiting := need
	waiting.Hold = time.Minute
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l, err := f.Acquire(ctx, waiting); err == nil {
			l.Release(fleet.Neutral)
		}
	}()
	for f.Admit(need) == nil {
		time.Sleep(time.Millisecond)
	}
	return func() {
		busy.Release(fleet.Neutral)
		<-done
	}
}

// A backed-up model's request is refused before its body is parsed: a
// body the parse would reject with a 422 gets the capacity 429, with its
// headers, and the connection serves the next request. A streamed one
// gets it as a late capacity 429 is sent: a 200 whose one event is the
// error, then [DONE].
func TestBackedUpModelIsRefusedBeforeTheParse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hold = 20 * time.Millisecond
	f := fleet.New(fleet.Config{Hold: hold})
	connectWorker(t, ctx, f, "", 1, api.Model{ID: "m", Capabilities: []string{api.CapChat}, Engine: "sim"},
		api.Model{ID: "other", Capabilities: []string{api.CapChat}, Engine: "sim"})
	rows := &rowLog{}
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(buildinfo.Info{}), fleet: f,
		relay: relay.New(relay.Config{Fleet: f, Usage: rows})}
	parses := 0
	s.public = s.newListener(newMux([]*route{{method: "POST", path: "/v1/chat/completions", access: accessPublic,
		compatible: true, handle: s.admitted(api.KindChat, true, nil, func(c *call) error {
			parses++
			return s.chatCompletions(c)
		})}}), false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.ServePublic(ln) })
	defer func() {
		_ = s.public.srv.Shutdown()
		wg.Wait()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	var got []byte
	post := func(model string, stream bool) *http.Response {
		t.Helper()
		body := `{"model":"` + model + `","stream":` + strconv.FormatBool(stream) + `,"messages":"not a list"}`
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err = io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp
	}

	release := backUp(t, ctx, f, "", "m", hold)
	resp := post("m", false)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("X-Svc-Queue-Depth") != "1" || resp.Close || parses != 0 {
		t.Fatalf("backed up: %d %v close=%v parses=%d", resp.StatusCode, resp.Header, resp.Close, parses)
	}
	resp = post("m", true)
	want := regexp.MustCompile(`^data: \{"error":\{[^\n]*"code":"capacity_exceeded"[^\n]*"queue_depth":1[^\n]*"retry_after":[1-9][^\n]*"status":429[^\n]*\}\}\n\ndata: \[DONE\]\n\n$`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || !want.Match(got) || resp.Close || parses != 0 {
		t.Fatalf("backed up, streamed: %d %v close=%v parses=%d\n%s", resp.StatusCode, resp.Header, resp.Close, parses, got)
	}
	rows.mu.Lock()
	if len(rows.rows) != 2 || rows.rows[0].StatusCode != http.StatusTooManyRequests || rows.rows[0].Model != "m" ||
		rows.rows[1].StatusCode != http.StatusTooManyRequests || !rows.rows[1].Stream {
		t.Fatalf("rows %+v", rows.rows)
	}
	rows.mu.Unlock()
	// Another model on the same connection goes the full path.
	if resp := post("other", true); resp.StatusCode != http.StatusUnprocessableEntity || parses != 1 {
		t.Fatalf("other model: %d parses=%d", resp.StatusCode, parses)
	}
	release()
	if resp := post("m", true); resp.StatusCode != http.StatusUnprocessableEntity || parses != 2 {
		t.Fatalf("drained: %d parses=%d", resp.StatusCode, parses)
	}
}
