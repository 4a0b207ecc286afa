package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/link"
)

func chatBody(model, content string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream,
		"messages": []map[string]any{{"role": "user", "content": content}}})
	return string(b)
}

// content concatenates the delta contents of a streamed reply and checks
// the stream's shape: chunks, a usage chunk, then [DONE].
func streamContent(t *testing.T, body []byte) (string, int) {
	t.Helper()
	data := sseData(body)
	if len(data) < 2 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", tail(string(body)))
	}
	var b strings.Builder
	chunks := 0
	for _, d := range data[:len(data)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil || c.Error != nil {
			t.Fatalf("bad chunk %q (%v)", d, err)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
		chunks++
	}
	return b.String(), chunks
}

func tail(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}

func TestWorkerServesChatStreamingAndEmbeddings(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "gpu-1", "--engine", "sim=tps=0,ttft=0")

	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hello", false), bearer(key))
	if r.Status != 200 || r.Header.Get("X-Worker-Name") != "gpu-1" || !strings.HasPrefix(r.Header.Get("X-Worker-Id"), "wk_") {
		t.Fatalf("chat = %d %v %s", r.Status, r.Header, r.Body)
	}
	var comp struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Body, &comp); err != nil || comp.Object != "chat.completion" || comp.Choices[0].Message.Content == "" || comp.Usage.TotalTokens == 0 {
		t.Fatalf("completion %s", r.Body)
	}

	r = s.do("POST", "/api/v1/chat/completions", chatBody("sim-chat", "hello", true), bearer(key))
	if r.Status != 200 || r.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream = %d %v", r.Status, r.Header)
	}
	text, _ := streamContent(t, r.Body)
	if text != comp.Choices[0].Message.Content {
		t.Fatalf("streamed text differs from the non-streamed one:\n%q\n%q", text, comp.Choices[0].Message.Content)
	}

	r = s.do("POST", "/v1/embeddings", `{"model":"sim-embed","input":["a","b"]}`, bearer(key))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"object":"list"`) {
		t.Fatalf("embeddings = %d %s", r.Status, r.Body)
	}
	r = s.do("GET", "/v1/models", "", bearer(key))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"sim-reasoner"`) || !strings.Contains(string(r.Body), `"simulated":true`) {
		t.Fatalf("models = %d %s", r.Status, r.Body)
	}

	w := s.workerNamed(key, "gpu-1", statusIs("healthy"))
	if w["simulated"] != true || w["max_concurrent"].(float64) != 1 || w["version"] == "" {
		t.Fatalf("worker entry %v", w)
	}
	ev := s.waitEvent(key, "?event_type=connected", func(e map[string]any) bool { return e["worker_name"] == "gpu-1" })
	if ev["transient"] != false {
		t.Fatalf("connect event %v", ev)
	}
}

func TestUnknownModelAndNoWorker(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", true), bearer(key))
	if r.Status != 503 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("no worker online = %d %v %s", r.Status, r.Header, r.Body)
	}
	startWorker(t, s.URL, s.tokenFile(), "w", "--engine", "sim=tps=0,ttft=0")
	r = s.do("POST", "/v1/chat/completions", chatBody("llama-9000", "hi", true), bearer(key))
	if msg, _ := message(t, r); r.Status != 404 || !strings.Contains(msg, "llama-9000") {
		t.Fatalf("unknown model = %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/chat/completions", chatBody("sim-embed", "hi", false), bearer(key))
	if msg, _ := message(t, r); r.Status != 404 || !strings.Contains(msg, "/v1/embeddings") {
		t.Fatalf("embeddings model on chat = %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/chat/completions", `{"messages":[]}`, bearer(key))
	if r.Status != 422 || !strings.Contains(string(r.Body), `"field":"model"`) {
		t.Fatalf("missing model = %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/chat/completions", `{"model":`, bearer(key))
	if r.Status != 400 {
		t.Fatalf("malformed body = %d %s", r.Status, r.Body)
	}
}

func TestQueueHoldThen429AndCancelFreesSlot(t *testing.T) {
	s := startServer(t, "", "--queue-hold", "300ms")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "one-slot", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "1")

	// A long stream holds the only slot; its client then goes away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions",
		strings.NewReader(chatBody("sim-chat", "long\nsim: tokens=100000 tps=20", true)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	s.workerNamed(key, "one-slot", func(w map[string]any) bool { return w["active_tasks"].(float64) == 1 })

	start := time.Now()
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "second", false), bearer(key))
	if r.Status != 429 {
		t.Fatalf("busy worker = %d %s", r.Status, r.Body)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("429 after %v: the request was not held", d)
	}
	ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || ra < 1 || r.Header.Get("X-Svc-Queue-Depth") == "" {
		t.Fatalf("429 headers %v", r.Header)
	}
	if _, typ := message(t, r); typ != "rate_limit_exceeded" {
		t.Fatalf("429 type %q", typ)
	}
	// Its row has the wait it was refused after.
	if row := s.usageRow(key, r.Header.Get("X-Request-Id")); row["status_code"] != 429.0 {
		t.Fatalf("429 row %v", row)
	} else if w, _ := row["queue_wait_ms"].(float64); w < 250 {
		t.Fatalf("429 row's queue_wait_ms %v, want the 300 ms hold", row["queue_wait_ms"])
	}

	cancel()
	resp.Body.Close()
	freed := time.Now()
	s.workerNamed(key, "one-slot", func(w map[string]any) bool { return w["active_tasks"].(float64) == 0 })
	if d := time.Since(freed); d > 2*time.Second {
		t.Fatalf("slot freed %v after the client left", d)
	}
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "third", false), bearer(key)); r.Status != 200 {
		t.Fatalf("after the cancel = %d %s", r.Status, r.Body)
	}
}

