package moonshine

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

func transcription(t *testing.T, p api.TranscriptionParams, file []byte) *engine.Request {
	t.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Request{Kind: api.KindTranscription, Model: "moonshine-base", Body: body, Audio: bytes.NewReader(file)}
}

// serve runs req and decodes its transcript, if it succeeded.
func serve(t *testing.T, ctx context.Context, e *Engine, req *engine.Request) (*api.Result, *api.Transcript) {
	t.Helper()
	var s sink
	res := e.Serve(ctx, req, &s)
	if res == nil {
		t.Fatal("Serve returned nil")
	}
	if res.Status != http.StatusOK {
		if s.bodies != 0 {
			t.Errorf("a failure sent %d bodies", s.bodies)
		}
		return res, nil
	}
	if s.bodies != 1 {
		t.Fatalf("a success sent %d bodies", s.bodies)
	}
	var tr api.Transcript
	if err := json.Unmarshal(s.body, &tr); err != nil {
		t.Fatalf("transcript %s: %v", s.body, err)
	}
	return res, &tr
}

func TestServeTranscribes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rate   int
		params api.TranscriptionParams
		text   string
		words  []api.Word
	}{{
		name:   "16 kHz",
		rate:   16000,
		params: api.TranscriptionParams{Format: api.AudioWAV},
		text:   "heard 32000 samples peaking at 0.50 the end.",
	}, {
		name:   "8 kHz is resampled",
		rate:   8000,
		params: api.TranscriptionParams{Language: "en"},
		text:   "heard 32000 samples peaking at 0.50 the end.",
	}, {
		name:   "44.1 kHz is resampled",
		rate:   44100,
		params: api.TranscriptionParams{Language: "EN"},
		text:   "heard 32000 samples peaking at 0.50 the end.",
	}, {
		name:   "words",
		rate:   16000,
		params: api.TranscriptionParams{Words: true, Temperature: 0.4, Prompt: "ignored"},
		text:   "heard 32000 samples peaking at 0.50 the end.",
		// The first segment (0-1 s) has 30 characters, the last (1.5-2 s) 7.
		words: []api.Word{
			{Word: "heard", Start: 0, End: 0.167},
			{Word: "32000", Start: 0.167, End: 0.333},
			{Word: "samples", Start: 0.333, End: 0.567},
			{Word: "peaking", Start: 0.567, End: 0.8},
			{Word: "at", Start: 0.8, End: 0.867},
			{Word: "0.50", Start: 0.867, End: 1},
			{Word: "the", Start: 1.5, End: 1.714},
			{Word: "end.", Start: 1.714, End: 2},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, _ := fakeEngine(t, startOK, "")
			res, tr := serve(t, context.Background(), e, transcription(t, tt.params, clip(t, tt.rate, 2, doAnswer)))
			if res.Status != http.StatusOK {
				t.Fatalf("status %d: %+v", res.Status, res.Error)
			}
			if res.Timing.ColdStart == nil || !*res.Timing.ColdStart || res.Timing.ModelLoadMs == nil || *res.Timing.ModelLoadMs <= 0 {
				t.Errorf("the first request's timing = %+v, want a cold start", res.Timing)
			}
			// The fake sees the peak at 0.5 whatever the rate: resampling
			// keeps a lone sample's neighbourhood, not its exact value.
			if !strings.HasPrefix(tr.Text, "heard 32000 samples peaking at") || !strings.HasSuffix(tr.Text, "the end.") {
				t.Errorf("text = %q, want %q", tr.Text, tt.text)
			}
			if tr.Language != "en" || tr.Duration != 2 {
				t.Errorf("language %q, duration %v", tr.Language, tr.Duration)
			}
			want := []api.Segment{
				{ID: 0, Start: 0, End: 1, Text: tr.Segments[0].Text, AvgLogprob: -0.1235, NoSpeechProb: 0.0123},
				{ID: 1, Start: 1.5, End: 2, Text: "the end.", AvgLogprob: -1},
			}
			if !reflect.DeepEqual(tr.Segments, want) {
				t.Errorf("segments = %+v\nwant %+v", tr.Segments, want)
			}
			if tt.rate == 16000 && tr.Text != tt.text {
				t.Errorf("text = %q, want %q", tr.Text, tt.text)
			}
			if !reflect.DeepEqual(tr.Words, tt.words) {
				t.Errorf("words = %+v\nwant %+v", tr.Words, tt.words)
			}
		})
	}
}

