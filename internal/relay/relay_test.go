package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/chat"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/usage"
)

func TestUnaryCompletesTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		w := h.worker("gpu-1", 4, answer("hello there", 300*time.Millisecond))
		rep, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if err != nil {
			t.Fatal(err)
		}
		if rep.Late != nil || rep.Worker == nil || rep.Worker.ID != w.id || rep.ContentType != "application/json" {
			t.Fatalf("reply %+v", rep)
		}
		var body struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Svc struct {
				Worker    struct{ ID, Name string } `json:"worker"`
				RequestID string                    `json:"request_id"`
				Timing    struct {
					QueueWaitMs *float64 `json:"queue_wait_ms"`
				} `json:"timing"`
			} `json:"svc"`
		}
		if err := json.Unmarshal(rep.Body, &body); err != nil {
			t.Fatalf("%v: %s", err, rep.Body)
		}
		if body.Choices[0].Message.Content != "hello there" || body.Usage.PromptTokens != 7 || body.Usage.CompletionTokens != 2 ||
			body.Svc.Worker.ID != w.id || body.Svc.Worker.Name != "gpu-1" || body.Svc.RequestID != "req-1" || body.Svc.Timing.QueueWaitMs == nil {
			t.Fatalf("body %s", rep.Body)
		}
		if !strings.Contains(rep.ServerTiming, "queue;dur=") {
			t.Fatalf("Server-Timing %q", rep.ServerTiming)
		}
		row := h.only()
		if row.ID != "req-1" || row.StatusCode != 200 || row.ErrorMessage != nil || string(row.WorkerID) != w.id || row.Attempts != 1 ||
			row.PromptTokens != 7 || row.CompletionTokens != 2 || row.TokensEstimated || row.RequestType != api.RequestChat ||
			row.APIKeyID != "key-1" || row.RequestDurationMs != 300 {
			t.Fatalf("row %+v", row)
		}
		if n := h.inFlight(); n != 0 {
			t.Fatalf("%d requests still in flight", n)
		}
	})
}

func TestUnaryMovesToAnotherWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		// Whichever worker is tried first fails; the other answers.
		var first string
		serve := func(name string) serveFunc {
			return func(ctx context.Context, st *link.Stream, req api.LinkRequest, body []byte) {
				if first == "" {
					first = name
					fail(http.StatusServiceUnavailable, true)(ctx, st, req, body)
					return
				}
				answer("fine", 0)(ctx, st, req, body)
			}
		}
		h.worker("gpu-1", 1, serve("gpu-1"))
		h.worker("gpu-2", 1, serve("gpu-2"))
		rep, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if err != nil {
			t.Fatal(err)
		}
		if rep.Worker.Name == first {
			t.Fatalf("served by %s, which failed", first)
		}
		row := h.only()
		if row.Attempts != 2 || string(row.WorkerName) != rep.Worker.Name || row.StatusCode != 200 {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestUnaryLastingFailureIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, fail(http.StatusBadRequest, false))
		h.worker("gpu-2", 1, answer("never", 0))
		_, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if status(err) != http.StatusBadRequest {
			t.Fatalf("err %v, want the worker's 400", err)
		}
		if row := h.only(); row.Attempts != 1 || row.StatusCode != 400 || *row.ErrorMessage != "engine said 400" {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestUnaryRetriesAtMostThreeWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		for _, name := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
			h.worker(name, 1, fail(http.StatusBadGateway, true))
		}
		_, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if status(err) != http.StatusBadGateway {
			t.Fatalf("err %v", err)
		}
		if row := h.only(); row.Attempts != 3 || row.StatusCode != 502 {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestWorkerLostFailsNamingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var w *worker
		w = h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			w.cut()
			<-ctx.Done()
		})
		start := time.Now()
		_, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if status(err) != http.StatusServiceUnavailable || code(err) != "worker_lost" || !strings.Contains(err.Error(), "gpu-1 ("+w.id+")") ||
			!strings.Contains(err.Error(), "did not return within 5s") {
			t.Fatalf("err %v", err)
		}
		// The worker had its grace to come back.
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("failed after %s, want the 5s grace", d)
		}
		if row := h.only(); row.StatusCode != 503 || string(row.WorkerID) != w.id {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestKeepAlivePastEightySeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		w := h.worker("gpu-1", 4, answer("slow but sure", 100*time.Second))
		start := time.Now()
		rep, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if err != nil {
			t.Fatal(err)
		}
		if rep.Late == nil || time.Since(start) != 80*time.Second {
			t.Fatalf("reply %+v after %s, want a late one at 80s", rep, time.Since(start))
		}
		if rep.Worker == nil || rep.Worker.ID != w.id {
			t.Fatalf("a late reply names the worker running it: %+v", rep.Worker)
		}
		client := &late{start: start}
		rep.Late.Write(client)
		if want := []time.Duration{80 * time.Second, 95 * time.Second}; !slices.Equal(client.keepAlives, want) {
			t.Fatalf("keep-alives at %v, want %v", client.keepAlives, want)
		}
		if client.failure != nil || !strings.Contains(string(client.answer), `"content":"slow but sure"`) ||
			!strings.Contains(string(client.answer), `"request_id":"req-1"`) {
			t.Fatalf("answer %s, failure %v", client.answer, client.failure)
		}
		if row := h.only(); row.StatusCode != 200 || row.RequestDurationMs != 100_000 {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestLateFailureAfterKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			if sleep(ctx, 2*time.Minute) {
				fail(http.StatusInternalServerError, false)(ctx, st, api.LinkRequest{}, nil)
			}
		})
		rep, err := h.rl.Start(chatRequest("req-1", false)).Unary()
		if err != nil || rep.Late == nil {
			t.Fatalf("reply %+v, err %v", rep, err)
		}
		client := &late{start: time.Now()}
		rep.Late.Write(client)
		// 500 is retryable, but no other worker serves the model: the
		// failure the client gets is the one that happened, as the spec
		// has a worker's failure: 502, no usable response.
		if status(client.failure) != http.StatusBadGateway || client.answer != nil || len(client.keepAlives) != 3 {
			t.Fatalf("client %+v", client)
		}
		if row := h.only(); row.StatusCode != 502 {
			t.Fatalf("row %+v", row)
		}
	})
}