func TestNonStreamingCancelStopsTheEngine(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "w", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions", strings.NewReader(chatBody("sim-chat", "wait\nsim: hang=1", false)))
	req.Header.Set("Authorization", "Bearer "+key)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("hanging request returned")
	}
	gone := time.Now()
	s.workerNamed(key, "w", func(w map[string]any) bool { return w["active_tasks"].(float64) == 0 })
	if d := time.Since(gone); d > 2*time.Second {
		t.Fatalf("slot freed %v after the client left", d)
	}
	// The request is in the usage log as a client cancel.
	var rows []map[string]any
	harness.Eventually(5*time.Second, func() bool {
		rows = nil
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs", "", bearer(key)).Body, &rows)
		return len(rows) > 0
	})
	if len(rows) != 1 || rows[0]["status_code"] != 499.0 || rows[0]["error_message"] != "Client disconnected" || rows[0]["stream"] != false {
		t.Fatalf("usage rows after a non-streaming cancel: %v", rows)
	}
}

func TestPinning(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "left", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "4")
	startWorker(t, s.URL, s.tokenFile(), "right", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "4")
	for _, w := range s.workers(key) {
		id := w["worker_id"].(string)
		for range 3 {
			r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key), header{"X-Svc-Worker-Id", id})
			if r.Status != 200 || r.Header.Get("X-Worker-Id") != id {
				t.Fatalf("pinned to %s, served by %s (%d)", id, r.Header.Get("X-Worker-Id"), r.Status)
			}
		}
	}
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key), header{"X-Svc-Worker-Id", "wk_nobody"})
	if r.Status != 404 {
		t.Fatalf("unknown pin = %d %s", r.Status, r.Body)
	}
}

func TestNonASCIIWorkerName(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "Grafikkarte-Süd", "--engine", "sim=tps=0,ttft=0")
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key))
	if got := r.Header.Get("X-Worker-Name"); got != "UTF-8''Grafikkarte-S%C3%BCd" {
		t.Fatalf("X-Worker-Name = %q", got)
	}
	s.workerNamed(key, "Grafikkarte-Süd", statusIs("healthy"))
}

// fakeOpenAI is an OpenAI-protocol engine that serves model shared-model,
// and fails every chat while failing is set.
type fakeOpenAI struct {
	srv     *httptest.Server
	name    string
	failing atomic.Bool
	chats   atomic.Int64
	// last is the body of the last chat it was sent.
	last atomic.Pointer[[]byte]
}