func TestServeRejects(t *testing.T) {
	t.Parallel()
	wav := clip(t, 16000, 1, doAnswer)
	tests := []struct {
		name    string
		req     *engine.Request
		status  int
		errType string
		errHas  string
	}{{
		name:    "a translation",
		req:     transcription(t, api.TranscriptionParams{Translate: true}, wav),
		status:  http.StatusNotImplemented,
		errType: api.TypeNotSupported,
		errHas:  "does not translate",
	}, {
		name:    "another language",
		req:     transcription(t, api.TranscriptionParams{Language: "de"}, wav),
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  `moonshine-base transcribes English only, not "de"`,
	}, {
		name:    "not audio",
		req:     transcription(t, api.TranscriptionParams{}, []byte("%PDF-1.7 not audio at all")),
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  "Unsupported audio format",
	}, {
		name:    "damaged WAV",
		req:     transcription(t, api.TranscriptionParams{}, wav[:30]),
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  "damaged wav file",
	}, {
		name:    "too long, as the gateway measured",
		req:     transcription(t, api.TranscriptionParams{Seconds: 31 * 60}, wav),
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  "at most 30 minutes of audio in one request; this file lasts 31.0",
	}, {
		name:    "too long, as decoded",
		req:     transcription(t, api.TranscriptionParams{}, clip(t, 1000, 30*60+1, doAnswer)),
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
		errHas:  "at most 30 minutes",
	}, {
		name:    "no audio",
		req:     &engine.Request{Kind: api.KindTranscription, Model: "moonshine-base", Body: []byte(`{}`)},
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
	}, {
		name:    "bad parameters",
		req:     &engine.Request{Kind: api.KindTranscription, Model: "moonshine-base", Body: []byte(`{"words":"yes"}`), Audio: bytes.NewReader(wav)},
		status:  http.StatusBadRequest,
		errType: api.TypeInvalidRequest,
	}, {
		name:    "another model",
		req:     &engine.Request{Kind: api.KindTranscription, Model: "whisper-1", Body: []byte(`{}`), Audio: bytes.NewReader(wav)},
		status:  http.StatusNotFound,
		errType: api.TypeNotFound,
	}, {
		name:    "chat",
		req:     &engine.Request{Kind: api.KindChat, Model: "moonshine-base", Body: []byte(`{}`)},
		status:  http.StatusNotImplemented,
		errType: api.TypeNotSupported,
	}, {
		name:    "speech",
		req:     &engine.Request{Kind: api.KindSpeech, Model: "moonshine-base", Body: []byte(`{}`)},
		status:  http.StatusNotImplemented,
		errType: api.TypeNotSupported,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, dir := fakeEngine(t, startOK, "")
			res, _ := serve(t, context.Background(), e, tt.req)
			if res.Status != tt.status || res.Error == nil || res.Error.Type != tt.errType || !strings.Contains(res.Error.Message, tt.errHas) {
				t.Errorf("result %d %+v, want %d %s with %q", res.Status, res.Error, tt.status, tt.errType, tt.errHas)
			}
			if res.Retryable {
				t.Error("a rejection is retryable")
			}
			if n := starts(t, dir); n != 0 {
				t.Errorf("the runner started %d times for a request it could not take", n)
			}
		})
	}
}

// TestServeRunnerFailures runs a failing request, then a good one, and
// checks how the runner fared. A runner that starts is warmed up first,
// so that the failure happens mid-request.
func TestServeRunnerFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		start     string
		do        int
		timeout   time.Duration
		status    int
		errType   string
		errHas    string
		retryable bool
		starts    int // runner starts after the requests; 0 when it varies
	}{{
		name:    "error answer keeps the runner",
		start:   startOK,
		do:      doError,
		status:  http.StatusInternalServerError,
		errType: api.TypeServer,
		errHas:  "moonshine: onnxruntime: invalid input shape",
		starts:  1,
	}, {
		name:      "death mid-request restarts it",
		start:     startOK,
		do:        doDie,
		status:    http.StatusBadGateway,
		errType:   api.TypeUpstream,
		errHas:    "the runner exited (exit status 3): fatal: out of memory",
		retryable: true,
		starts:    2,
	}, {
		name:    "a hung request is cancelled and the runner restarted",
		start:   startOK,
		do:      doHang,
		timeout: 200 * time.Millisecond,
		status:  499,
		errType: "cancelled",
		starts:  2,
	}, {
		name:      "an answer to another request restarts it",
		start:     startOK,
		do:        doWrongID,
		status:    http.StatusBadGateway,
		errType:   api.TypeUpstream,
		errHas:    "runner answered request 3 while request 2 waited",
		retryable: true,
		starts:    2,
	}, {
		name:      "garbage restarts it",
		start:     startOK,
		do:        doGarbage,
		status:    http.StatusBadGateway,
		errType:   api.TypeUpstream,
		errHas:    "read runner: invalid character",
		retryable: true,
		starts:    2,
	}, {
		name:      "a runner that cannot start is unreachable",
		start:     startFails,
		status:    http.StatusBadGateway,
		errType:   api.TypeUpstream,
		errHas:    "inference engine unreachable: start runner: the runner closed its output; the runner exited (exit status 1): Error: libonnxruntime.so.1: cannot open shared object file",
		retryable: true,
		starts:    2,
	}, {
		name:      "a runner with another model is unreachable",
		start:     startWrongModel,
		status:    http.StatusBadGateway,
		errHas:    "want moonshine-base ready",
		errType:   api.TypeUpstream,
		retryable: true,
		starts:    2,
	}, {
		name:      "a runner that does not get ready is unreachable",
		start:     startSlow,
		status:    http.StatusBadGateway,
		errType:   api.TypeUpstream,
		errHas:    "start runner: not ready after 200ms",
		retryable: true,
	}, {
		name:    "cancelled while the runner loads",
		start:   startSlow,
		timeout: 100 * time.Millisecond,
		status:  499,
		errType: "cancelled",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, dir := fakeEngine(t, tt.start, "")
			if tt.start == startSlow {
				e.startTimeout = 200 * time.Millisecond
			}
			if tt.start == startOK {
				if res, _ := serve(t, context.Background(), e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer))); res.Status != http.StatusOK {
					t.Fatalf("warm-up: %d %+v", res.Status, res.Error)
				}
			}
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			res, _ := serve(t, ctx, e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, tt.do)))
			if res.Status != tt.status || res.Error.Type != tt.errType || !strings.Contains(res.Error.Message, tt.errHas) || res.Retryable != tt.retryable {
				t.Errorf("result %d %+v retryable %v\nwant %d %s with %q retryable %v",
					res.Status, res.Error, res.Retryable, tt.status, tt.errType, tt.errHas, tt.retryable)
			}
			if tt.start != startOK {
				if e.run.Load() != nil {
					t.Error("a runner that did not start was kept")
				}
			} else if kept := e.run.Load() != nil; kept != (tt.starts == 1) {
				t.Errorf("runner kept: %v, want %v", kept, tt.starts == 1)
			}

			// The next request restarts a runner that went wrong.
			res, tr := serve(t, context.Background(), e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer)))
			if tt.start == startOK {
				if res.Status != http.StatusOK || tr.Text == "" {
					t.Errorf("the next request: %d %+v", res.Status, res.Error)
				}
				if cold := res.Timing.ColdStart != nil; cold != (tt.starts == 2) {
					t.Errorf("the next request was a cold start: %v, want %v", cold, tt.starts == 2)
				}
			}
			if n := starts(t, dir); tt.starts > 0 && n != tt.starts {
				t.Errorf("the runner started %d times, want %d", n, tt.starts)
			}
		})
	}
}