// A worker's failure reaches the client with its own status when the
// spec gives a worker's answer that status, and otherwise with the spec's
// status for what it means: an engine's 401 is about the worker's
// account with it, not the client's key. The row says the same.
func TestWorkerStatusesTheSpecDoesNotGive(t *testing.T) {
	tests := []struct{ worker, client int }{
		{400, 400}, {404, 404}, {409, 409}, {413, 413}, {422, 422}, {429, 429}, {501, 501}, {503, 503}, {507, 507},
		{401, 502}, {402, 502}, {403, 502}, {407, 502}, {500, 502}, {505, 502}, {599, 502}, {302, 502},
		{405, 501}, {408, 504}, {410, 400}, {418, 400}, {438, 400},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.worker), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				h.worker("gpu-1", 4, fail(tt.worker, false))
				_, err := h.rl.Start(chatRequest("req-1", false)).Unary()
				var ae *api.Error
				if !errors.As(err, &ae) || ae.HTTPStatus() != tt.client || ae.Message != fmt.Sprintf("engine said %d", tt.worker) {
					t.Fatalf("worker's %d: client given %v", tt.worker, err)
				}
				if tt.client != tt.worker && ae.ErrorType() != api.TypeForStatus(tt.client) {
					t.Fatalf("worker's %d as %d: type %q", tt.worker, tt.client, ae.ErrorType())
				}
				if row := h.only(); row.StatusCode != tt.client {
					t.Fatalf("row %+v", row)
				}
			})
		})
	}
}

// An answer with nothing in it and no usage from its worker, whole or
// streamed, is not billed on an estimate of its prompt, and its client is
// told the usage its row holds, not the estimate.
func TestEmptyAnswerUsageAgreesWithItsRow(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
					if stream {
						_ = st.Send(ctx, chunk("", "stop"))
					} else {
						_ = st.Send(ctx, []byte(`{"id":"chatcmpl-w","object":"chat.completion","choices":[]}`))
					}
					end(ctx, st, api.Result{Status: 200})
				})
				req := chatRequest("req-1", stream)
				req.Chat = &chat.Request{PromptChars: 400}
				var usage []byte
				if stream {
					st, err := h.rl.Start(req).Stream()
					if err != nil {
						t.Fatal(err)
					}
					client := &events{}
					st.Write(client)
					finals := strings.Split(client.got[len(client.got)-1], "\n")
					usage = []byte(finals[0])
				} else {
					rep, err := h.rl.Start(req).Unary()
					if err != nil {
						t.Fatal(err)
					}
					usage = rep.Body
				}
				var got struct{ Usage api.Usage }
				if err := json.Unmarshal(usage, &got); err != nil {
					t.Fatalf("%v: %s", err, usage)
				}
				row := h.only()
				if row.StatusCode != 200 || got.Usage != (api.Usage{}) || row.PromptTokens != 0 || row.TotalTokens != 0 || row.TokensEstimated {
					t.Fatalf("reply usage %+v, row %+v", got.Usage, row)
				}
			})
		})
	}
}

// A translated answer (another API's shape) reaches the client, in time
// or late, translated; an answer that cannot be translated is the
// worker's bad reply, and its row says so rather than a success.
func TestTranslatedAnswers(t *testing.T) {
	translate := func(b []byte) ([]byte, error) {
		if bytes.Contains(b, []byte("untranslatable")) {
			return nil, errors.New("no such shape")
		}
		return []byte(`{"translated":true}`), nil
	}
	tests := []struct {
		name, text string
		wait       time.Duration
		want       int
	}{
		{"in time", "fine", 0, 200},
		{"late", "fine", 100 * time.Second, 200},
		{"untranslatable", "untranslatable", 0, 502},
		{"untranslatable and late", "untranslatable", 100 * time.Second, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				h.worker("gpu-1", 4, answer(tt.text, tt.wait))
				req := chatRequest("req-1", false)
				req.Translate = translate
				rep, err := h.rl.Start(req).Unary()
				var body []byte
				switch {
				case err != nil:
					if status(err) != tt.want || code(err) != api.CodeBadWorkerReply {
						t.Fatalf("failed with %v", err)
					}
				case rep.Late != nil:
					client := &late{start: time.Now()}
					rep.Late.Write(client)
					body, err = client.answer, client.failure
					if err != nil && (status(err) != tt.want || code(err) != api.CodeBadWorkerReply) {
						t.Fatalf("late failure %v", err)
					}
				default:
					body = rep.Body
				}
				if tt.want == 200 && string(body) != `{"translated":true}` {
					t.Fatalf("answer %s, err %v", body, err)
				}
				if row := h.only(); row.StatusCode != tt.want {
					t.Fatalf("row %+v", row)
				}
			})
		})
	}
}

func TestNoKeepAliveWaitsForTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, answer("a long transcript", 3*time.Minute))
		req := chatRequest("req-1", false)
		req.NoKeepAlive = true
		rep, err := h.rl.Start(req).Unary()
		if err != nil || rep.Late != nil {
			t.Fatalf("reply %+v, err %v", rep, err)
		}
	})
}

func TestCancelStopsTheWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stopped := make(chan struct{})
		served := 0
		h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, req api.LinkRequest, body []byte) {
			served++
			if served == 1 {
				<-ctx.Done()
				close(stopped)
				return
			}
			answer("next", 0)(ctx, st, req, body)
		})
		call := h.rl.Start(chatRequest("req-1", false))
		go func() {
			time.Sleep(10 * time.Second)
			call.Cancel()
		}()
		_, err := call.Unary()
		if status(err) != 499 {
			t.Fatalf("err %v, want 499", err)
		}
		<-stopped // the worker was told to stop
		if row := h.only(); row.StatusCode != 499 || row.RequestDurationMs != 10_000 {
			t.Fatalf("row %+v", row)
		}
		// The slot is free again at once.
		if _, err := h.rl.Start(chatRequest("req-2", false)).Unary(); err != nil {
			t.Fatal(err)
		}
	})
}

// A request whose Departed names why its client is gone records that,
// not a client's departure; one whose Departed answers nil is a 499.
func TestDepartedSaysWhyTheClientWent(t *testing.T) {
	lost := &api.Error{Kind: api.KindUnavailable, Message: "the front lost its link"}
	for _, tc := range []struct {
		name   string
		why    error
		status int
	}{{"the client left", nil, 499}, {"its front was lost", lost, 503}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				h.worker("gpu-1", 1, func(ctx context.Context, _ *link.Stream, _ api.LinkRequest, _ []byte) { <-ctx.Done() })
				req := chatRequest("req-1", false)
				req.Departed = func() error { return tc.why }
				call := h.rl.Start(req)
				go func() {
					time.Sleep(time.Second)
					call.Cancel()
				}()
				_, _ = call.Unary()
				if row := h.only(); row.StatusCode != tc.status || (tc.why != nil && *row.ErrorMessage != lost.Message) {
					t.Fatalf("row %+v", row)
				}
			})
		})
	}
}

func TestMaxDurationIs504(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 1, answer("too late", time.Hour))
		req := chatRequest("req-1", false)
		req.NoKeepAlive = true
		_, err := h.rl.Start(req).Unary()
		if status(err) != http.StatusGatewayTimeout || code(err) != "timeout" {
			t.Fatalf("err %v", err)
		}
	})
}

func TestRenderShapesTheReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		models := []api.Model{{ID: "tts-1", Capabilities: []string{api.CapSpeech}, Engine: "sim"}}
		w := h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			_ = st.Send(ctx, []byte("RIFF...."))
			end(ctx, st, api.Result{Status: 200})
		}, models...)
		req := relay.Request{ID: "req-1", OrgID: org, Kind: api.KindSpeech, Model: "tts-1", Body: []byte(`{}`),
			Render: func(a relay.Answer) (relay.Output, error) {
				if a.Worker.ID != w.id || !strings.Contains(string(a.Svc), `"request_id":"req-1"`) {
					t.Errorf("answer %+v", a)
				}
				return relay.Output{ContentType: "audio/wav", Body: a.Body}, nil
			}}
		rep, err := h.rl.Start(req).Unary()
		if err != nil || string(rep.Body) != "RIFF...." || rep.ContentType != "audio/wav" {
			t.Fatalf("reply %+v, err %v", rep, err)
		}
		row := h.only()
		// Audio length and format are a transcription row's, not speech's.
		if row.RequestType != api.RequestSpeech || row.AudioSeconds != nil || row.AudioFormat != nil || row.PromptTokens != 0 {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestRefuseRecordsARow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.rl.Refuse(chatRequest("req-1", false), &api.Error{Kind: api.KindInvalidRequest, Message: "prompt too long"})
		row := h.only()
		if row.StatusCode != 400 || *row.ErrorMessage != "prompt too long" || row.WorkerID != "" || row.Attempts != 0 {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestStreamRelaysChunksThenTheFinals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		w := h.worker("gpu-1", 4, answer("one two three", 0))
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		if st.Worker == nil || st.Worker.ID != w.id {
			t.Fatalf("stream worker %+v", st.Worker)
		}
		client := &events{}
		st.Write(client)
		// Chunks that arrive together may share a write; the finals have
		// one of their own.
		got := strings.Split(strings.Join(client.got[:len(client.got)-1], "\n"), "\n")
		if len(got) != 4 || !strings.Contains(got[0], `"content":"one "`) || !strings.Contains(got[3], `"finish_reason":"stop"`) {
			t.Fatalf("events %q", client.got)
		}
		finals := strings.Split(client.got[len(client.got)-1], "\n")
		if len(finals) != 3 || !strings.Contains(finals[0], `"usage":{"completion_tokens":3,"prompt_tokens":7,"total_tokens":10}`) ||
			!strings.Contains(finals[1], `"request_id":"req-1"`) || !strings.Contains(finals[1], `"choices":[]`) || finals[2] != "[DONE]" {
			t.Fatalf("finals %q", finals)
		}
		row := h.only()
		if !row.Stream || row.StatusCode != 200 || row.CompletionTokens != 3 || row.TimeToFirstTokenMs == nil {
			t.Fatalf("row %+v", row)
		}
	})
}