func newFakeOpenAI(t *testing.T, name string, failing bool) *fakeOpenAI {
	f := &fakeOpenAI{name: name}
	f.failing.Store(failing)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"shared-model","object":"model","owned_by":"vllm","max_model_len":4096}]}`)
		case "/v1/chat/completions":
			f.chats.Add(1)
			body, _ := io.ReadAll(r.Body)
			f.last.Store(&body)
			if f.failing.Load() {
				w.WriteHeader(500)
				_, _ = io.WriteString(w, `{"error":{"message":"engine exploded","type":"server_error"}}`)
				return
			}
			_, _ = fmt.Fprintf(w, `{"id":"x","object":"chat.completion","created":1,"model":"shared-model","choices":[{"index":0,"message":{"role":"assistant","content":"from %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, f.name)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func TestFailureBeforeOutputRetriesElsewhereAndHealthTurns(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	bad := newFakeOpenAI(t, "bad", true)
	good := newFakeOpenAI(t, "good", false)
	startWorker(t, s.URL, s.tokenFile(), "bad", "--engine", "openai="+bad.srv.URL)
	startWorker(t, s.URL, s.tokenFile(), "good", "--engine", "openai="+good.srv.URL)
	// Every request is answered by the good worker, whether or not the
	// bad one failed it first; the bad one is held back once its failures
	// have gone on for a second with no success between.
	unhealthy := func() bool {
		for _, w := range s.workers(key) {
			if w["worker_name"] == "bad" {
				return w["status"] == "unhealthy"
			}
		}
		return false
	}
	for i := 0; !unhealthy(); i++ {
		if i == 40 {
			t.Fatalf("the failing worker was not held back after %d requests over 10 s (tried %d times)", i, bad.chats.Load())
		}
		r := s.do("POST", "/v1/chat/completions", chatBody("shared-model", fmt.Sprint("q", i), false), bearer(key))
		if r.Status != 200 || !strings.Contains(string(r.Body), "from good") {
			t.Fatalf("request %d = %d %s", i, r.Status, r.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if bad.chats.Load() == 0 {
		t.Fatal("the failing worker was never tried, so no retry was exercised")
	}
	s.waitEvent(key, "?event_type=health_changed", func(e map[string]any) bool {
		return e["worker_name"] == "bad" && e["metadata"].(map[string]any)["to"] == "unhealthy"
	})
	tried := bad.chats.Load()
	for range 3 {
		s.do("POST", "/v1/chat/completions", chatBody("shared-model", "more", false), bearer(key))
	}
	if bad.chats.Load() != tried {
		t.Fatal("an unhealthy worker still got traffic")
	}
}

func TestOrganisationIsolation(t *testing.T) {
	s := startServer(t, "")
	defaultKey := s.adminKey()
	acmeKey, tokFile := secondOrg(t, s)
	startWorker(t, s.URL, s.tokenFile(), "default-gpu", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "8")
	startWorker(t, s.URL, tokFile, "acme-gpu", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "8")

	for _, tc := range []struct{ key, want string }{{defaultKey, "default-gpu"}, {acmeKey, "acme-gpu"}} {
		ws := s.workers(tc.key)
		if len(ws) != 1 || ws[0]["worker_name"] != tc.want {
			t.Fatalf("workers seen: %v", ws)
		}
		for range 10 {
			r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "whose?", false), bearer(tc.key))
			if r.Status != 200 || r.Header.Get("X-Worker-Name") != tc.want {
				t.Fatalf("request of %s's org served by %q", tc.want, r.Header.Get("X-Worker-Name"))
			}
		}
	}
	other := s.workers(acmeKey)[0]["worker_id"].(string)
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "x", false), bearer(defaultKey), header{"X-Svc-Worker-Id", other}); r.Status != 404 {
		t.Fatalf("pin to another org's worker = %d", r.Status)
	}
	if r := s.do("GET", "/api/v1/workers/"+other+"/power", "", bearer(defaultKey)); r.Status != 404 {
		t.Fatalf("another org's worker power = %d", r.Status)
	}
	s.waitEvent(acmeKey, "", func(e map[string]any) bool { return e["worker_name"] == "acme-gpu" })
	s.waitEvent(defaultKey, "", func(e map[string]any) bool { return e["worker_name"] == "default-gpu" })
	if evs := s.events(defaultKey, ""); strings.Contains(fmt.Sprint(evs), "acme-gpu") {
		t.Fatalf("events leak across organisations: %v", evs)
	}
}

// TestChaosByteExact cuts the worker's link many times during long streams
// and checks every client receives exactly what an uninterrupted run gives.
func TestChaosByteExact(t *testing.T) {
	s := startServer(t, "", "--worker-grace", "20s")
	key := s.adminKey()
	p := newProxy(t, strings.TrimPrefix(s.URL, "http://"))
	startWorker(t, p.URL(), s.tokenFile(), "flaky", "--engine", "sim=tps=1500,ttft=0", "--max-concurrent", "8")

	const streams = 6
	prompt := func(i int) string { return fmt.Sprintf("story %d\nsim: tokens=1500", i) }
	// Reference runs with the link left alone.
	want := make([]string, streams)
	refs := make([]<-chan reply, streams)
	for i := range streams {
		refs[i] = s.async("POST", "/v1/chat/completions", chatBody("sim-chat", prompt(i), true), bearer(key))
	}
	for i := range streams {
		r := <-refs[i]
		if r.Status != 200 {
			t.Fatalf("reference stream %d = %d %s", i, r.Status, r.Body)
		}
		want[i], _ = streamContent(t, r.Body)
		if len(want[i]) < 5000 {
			t.Fatalf("reference stream %d is short: %d bytes", i, len(want[i]))
		}
	}

	var wg sync.WaitGroup
	replies := make([]reply, streams)
	for i := range streams {
		wg.Go(func() {
			replies[i] = <-s.async("POST", "/v1/chat/completions", chatBody("sim-chat", prompt(i), true), bearer(key))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	cuts := 0
	rng := rand.New(rand.NewPCG(3, 4))
loop:
	for {
		select {
		case <-done:
			break loop
		case <-time.After(time.Duration(50+rng.IntN(100)) * time.Millisecond):
			if p.cut() > 0 {
				cuts++
			}
		}
	}
	if cuts < 3 {
		t.Fatalf("only %d cuts landed during the streams", cuts)
	}
	for i := range streams {
		if replies[i].Status != 200 {
			t.Fatalf("stream %d = %d %s\nserver log:\n%s", i, replies[i].Status, replies[i].Body, tail(s.Log().String()))
		}
		got, chunks := streamContent(t, replies[i].Body)
		if got != want[i] {
			t.Fatalf("stream %d differs after %d cuts: got %d bytes, want %d", i, cuts, len(got), len(want[i]))
		}
		if chunks != 1502 {
			t.Fatalf("stream %d has %d chunks, want 1500, the usage chunk and the svc chunk", i, chunks)
		}
	}
	t.Logf("%d link cuts during %d streams; every byte arrived once", cuts, streams)
	s.waitEvent(key, "?event_type=disconnected", func(e map[string]any) bool { return e["transient"] == true })
}

func TestWorkerDrainFinishesRunningRequests(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	w := startWorker(t, s.URL, s.tokenFile(), "leaving", "--engine", "sim=tps=100,ttft=0")
	res := s.async("POST", "/v1/chat/completions", chatBody("sim-chat", "finish me\nsim: tokens=80", false), bearer(key))
	s.workerNamed(key, "leaving", func(w map[string]any) bool { return w["active_tasks"].(float64) == 1 })
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.Status != 200 || !strings.Contains(string(r.Body), `"completion_tokens":80`) {
		t.Fatalf("request running at SIGTERM = %d %s", r.Status, r.Body)
	}
	if err := w.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	gone := s.workerNamed(key, "leaving", statusIs("offline"))
	s.waitEvent(key, "?event_type=draining", func(map[string]any) bool { return true })
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "after", false), bearer(key)); r.Status != 503 {
		t.Fatalf("with the only worker gone = %d", r.Status)
	}
	// Pinned to the worker that left: 503 naming why, not 404.
	r = s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "pinned", false), bearer(key), header{"X-Svc-Worker-Id", gone["worker_id"].(string)})
	if r.Status != 503 || !strings.Contains(string(r.Body), "worker_offline") {
		t.Fatalf("pinned to an offline worker = %d %s", r.Status, r.Body)
	}
}

func TestLostWorkerMovesOrFails(t *testing.T) {
	s := startServer(t, "", "--worker-grace", "500ms")
	key := s.adminKey()
	// The first worker's engine takes 30s to its first token.
	first := startWorker(t, s.URL, s.tokenFile(), "first", "--engine", "sim=tps=0,ttft=30s")
	// No output yet when the worker dies: the request moves.
	res := s.async("POST", "/v1/chat/completions", chatBody("sim-chat", "slow start", false), bearer(key))
	s.workerNamed(key, "first", func(w map[string]any) bool { return w["active_tasks"].(float64) == 1 })
	secondProc := startWorker(t, s.URL, s.tokenFile(), "second", "--engine", "sim=tps=0,ttft=0")
	_ = first.stop(syscall.SIGKILL)
	r := <-res
	if r.Status != 200 || r.Header.Get("X-Worker-Name") != "second" {
		t.Fatalf("moved request = %d %s %s", r.Status, r.Header.Get("X-Worker-Name"), r.Body)
	}
	s.workerNamed(key, "first", statusIs("offline"))
	s.waitEvent(key, "?event_type=disconnected", func(e map[string]any) bool { return e["worker_name"] == "first" && e["transient"] == false })

	// Output already sent: the stream ends with a 503 naming the worker.
	s.workerNamed(key, "second", statusIs("healthy"))
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(chatBody("sim-chat", "long\nsim: tokens=100000 tps=50", true)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	_ = secondProc.stop(syscall.SIGKILL)
	body, _ := io.ReadAll(resp.Body)
	data := sseData(append(buf, body...))
	if len(data) < 2 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], `"error"`) ||
		!strings.Contains(data[len(data)-2], "second") || !strings.Contains(data[len(data)-2], "503") && !strings.Contains(data[len(data)-2], "service_unavailable") {
		t.Fatalf("stream after its worker died ends with %q", data[max(0, len(data)-2):])
	}
	if frame := data[len(data)-2]; !strings.Contains(frame, `"code":"worker_lost"`) || !strings.Contains(frame, `"retry_after":1`) {
		t.Fatalf("lost-worker frame lacks its code or retry_after: %s", frame)
	}
}