// TestServeQueues checks that requests wait for the runner in turn, and
// that a queued request can give up.
func TestServeQueues(t *testing.T) {
	t.Parallel()
	e, dir := fakeEngine(t, startOK, "")
	hung, cancelHung := context.WithCancel(context.Background())
	defer cancelHung()
	first := make(chan *api.Result)
	go func() {
		res, _ := serve(t, hung, e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doHang)))
		first <- res
	}()
	waitUntil(t, "the hung request to hold the runner", func() bool { return noted(t, dir, "hangs") == 1 })

	queued, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if res, _ := serve(t, queued, e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer))); res.Status != 499 {
		t.Errorf("queued request: %d %+v, want 499", res.Status, res.Error)
	}

	var wg sync.WaitGroup
	results := make([]*api.Result, 3)
	for i := range results {
		wg.Go(func() {
			results[i], _ = serve(t, context.Background(), e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer)))
		})
	}
	waitQueued(t, e, 3)
	cancelHung()
	if res := <-first; res.Status != 499 {
		t.Errorf("hung request: %d %+v, want 499", res.Status, res.Error)
	}
	wg.Wait()
	for i, res := range results {
		if res.Status != http.StatusOK {
			t.Errorf("request %d queued behind: %d %+v", i, res.Status, res.Error)
		}
	}
	if n := starts(t, dir); n != 2 {
		t.Errorf("the runner started %d times, want 2: once, and after the cancel killed it", n)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	e, dir := fakeEngine(t, startOK, "")
	ctx := context.Background()
	if res, _ := serve(t, ctx, e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer))); res.Status != http.StatusOK {
		t.Fatalf("%d %+v", res.Status, res.Error)
	}
	r := e.run.Load()

	// Close stops a request in progress, and the runner.
	running := make(chan *api.Result)
	go func() {
		res, _ := serve(t, ctx, e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doHang)))
		running <- res
	}()
	waitUntil(t, "the runner to hang on the request", func() bool { return noted(t, dir, "hangs") == 1 })
	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := e.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if res := <-running; res.Status != http.StatusServiceUnavailable || !res.Retryable {
		t.Errorf("request running at Close: %d %+v retryable %v, want a retryable 503", res.Status, res.Error, res.Retryable)
	}
	if !r.hasExited() || e.run.Load() != nil {
		t.Error("the runner survived Close")
	}

	// Nothing runs after Close.
	if res, _ := serve(t, ctx, e, transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer))); res.Status != http.StatusServiceUnavailable {
		t.Errorf("request after Close: %d %+v, want 503", res.Status, res.Error)
	}
	if n := starts(t, dir); n != 1 {
		t.Errorf("the runner started %d times, want 1", n)
	}
	if err := e.Close(closeCtx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCloseIdle(t *testing.T) {
	t.Parallel()
	e, dir := fakeEngine(t, startOK, "")
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("Close before any request: %v", err)
	}
	if n := starts(t, dir); n != 0 {
		t.Errorf("the runner started %d times", n)
	}
}