// heldClient is a stream's client whose first write waits for release,
// telling first that it began.
type heldClient struct {
	events
	first, release chan struct{}
}

func (c *heldClient) Data(evs ...[]byte) error {
	if c.writes == 0 {
		close(c.first)
		<-c.release
	}
	return c.events.Data(evs...)
}

// The chunks that reach the gateway while its client's write is under way
// go out together in the next, and the finals after them.
func TestStreamWritesWhatArrivedTogetherAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		client := &heldClient{first: make(chan struct{}), release: make(chan struct{})}
		h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			_ = st.Send(ctx, chunk("one ", ""))
			<-client.first
			for _, w := range []string{"two ", "three ", "four "} {
				_ = st.Send(ctx, chunk(w, ""))
			}
			end(ctx, st, api.Result{Status: 200, Usage: usageOf(7, 4)})
		})
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			st.Write(client)
		}()
		synctest.Wait() // the rest of the stream is at the gateway
		close(client.release)
		<-done
		got := client.got
		if len(got) != 3 || strings.Count(got[0], "\n") != 0 || !strings.Contains(got[0], `"one "`) ||
			strings.Count(got[1], "\n") != 2 || !strings.Contains(got[1], `"two "`) || !strings.Contains(got[1], `"four "`) ||
			!strings.HasSuffix(got[2], "[DONE]") {
			t.Fatalf("writes %q, want the first chunk, the other three, the finals", got)
		}
		if row := h.only(); row.StatusCode != 200 || row.CompletionTokens != 4 {
			t.Fatalf("row %+v", row)
		}
	})
}

// A stream that starts before its first output says so at once, and keeps
// alive a period after the request, then every period, until the output.
func TestStreamKeepsAliveBeforeItsFirstOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, answer("late", 40*time.Second))
		start := time.Now()
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		client := &timedEvents{start: start}
		st.Write(client)
		want := []string{"1s : keep-alive", "15s : keep-alive", "30s : keep-alive", "40s data"}
		if got := client.log[:min(len(client.log), len(want))]; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q first", client.log, want)
		}
	})
}

// timedEvents is a stream's client that notes when each write came.
type timedEvents struct {
	events
	start time.Time
	log   []string
}

func (e *timedEvents) Data(evs ...[]byte) error {
	e.log = append(e.log, time.Since(e.start).String()+" data")
	return e.events.Data(evs...)
}

func (e *timedEvents) Comment(text string) error {
	e.log = append(e.log, time.Since(e.start).String()+" : "+text)
	return e.events.Comment(text)
}

func TestStreamKeepsAliveWhileTheWorkerThinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, req api.LinkRequest, body []byte) {
			_ = st.Send(ctx, chunk("thinking", ""))
			answer("done", 40*time.Second)(ctx, st, req, body)
		})
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		client := &events{}
		st.Write(client)
		if comments := strings.Count(strings.Join(client.got, "|"), ": keep-alive"); comments != 2 {
			t.Fatalf("%d keep-alive comments in 40s, want 2: %q", comments, client.got)
		}
	})
}

func TestStreamWorkerLostAfterOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var w *worker
		w = h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			_ = st.Send(ctx, chunk("partial", ""))
			time.Sleep(time.Second)
			w.cut()
			<-ctx.Done()
		})
		h.worker("gpu-2", 1, answer("never used", 0))
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		client := &events{}
		st.Write(client)
		// Output was sent: the stream is not moved, it fails naming its worker.
		if len(client.got) < 2 || client.got[len(client.got)-1] != "fail 503 worker_lost" {
			t.Fatalf("events %q", client.got)
		}
		// Its first token reached the client: the row says when.
		if row := h.only(); row.StatusCode != 503 || string(row.WorkerID) != w.id || row.Attempts != 1 ||
			row.TimeToFirstTokenMs == nil || row.QueueWaitMs == nil {
			t.Fatalf("row %+v", row)
		}
	})
}