// TestLostWorkerWithNoOtherNamesIt: a request whose only worker dies
// while it runs fails as the lost worker's, whether or not it streams;
// that no other worker is online is why it is not moved, not why it
// failed.
func TestLostWorkerWithNoOtherNamesIt(t *testing.T) {
	s := startServer(t, "", "--worker-grace", "500ms")
	key := s.adminKey()
	w := startWorker(t, s.URL, s.tokenFile(), "only", "--engine", "sim=ttft=0", "--max-concurrent", "2")
	unary := s.async("POST", "/v1/chat/completions", chatBody("sim-chat", "long\nsim: tokens=100000 tps=50", false), bearer(key))
	// A stream the worker never answers: nothing has been sent when it dies.
	stream := s.async("POST", "/v1/chat/completions", chatBody("sim-chat", "silent\nsim: hang=1", true), bearer(key))
	s.workerNamed(key, "only", func(w map[string]any) bool { return w["active_tasks"].(float64) == 2 })
	_ = w.stop(syscall.SIGKILL)
	r := <-unary
	msg, _ := message(t, r)
	if r.Status != 503 || !strings.Contains(msg, "only") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("non-streaming request after its only worker died = %d %s", r.Status, r.Body)
	}
	// A stream its worker failed is billed the estimate of the text it
	// sent (and had back: none here), the spec's rule for usage rows.
	defer func() {
		row := s.usageRow(key, r.Header.Get("X-Request-Id"))
		if row["status_code"] != 503.0 || row["prompt_tokens"].(float64) < 1 || row["completion_tokens"] != 0.0 || row["tokens_estimated"] != true {
			t.Errorf("row of the stream its worker failed: %v", row)
		}
	}()
	// Killed before the stream's first wait was over, it is a plain 503.
	if r = <-stream; r.Status == 503 {
		if msg, _ := message(t, r); !strings.Contains(msg, "only") {
			t.Fatalf("stream after its only worker died = %d %s", r.Status, r.Body)
		}
		return
	}
	data := sseData(r.Body)
	if r.Status != 200 || len(data) < 2 || data[len(data)-1] != "[DONE]" ||
		!strings.Contains(data[len(data)-2], `"code":"worker_lost"`) || !strings.Contains(data[len(data)-2], "only") {
		t.Fatalf("stream after its only worker died = %d %q", r.Status, data)
	}
}