// A chunk that is not JSON is never passed on: the worker's stream ends
// there, moved to another worker while the client has seen nothing, a
// response partly lost (502) once it has. Whatever came before it, in the
// same write or not, reaches the client.
func TestStreamEndsAtAChunkThatIsNotJSON(t *testing.T) {
	garbage := []byte(`{"id":"chatcmpl-w","choices":[{not json}]}`)
	for _, tc := range []struct {
		name     string
		before   int // good chunks the worker sends first
		together bool
		want     []string // what the client got, by substrings, in order
		status   int
		attempts int
	}{
		{name: "first chunk", before: 0, want: []string{"rescued", "[DONE]"}, status: 200, attempts: 2},
		{name: "after output", before: 1, want: []string{"partial 0", "fail 502 bad_worker_reply"}, status: 502, attempts: 1},
		{name: "in the write of the chunks before it", before: 2, together: true, want: []string{"partial 1", "fail 502 bad_worker_reply"}, status: 502, attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				stopped := make(chan struct{})
				h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
					for i := range tc.before {
						_ = st.Send(ctx, chunk(fmt.Sprintf("partial %d", i), ""))
						if !tc.together {
							time.Sleep(time.Millisecond)
						}
					}
					_ = st.Send(ctx, garbage)
					_ = st.Send(ctx, chunk("after the garbage", ""))
					<-ctx.Done()
					close(stopped)
				})
				h.worker("gpu-2", 1, answer("rescued", time.Second))
				st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
				if err != nil {
					t.Fatal(err)
				}
				client := &events{}
				st.Write(client)
				all := strings.Join(client.got, "\n")
				if strings.Contains(all, "not json") || strings.Contains(all, "after the garbage") {
					t.Fatalf("relayed past the garbage: %q", client.got)
				}
				at := 0
				for _, w := range tc.want {
					i := strings.Index(all[at:], w)
					if i < 0 {
						t.Fatalf("events %q lack %q in order", client.got, w)
					}
					at += i + len(w)
				}
				// The worker that sent it was told to stop.
				<-stopped
				if row := h.only(); row.StatusCode != tc.status || row.Attempts != tc.attempts {
					t.Fatalf("row %+v", row)
				}
			})
		})
	}
}

func TestStreamMovesWhenTheFirstWorkerFailsBeforeOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var first string
		serve := func(name string) serveFunc {
			return func(ctx context.Context, st *link.Stream, req api.LinkRequest, body []byte) {
				if first == "" {
					first = name
					time.Sleep(3 * time.Second) // past FirstWait: the response has started
					fail(http.StatusBadGateway, true)(ctx, st, req, body)
					return
				}
				answer("rescued", 0)(ctx, st, req, body)
			}
		}
		h.worker("gpu-1", 1, serve("gpu-1"))
		h.worker("gpu-2", 1, serve("gpu-2"))
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		client := &events{}
		st.Write(client)
		// The response started before any output, with a comment.
		if client.got[0] != ": keep-alive" || !strings.Contains(client.got[1], "rescued") || !strings.HasSuffix(client.got[len(client.got)-1], "[DONE]") {
			t.Fatalf("events %q", client.got)
		}
		if row := h.only(); row.Attempts != 2 || string(row.WorkerName) == first || row.StatusCode != 200 {
			t.Fatalf("row %+v", row)
		}
	})
}

func TestStreamWaitsForAWorkerInsideTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		w := h.worker("gpu-1", 1, answer("hello", 1500*time.Millisecond))
		busy := make(chan error, 1)
		go func() {
			_, err := h.rl.Start(chatRequest("req-busy", false)).Unary()
			busy <- err
		}()
		synctest.Wait()
		start := time.Now()
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		if st.Worker != nil || time.Since(start) != time.Second {
			t.Fatalf("stream started after %s naming %+v; want no worker after 1s", time.Since(start), st.Worker)
		}
		client := &events{}
		st.Write(client)
		if err := <-busy; err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(client.got[len(client.got)-1], "[DONE]") {
			t.Fatalf("events %q", client.got)
		}
		rows := h.rows.rows
		if len(rows) != 2 || rows[1].ID != "req-1" || string(rows[1].WorkerID) != w.id || rows[1].QueueWaitMs == nil || *rows[1].QueueWaitMs != 1500 {
			t.Fatalf("rows %+v", rows)
		}
	})
}

func TestStreamQueuedTooLongFailsInTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 1, answer("hello", time.Minute))
		busy := make(chan struct{})
		go func() {
			defer close(busy)
			_, _ = h.rl.Start(chatRequest("req-busy", false)).Unary()
		}()
		defer func() { <-busy }()
		synctest.Wait()
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil || st.Worker != nil {
			t.Fatalf("stream %+v, err %v", st, err)
		}
		client := &events{}
		st.Write(client)
		if len(client.got) != 2 || client.got[0] != ": keep-alive" || client.got[1] != "fail 429 capacity_exceeded" {
			t.Fatalf("events %q, want a comment as the response starts, then the capacity 429 after the 2s hold", client.got)
		}
	})
}

func TestStreamClientLeavesMidway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stopped := make(chan struct{})
		h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			defer close(stopped)
			for i := 0; ctx.Err() == nil; i++ {
				_ = st.Send(ctx, chunk("word ", ""))
				time.Sleep(100 * time.Millisecond)
			}
		})
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		st.Write(&events{goneAfter: 3})
		<-stopped
		row := h.only()
		// Billed for what it was sent, estimated since the worker never
		// reported.
		if row.StatusCode != 499 || !row.TokensEstimated || row.CompletionTokens == 0 {
			t.Fatalf("row %+v", row)
		}
	})
}