func TestBadWorkerTokenExits(t *testing.T) {
	s := startServer(t, "")
	f := filepath.Join(t.TempDir(), "bad.token")
	_ = os.WriteFile(f, []byte("svc_w_AAAAAAAAAAAA_"+strings.Repeat("A", 40)), 0o600)
	_, stderr, code := svc(t, nil, "worker", "--gateway", s.URL, "--token-file", f, "--engine", "sim", "--name", "x")
	// Status 8: refused for good, which its unit does not restart on.
	if code != 8 || !strings.Contains(stderr, "401") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if strings.Contains(stderr, "process list") || strings.Contains(stderr, "other users") {
		t.Fatalf("a token from a private file drew a warning:\n%s", stderr)
	}
	// A file others may read is said to be one.
	_ = os.Chmod(f, 0o644)
	if _, stderr, _ = svc(t, nil, "worker", "--gateway", s.URL, "--token-file", f, "--engine", "sim", "--name", "x"); !strings.Contains(stderr, "may be read by other users") {
		t.Fatalf("no warning for a token file others may read:\n%s", stderr)
	}
	// A token on the command line is in the process list for every local
	// user to read: the worker says so; from the environment it is not.
	bad := "svc_w_AAAAAAAAAAAA_" + strings.Repeat("B", 40)
	_, stderr, _ = svc(t, nil, "worker", "--gateway", s.URL, "--token", bad, "--engine", "sim", "--name", "x")
	if !strings.Contains(stderr, "process list") {
		t.Fatalf("no warning for a token on the command line:\n%s", stderr)
	}
	_, stderr, _ = svc(t, []string{"SVC_WORKER_TOKEN=" + bad}, "worker", "--gateway", s.URL, "--engine", "sim", "--name", "x")
	if strings.Contains(stderr, "process list") {
		t.Fatalf("a token from the environment drew the --token warning:\n%s", stderr)
	}
}

func TestOpenAIAdapterAgainstSimProcess(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	engine := startSim(t, "tps=0,ttft=0,timings=1")
	// The engine's password (sent as basic auth, which svc sim ignores)
	// is the worker's to use, and no one's to read.
	engine = strings.Replace(engine, "://", "://svc:engine-pw@", 1)
	wp := startWorker(t, s.URL, s.tokenFile(), "vllm-box", "--engine", "openai="+engine)
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-reasoner", "think", true), bearer(key))
	text, _ := streamContent(t, r.Body)
	if r.Status != 200 || text == "" || strings.Contains(string(r.Body), "timings") {
		t.Fatalf("through the openai adapter = %d %s", r.Status, tail(string(r.Body)))
	}
	if !strings.Contains(string(r.Body), `"reasoning_content"`) || !strings.Contains(string(r.Body), `"reasoning"`) {
		t.Fatalf("reasoning not mirrored on both names: %s", tail(string(r.Body)))
	}
	// svc sim names itself in its models list, and is labelled a
	// simulator reached through the openai adapter too.
	w := s.workerNamed(key, "vllm-box", statusIs("healthy"))
	if w["simulated"] != true {
		t.Fatalf("a worker on svc sim is not labelled simulated: %v", w)
	}
	if listed := s.do("GET", "/api/v1/workers", "", bearer(key)); strings.Contains(string(listed.Body), "engine-pw") ||
		strings.Contains(wp.Log().String(), "engine-pw") || !strings.Contains(string(listed.Body), "svc:xxxxx@") {
		t.Fatalf("the engine's password is shown: %s\n%s", listed.Body, wp.Log())
	}
}