// A sealed stream's client has the whole answer once the final chunk
// reached it, and reads nothing after: one that leaves before the
// worker's result comes is recorded as the success it was, with the
// worker's usage. One that leaves before the final chunk left mid-answer.
func TestSealedStreamClientLeavingAfterTheFinalChunk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		final  bool
		status int
	}{{"after the final chunk", true, 200}, {"before it", false, 499}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				release := make(chan struct{})
				w := h.worker("vault", 1, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
					_ = st.Send(ctx, []byte(`{"svc_e2e":1,"response_nonce":"bm9uY2U"}`))
					_ = st.Send(ctx, []byte(`{"c":"c2VhbGVk"}`))
					if tc.final {
						_ = st.Send(ctx, []byte(`{"c":"ZmluYWw","final":true}`))
					}
					<-release
					end(ctx, st, api.Result{Status: 200, Usage: &api.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}})
				})
				req := chatRequest("req-1", true)
				req.E2E, req.Pin, req.Body = true, w.id, []byte(`{"svc_e2e":"1"}`)
				call := h.rl.Start(req)
				st, err := call.Stream()
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					time.Sleep(time.Second)
					call.Cancel() // the client's connection closed
					time.Sleep(10 * time.Millisecond)
					close(release)
				}()
				st.Write(&events{})
				if row := h.only(); row.StatusCode != tc.status || tc.final && row.TotalTokens != 5 {
					t.Fatalf("row %+v", row)
				}
			})
		})
	}
}

func TestAbandonedStreamIsA499(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, answer("unread", 5*time.Second))
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		st.Abandon()
		if row := h.only(); row.StatusCode != 499 {
			t.Fatalf("row %+v", row)
		}
		if n := h.inFlight(); n != 0 {
			t.Fatalf("%d in flight", n)
		}
	})
}

func TestOnEndRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, answer("x", 0))
		call := h.rl.Start(chatRequest("req-1", false))
		ended := 0
		call.OnEnd(func() { ended++ })
		if _, err := call.Unary(); err != nil {
			t.Fatal(err)
		}
		call.Cancel()
		call.OnEnd(func() { ended++ }) // after the end: runs at once
		if ended != 2 {
			t.Fatalf("hooks ran %d times", ended)
		}
	})
}

// delivered is a client whose connection tells what it acknowledged:
// every write is 100 bytes, and the client took only the first acked.
type delivered struct {
	events
	acked int // chunks the client acknowledged
	sent  int // chunks written
	last  []int64
}

// Data writes each chunk as 100 bytes, the chunks of a call one after
// another.
func (d *delivered) Data(evs ...[]byte) error {
	if err := d.events.Data(evs...); err != nil {
		return err
	}
	d.last = d.last[:0]
	for range evs {
		d.sent++
		d.last = append(d.last, 100*int64(d.sent))
	}
	return nil
}

func (d *delivered) Ends(dst []int64) []int64 { return append(dst, d.last...) }
func (d *delivered) Delivered() int64         { return 100 * int64(min(d.acked, d.sent)) }

func TestStreamClientThatStopsReadingIsBilledWhatItReceived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		stopped := make(chan struct{})
		h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			defer close(stopped)
			for ctx.Err() == nil {
				_ = st.Send(ctx, chunk("word ", ""))
			}
		})
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		// Ten writes went into the connection, of chunks that arrived
		// together or alone; three chunks reached the client.
		st.Write(&delivered{events: events{goneAfter: 10}, acked: 3})
		<-stopped
		row := h.only()
		if row.StatusCode != 499 || !row.TokensEstimated || row.CompletionTokens != usage.EstimateTokens(3*len("word ")) {
			t.Fatalf("row %+v, want 499 billing the 15 characters received", row)
		}
	})
}

// A rerank answer is completed like an embeddings one, and its row is a
// rerank row with the tokens the worker reported.
func TestRerankRow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		models := []api.Model{{ID: "bge-reranker", Capabilities: []string{api.CapRerank}, Engine: "openai"}}
		w := h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, req api.LinkRequest, _ []byte) {
			if req.Kind != api.KindRerank {
				t.Errorf("kind %q", req.Kind)
			}
			_ = st.Send(ctx, []byte(`{"id":"rr","model":"bge-reranker","results":[{"index":1,"relevance_score":0.9}],"usage":{"prompt_tokens":12,"total_tokens":12}}`))
			end(ctx, st, api.Result{Status: 200, Usage: &api.Usage{PromptTokens: 12, TotalTokens: 12}})
		}, models...)
		req := relay.Request{ID: "req-1", OrgID: org, Kind: api.KindRerank, Model: "bge-reranker", Body: []byte(`{}`)}
		rep, err := h.rl.Start(req).Unary()
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Results []map[string]any `json:"results"`
			Usage   map[string]int   `json:"usage"`
			Svc     struct {
				Worker struct{ ID string } `json:"worker"`
			} `json:"svc"`
		}
		if json.Unmarshal(rep.Body, &body) != nil || len(body.Results) != 1 || body.Usage["prompt_tokens"] != 12 || body.Svc.Worker.ID != w.id {
			t.Fatalf("reply %s", rep.Body)
		}
		row := h.only()
		if row.RequestType != api.RequestRerank || row.PromptTokens != 12 || row.TotalTokens != 12 || row.Images != 0 || string(row.WorkerID) != w.id {
			t.Fatalf("row %+v", row)
		}
	})
}

// A rerank cancelled before its answer has no token counts, and says no
// estimate: its input is not measured to estimate from.
func TestCancelledRerankRowEstimatesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		models := []api.Model{{ID: "bge-reranker", Capabilities: []string{api.CapRerank}, Engine: "openai"}}
		h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, req api.LinkRequest, _ []byte) { <-ctx.Done() }, models...)
		call := h.rl.Start(relay.Request{ID: "req-1", OrgID: org, Kind: api.KindRerank, Model: "bge-reranker", Body: []byte(`{}`)})
		go func() {
			time.Sleep(time.Second)
			call.Cancel()
		}()
		if _, err := call.Unary(); status(err) != 499 {
			t.Fatalf("err %v, want 499", err)
		}
		if row := h.only(); row.StatusCode != 499 || row.TotalTokens != 0 || row.TokensEstimated {
			t.Fatalf("row %+v", row)
		}
	})
}

// An image generation's row counts the images its Render found; it goes
// only to a worker with the model installed whole, and is the spec's 409,
// recorded, when every worker has only part of it.
func TestImagesRowAndIncompleteModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		part := []api.Model{{ID: "flux", Capabilities: []string{api.CapImageGeneration}, Engine: "sim",
			Incomplete: &api.Incomplete{Missing: []string{"ae.safetensors"}}}}
		h.worker("partial", 1, fail(500, true), part...)
		req := relay.Request{ID: "req-1", OrgID: org, Kind: api.KindImages, Model: "flux", Body: []byte(`{}`),
			Render: func(a relay.Answer) (relay.Output, error) {
				return relay.Output{ContentType: "application/json", Body: a.Body, Images: 2}, nil
			}}
		_, err := h.rl.Start(req).Unary()
		if status(err) != 409 || code(err) != api.CodeModelIncomplete || !strings.Contains(err.Error(), "ae.safetensors missing") {
			t.Fatalf("err %v", err)
		}
		row := h.only()
		if row.RequestType != api.RequestImages || row.StatusCode != 409 || row.Images != 0 {
			t.Fatalf("row %+v", row)
		}

		whole := []api.Model{{ID: "flux", Capabilities: []string{api.CapImageGeneration}, Engine: "sim"}}
		w := h.worker("whole", 1, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			_ = st.Send(ctx, []byte(`{"created":1,"data":[{"b64_json":"aQ=="},{"b64_json":"aQ=="}]}`))
			end(ctx, st, api.Result{Status: 200})
		}, whole...)
		req.ID = "req-2"
		for range 3 {
			rep, err := h.rl.Start(req).Unary()
			if err != nil || rep.Worker.ID != w.id {
				t.Fatalf("reply %+v, %v", rep, err)
			}
		}
		synctest.Wait()
		h.rows.mu.Lock()
		defer h.rows.mu.Unlock()
		if last := h.rows.rows[len(h.rows.rows)-1]; last.Images != 2 || last.StatusCode != 200 || last.PromptTokens != 0 {
			t.Fatalf("row %+v", last)
		}
	})
}

// A sealed transcription's row has the audio the worker read from the
// content, since the gateway cannot open the upload; a format the gateway
// does not accept is not written into the row.
func TestSealedTranscriptionRowHasTheWorkersAudio(t *testing.T) {
	for _, tt := range []struct {
		format  string
		seconds float64
		want    string
	}{{api.AudioFLAC, 2.5, api.AudioFLAC}, {"ogg", 2.5, ""}} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			models := []api.Model{{ID: "stt-1", Capabilities: []string{api.CapTranscription}, Engine: "sim"}}
			w := h.worker("vault", 1, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
				_ = st.Send(ctx, []byte(`{"sealed":"..."}`))
				secs := tt.seconds
				end(ctx, st, api.Result{Status: 200, AudioFormat: tt.format, AudioSeconds: &secs})
			}, models...)
			req := relay.Request{ID: "req-1", OrgID: org, Kind: api.KindTranscription, Model: "stt-1", E2E: true, Pin: w.id,
				Body: []byte(`{"svc_e2e":"1"}`)}
			if _, err := h.rl.Start(req).Unary(); err != nil {
				t.Fatal(err)
			}
			row := h.only()
			switch {
			case tt.want == "" && (row.AudioFormat != nil || row.AudioSeconds != nil):
				t.Fatalf("%s: row %+v", tt.format, row)
			case tt.want != "" && (row.AudioFormat == nil || *row.AudioFormat != tt.want || row.AudioSeconds == nil || *row.AudioSeconds != tt.seconds):
				t.Fatalf("%s: row %+v", tt.format, row)
			}
		})
	}
}