func TestEngineFailureStatuses(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "a", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "4")
	startWorker(t, s.URL, s.tokenFile(), "b", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "4")
	tests := []struct {
		directive string
		status    int
		typ       string
	}{
		{"fail=507", 507, "insufficient_memory_error"},
		{"fail=501", 501, "not_supported_error"},
		{"fail=400", 400, "invalid_request_error"},
		// Both workers fail the same way, so the retry ends in the same 503.
		{"fail=503", 503, ""},
	}
	for _, tt := range tests {
		t.Run(tt.directive, func(t *testing.T) {
			// A worker's own answer names it, failure or not; one tried
			// on both workers names neither.
			named := func(r reply) {
				t.Helper()
				id, name := r.Header.Get("X-Worker-Id"), r.Header.Get("X-Worker-Name")
				if tt.typ != "" && (!strings.HasPrefix(id, "wk_") || name != "a" && name != "b") {
					t.Fatalf("%s answered by %q (%q), want the worker named", tt.directive, name, id)
				}
			}
			r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "x\nsim: "+tt.directive, false), bearer(key))
			_, typ := message(t, r)
			if r.Status != tt.status || (tt.typ != "" && typ != tt.typ) {
				t.Fatalf("%s = %d %s", tt.directive, r.Status, r.Body)
			}
			named(r)
			// The same, streamed: known before any output, so a plain HTTP error.
			r = s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "x\nsim: "+tt.directive, true), bearer(key))
			if r.Status != tt.status {
				t.Fatalf("streamed %s = %d %s", tt.directive, r.Status, r.Body)
			}
			named(r)
		})
	}
	// Cut off after output: the stream ends with a 502 error frame.
	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "x\nsim: fail=cut after=5", true), bearer(key))
	data := sseData(r.Body)
	if r.Status != 200 || len(data) < 7 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], "lost in transit") {
		t.Fatalf("cut stream = %d %q", r.Status, data)
	}
	// The metrics count it as what it was, a 502, beside the 200 it began
	// with, so that alerts on failures see streams too.
	m := string(s.do("GET", "/metrics", "").Body)
	for _, want := range []string{`svc_requests_total{request_type="chat",status="502"} 1`, `svc_http_requests_total{method="POST",route="/v1/chat/completions",status="200"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Timed by the model the workers served, a stream cut off after its
	// first token included.
	const firstTokens = `svc_inference_time_to_first_token_seconds_count{model="sim-chat",request_type="chat"} `
	if _, rest, ok := strings.Cut(m, firstTokens); !ok || strings.HasPrefix(rest, "0\n") || rest == "" || rest[0] < '0' || rest[0] > '9' {
		t.Errorf("metrics count no first token for sim-chat: %q", firstTokens)
	}
}

// A model sent to an endpoint it does not serve gets the spec's 404, whose
// message names the endpoint that does, under either prefix.
func TestWrongEndpointNamesTheRightOne(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "kinds", "--engine", "sim=tps=0,ttft=0")
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"sim-embed","messages":[{"role":"user","content":"hi"}]}`, "it is an embeddings model: use /v1/embeddings"},
		{"/api/v1/embeddings", `{"model":"sim-chat","input":"hi"}`, "it is a chat model: use /v1/chat/completions"},
		{"/v1/audio/speech", `{"model":"sim-stt","input":"hi"}`, "it is a transcription model: use /v1/audio/transcriptions"},
		{"/v1/chat/completions", `{"model":"sim-tts","messages":[{"role":"user","content":"hi"}]}`, "it is a speech model: use /v1/audio/speech"},
		{"/v1/chat/completions", `{"model":"sim-rerank","messages":[{"role":"user","content":"hi"}]}`, "it is a reranking model: use /v1/rerank"},
		{"/api/v1/chat/completions", `{"model":"sim-image","messages":[{"role":"user","content":"hi"}],"stream":true}`, "it is an image generation model: use /v1/images/generations"},
		{"/v1/rerank", `{"model":"sim-chat","query":"q","documents":["a"]}`, "does not do reranking; it is a chat model: use /v1/chat/completions"},
		{"/api/v1/rerank", `{"model":"sim-image","query":"q","documents":["a"]}`, "it is an image generation model: use /v1/images/generations"},
		{"/v1/images/generations", `{"model":"sim-chat","prompt":"a fox"}`, "does not do image generation; it is a chat model: use /v1/chat/completions"},
		{"/api/v1/images/generations", `{"model":"sim-rerank","prompt":"a fox"}`, "it is a reranking model: use /v1/rerank"},
		{"/v1/embeddings", `{"model":"sim-rerank","input":"hi"}`, "it is a reranking model: use /v1/rerank"},
	} {
		r := s.do("POST", tc.path, tc.body, bearer(key))
		if r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), tc.want) || !strings.Contains(string(r.Body), "wrong_endpoint") {
			t.Errorf("POST %s %s = %d %s, want 404 saying %q", tc.path, tc.body, r.Status, r.Body, tc.want)
		}
	}
}

// An engine's own 429 reaches the client with a Retry-After: the engine's
// figure when it sent one, otherwise a second.
func TestEngineRateLimitCarriesRetryAfter(t *testing.T) {
	var retryAfter atomic.Value
	retryAfter.Store("7")
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"busy-model","object":"model","owned_by":"vllm"}]}`)
		case "/v1/chat/completions":
			if v := retryAfter.Load().(string); v != "" {
				w.Header().Set("Retry-After", v)
			}
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"too many requests in the engine","type":"rate_limit_error"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(engine.Close)
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "busy", "--engine", "openai="+engine.URL)
	for _, tt := range []struct{ sent, want string }{{"7", "7"}, {"", "1"}, {"soon", "1"}} {
		retryAfter.Store(tt.sent)
		r := s.do("POST", "/v1/chat/completions", chatBody("busy-model", "hi", false), bearer(key))
		if r.Status != 429 || r.Header.Get("Retry-After") != tt.want || !strings.Contains(string(r.Body), "too many requests in the engine") {
			t.Fatalf("engine Retry-After %q: %d, Retry-After %q, %s", tt.sent, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
	}
}

// Requests waiting for a model only one worker serves show in that
// worker's queue_depth, and leave it once served.
func TestQueueDepthOfTheOnlyWorker(t *testing.T) {
	s := startServer(t, "", "--queue-hold", "30s")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "lone", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "1")
	busy := s.async("POST", "/v1/chat/completions", chatBody("sim-chat", "hold\nsim: ttft=2s", false), bearer(key))
	s.workerNamed(key, "lone", func(w map[string]any) bool { return w["active_tasks"] == 1.0 })
	var waiting []<-chan reply
	for i := range 3 {
		waiting = append(waiting, s.async("POST", "/v1/chat/completions", chatBody("sim-chat", fmt.Sprint("wait ", i), false), bearer(key)))
	}
	s.workerNamed(key, "lone", func(w map[string]any) bool { return w["queue_depth"] == 3.0 })
	for _, ch := range append(waiting, busy) {
		if r := <-ch; r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	s.workerNamed(key, "lone", func(w map[string]any) bool { return w["queue_depth"] == 0.0 })
}

// A request that found its model unloaded and waited for the load is a
// model_loaded event of its worker, with how long the load took.
func TestColdLoadIsAnEvent(t *testing.T) {
	s, key := gateway(t)
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-cold", "hi", false), bearer(key)); r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	ev := s.waitEvent(key, "?event_type=model_loaded", func(e map[string]any) bool {
		m, _ := e["metadata"].(map[string]any)
		return e["worker_name"] == "sim-box" && m["model"] == "sim-cold" && m["model_load_ms"] != nil
	})
	if ms := ev["metadata"].(map[string]any)["model_load_ms"].(float64); ms <= 0 {
		t.Fatalf("event %v", ev)
	}
	// A warm model loads nothing.
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-cold", "again", false), bearer(key)); r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var evs []map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/workers/events?event_type=model_loaded", "", bearer(key)).Body, &evs)
	if len(evs) != 1 {
		t.Fatalf("%d model_loaded events after a warm request: %v", len(evs), evs)
	}
}

// A worker's link cut and resumed is a transient disconnect and two
// health changes, healthy -> stale and stale -> healthy; a worker started
// again with other flags is a settings_changed event by its operator.
func TestRecoveredDropAndSettingsEvents(t *testing.T) {
	s := startServer(t, "", "--worker-grace", "20s")
	key := s.adminKey()
	p := newProxy(t, strings.TrimPrefix(s.URL, "http://"))
	w := startWorker(t, p.URL(), s.tokenFile(), "flaky", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "2")
	s.workerNamed(key, "flaky", statusIs("healthy"))
	if p.cut() == 0 {
		t.Fatal("nothing to cut")
	}
	s.waitEvent(key, "?event_type=disconnected", func(e map[string]any) bool { return e["worker_name"] == "flaky" && e["transient"] == true })
	s.waitEvent(key, "?event_type=health_changed", func(e map[string]any) bool {
		m, _ := e["metadata"].(map[string]any)
		return e["worker_name"] == "flaky" && m["from"] == "stale" && m["to"] == "healthy"
	})

	_ = w.stop(syscall.SIGTERM)
	w.wait(10 * time.Second)
	startWorker(t, s.URL, s.tokenFile(), "flaky", "--engine", "sim=tps=0,ttft=0", "--max-concurrent", "5")
	ev := s.waitEvent(key, "?event_type=settings_changed", func(e map[string]any) bool { return e["worker_name"] == "flaky" })
	mc, _ := ev["metadata"].(map[string]any)["max_concurrent"].(map[string]any)
	if ev["actor"] != "svc worker" || mc["from"] != 2.0 || mc["to"] != 5.0 {
		t.Fatalf("settings event %v", ev)
	}
}

// A worker token's holder cannot connect without end: past a burst as
// large as the fleet (at least 1,024) the organisation's links are let in
// at --worker-connect-rate, and the rest are answered 429 with Retry-After
// before the upgrade. A real worker told so waits and connects.
func TestWorkerConnectionsAreRateLimited(t *testing.T) {
	s := startServer(t, "", "--worker-connect-rate", "0.25")
	tok, err := os.ReadFile(s.tokenFile())
	if err != nil {
		t.Fatal(err)
	}
	u := "ws" + strings.TrimPrefix(s.URL, "http") + link.Path
	hdr := http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(tok))}}
	var refused *http.Response
	var n int
	for n = 0; n < 1100; n++ {
		ws, resp, err := websocket.DefaultDialer.Dial(u, hdr)
		if err == nil {
			_ = ws.Close()
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("connection %d: %v %+v", n+1, err, resp)
		}
		refused = resp
		break
	}
	if refused == nil || n < 1024 {
		t.Fatalf("refused after %d connections (%v), want after the burst of 1,024", n, refused)
	}
	body, _ := io.ReadAll(refused.Body)
	_ = refused.Body.Close()
	if secs, err := strconv.Atoi(refused.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 4 {
		t.Fatalf("Retry-After %q, want the 4 s a link takes at 0.25 a second", refused.Header.Get("Retry-After"))
	}
	var e struct{ Detail string }
	if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Detail, "retry in") {
		t.Fatalf("429 body %s", body)
	}
	// A worker started now is told to wait, and connects after it,
	// instead of exiting as a refusal for good would have it.
	wp := launchWorker(t, s.URL, s.tokenFile(), "patient", "--engine", "sim")
	rec := wp.waitLog("gateway link down", 15*time.Second)
	if e, _ := rec["err"].(string); !strings.Contains(e, "429") {
		t.Fatalf("the worker's link failed with %q, want the 429", e)
	}
	wp.waitLog("connected to the gateway", 15*time.Second)
	s.workerNamed(s.adminKey(), "patient", statusIs("healthy"))
}

// An engine that stops in the middle of a streamed answer, and answers
// no probe either, no longer holds the request and its slot until the
// client gives up: the worker cuts the answer off after its limit and a
// probe, the client's stream ends with the error, and the row says 502.
func TestEngineStoppedMidStreamIsCutOff(t *testing.T) {
	var stuck atomic.Bool
	release := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"stopping-model","object":"model","owned_by":"vllm"}]}`)
		case "/v1/chat/completions":
			if stuck.Load() {
				// A probe, or a request after the answer stopped.
				select {
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				_, _ = fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"stopping-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
				w.(http.Flusher).Flush()
			}
			stuck.Store(true)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(release); engine.Close() })
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "stopping", "--engine", "openai="+engine.URL, "--engine-ttfb", "1s")
	start := time.Now()
	r := s.do("POST", "/v1/chat/completions", chatBody("stopping-model", "hi", true), bearer(key))
	took := time.Since(start)
	if r.Status != 200 || !strings.Contains(string(r.Body), "tok2") || !strings.Contains(string(r.Body), "in the middle of its answer") ||
		!strings.HasSuffix(strings.TrimSpace(string(r.Body)), "data: [DONE]") {
		t.Fatalf("stream: %d %s", r.Status, r.Body)
	}
	// The limit passes once with output and once without, then the probe's.
	if took > 20*time.Second {
		t.Errorf("cut off after %v", took)
	}
	if row := waitRow(t, s, key, r.Header.Get("X-Request-Id")); row["status_code"] != float64(502) {
		t.Fatalf("row %v", row)
	}
}