// Abort ends the calls still running: a stream's client gets the 503 to
// retry as its last event, a unary call's its answer, and both rows say
// so rather than that the client left.
func TestAbortEndsWhatIsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.worker("gpu-1", 4, answer("never in time", time.Hour))
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		client := &events{}
		streamed := make(chan struct{})
		go func() {
			defer close(streamed)
			st.Write(client)
		}()
		unary := make(chan error, 1)
		go func() {
			_, err := h.rl.Start(chatRequest("req-2", false)).Unary()
			unary <- err
		}()
		synctest.Wait()
		if n := h.rl.Abort(); n != 2 {
			t.Fatalf("Abort ended %d calls, want 2", n)
		}
		<-streamed
		if err := <-unary; status(err) != 503 {
			t.Fatalf("the unary call's answer = %v, want a 503", err)
		}
		if len(client.got) == 0 || client.got[len(client.got)-1] != "fail 503 shutting_down" {
			t.Fatalf("stream events %q, want the 503 last", client.got)
		}
		synctest.Wait()
		h.rows.mu.Lock()
		defer h.rows.mu.Unlock()
		if len(h.rows.rows) != 2 {
			t.Fatalf("%d rows, want 2", len(h.rows.rows))
		}
		for _, row := range h.rows.rows {
			if row.StatusCode != 503 {
				t.Fatalf("row %+v, want 503", row)
			}
		}
	})
}

// A request pinned to a busy worker waits in the worker's queue, and is
// listed under it while it waits, as its queue_depth counts it.
func TestPinnedRequestIsListedUnderItsWorkerWhileItWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		w := h.worker("gpu-1", 1, answer("slow", time.Second))
		h.worker("gpu-2", 1, answer("other", 0))
		// pinned starts a request pinned to w; its error comes on the
		// channel once it ends.
		pinned := func(prompt string) <-chan error {
			done := make(chan error, 1)
			go func() {
				req := chatRequest(prompt, false)
				req.Pin = w.id
				_, err := h.rl.Start(req).Unary()
				done <- err
			}()
			synctest.Wait()
			return done
		}
		first := pinned("busy")
		waiting := pinned("pinned")
		listed := h.inflight.List(org, w.id, time.Now())
		states := map[string]string{}
		for _, r := range listed {
			states[r.TaskID] = r.State
		}
		if len(listed) != 2 || states["busy"] != api.StateRunning || states["pinned"] != api.StateQueued {
			t.Fatalf("listed under its worker while one waits: %+v", listed)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-waiting; err != nil {
			t.Fatal(err)
		}
	})
}

// unfinishing is a worker's link that, from the first frame of a message
// to be continued, sends nothing more: the worker left the message
// unfinished.
type unfinishing struct {
	link.Conn
	mu  sync.Mutex
	cut bool
}

func (c *unfinishing) WriteMessage(m []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil
	}
	var out []byte
	err := link.DecodeMessage(m, func(f link.Frame) error {
		if !c.cut {
			out = link.AppendFrame(out, &f)
			c.cut = f.More()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.Conn.WriteMessage(out)
}

// A worker that begins a message and never sends the rest does not keep
// its stream silent, keep-alives and all: its client hears within
// messageRest that the answer was lost.
func TestStreamWithAnUnfinishedMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.wrap = func(c link.Conn) link.Conn { return &unfinishing{Conn: c} }
		h.worker("gpu-1", 4, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			_ = st.Send(ctx, chunk("a ", ""))
			_ = st.Send(ctx, chunk(strings.Repeat("b", 100<<10), "")) // two frames: the second never goes
			<-ctx.Done()
		})
		start := time.Now()
		st, err := h.rl.Start(chatRequest("req-1", true)).Stream()
		if err != nil {
			t.Fatal(err)
		}
		client := &timedEvents{start: start}
		st.Write(client)
		got := client.got
		if len(got) != 2 || !strings.Contains(got[0], `"a "`) || got[1] != "fail 503 worker_lost" {
			t.Fatalf("writes %q, want the first chunk, then the loss", got)
		}
		if took := time.Since(start); took > 16*time.Second {
			t.Fatalf("the loss came after %v", took)
		}
	})
}

// A request that failed on a worker is logged with what failed, its type
// and code, and never the message, which may quote the request.
func TestFailureOnAWorkerIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var buf bytes.Buffer
		h.rl = relay.New(relay.Config{Fleet: h.f, Usage: h.rows, InFlight: h.inflight, Timing: timing,
			Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		h.worker("gpu-1", 1, func(ctx context.Context, st *link.Stream, _ api.LinkRequest, _ []byte) {
			end(ctx, st, api.Result{Status: 507, Error: &api.ResultError{Message: "the prompt hi did not fit", Type: api.TypeInsufficientMemory, Code: "out_of_memory"}})
		})
		if _, err := h.rl.Start(chatRequest("req-1", false)).Unary(); status(err) != 507 {
			t.Fatalf("err %v", err)
		}
		var rec map[string]any
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "request failed on a worker") {
				_ = json.Unmarshal([]byte(line), &rec)
			}
		}
		if rec["type"] != api.TypeInsufficientMemory || rec["code"] != "out_of_memory" || rec["status"] != 507.0 ||
			strings.Contains(buf.String(), "did not fit") {
			t.Fatalf("log record %v in\n%s", rec, buf.String())
		}
	})
}