// A chat that leaves its sampling values out runs at the model's
// recommended ones, as the models list shows them, and at temperature 1.0
// where it recommends none, not at whatever the engine would choose.
func TestSamplingDefaultsReachTheEngine(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	meta := filepath.Join(t.TempDir(), "meta.json")
	if err := os.WriteFile(meta, []byte(`{"shared-model":{"sampling_defaults":{"temperature":0.6,"top_p":0.8}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eng := newFakeOpenAI(t, "e", false)
	startWorker(t, s.URL, s.tokenFile(), "w", "--engine", "openai="+eng.srv.URL, "--model-meta", meta)
	listed := s.do("GET", "/v1/models/shared-model", "", bearer(key))
	if !strings.Contains(string(listed.Body), `"sampling_defaults":{"temperature":0.6,"top_p":0.8}`) {
		t.Fatalf("listing %d %s", listed.Status, listed.Body)
	}
	for _, tc := range []struct {
		extra string
		want  map[string]any
	}{
		{"", map[string]any{"temperature": 0.6, "top_p": 0.8}},
		{`,"temperature":0.2`, map[string]any{"temperature": 0.2, "top_p": 0.8}},
		{`,"temperature":null,"top_p":1`, map[string]any{"temperature": 0.6, "top_p": 1.0}},
	} {
		r := s.do("POST", "/v1/chat/completions", `{"model":"shared-model","messages":[{"role":"user","content":"hi"}]`+tc.extra+`}`, bearer(key))
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.extra, r.Status, r.Body)
		}
		var got map[string]any
		if err := json.Unmarshal(*eng.last.Load(), &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Fatalf("%q: the engine got %s; want %s %v", tc.extra, *eng.last.Load(), k, v)
			}
		}
	}
}
