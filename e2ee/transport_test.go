package e2ee

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// fakeGateway plays the gateway (routing on the clear envelope only) and
// the workers behind it (opening and answering with this package).
type fakeGateway struct {
	t *testing.T

	mu         sync.Mutex
	workers    map[string]*KeyPair // connected workers by key id
	listed     []PublicKeyInfo     // what the key directory says
	fetches    int
	requests   int
	keysStatus int    // non-zero: the key directory refuses with it
	misbehave  string // "unsealed", "drop-final", "body-for-stream"
}

func newFakeGateway(t *testing.T, kps ...*KeyPair) (*fakeGateway, *httptest.Server) {
	g := &fakeGateway{t: t, workers: map[string]*KeyPair{}}
	for _, kp := range kps {
		g.connect(kp)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv
}

// counts returns the key fetches and inference requests so far.
func (g *fakeGateway) counts() (fetches, requests int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fetches, g.requests
}

// set changes the gateway's behaviour between requests.
func (g *fakeGateway) set(change func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	change()
}

func (g *fakeGateway) connect(kp *KeyPair) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.workers[kp.KeyID()] = kp
	p := testPub(kp, "chat-model", "embed-model", "speech-model")
	p.WorkerID = "w-" + kp.KeyID()
	g.listed = append(g.listed, p)
}

func (g *fakeGateway) disconnect(kp *KeyPair) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.workers, kp.KeyID())
	var keep []PublicKeyInfo
	for _, p := range g.listed {
		if p.KeyID != kp.KeyID() {
			keep = append(keep, p)
		}
	}
	g.listed = keep
}

func gatewayError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"detail":{"error":{"message":%q,"type":%q}}}`, msg, typ)
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer test-key" {
		gatewayError(w, 401, "authentication_error", "bad key")
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/api")
	switch {
	case r.Method == "GET" && r.URL.Path == "/api/v1/e2e/keys":
		g.fetches++
		if g.keysStatus != 0 {
			gatewayError(w, g.keysStatus, "plan_required", "private inference needs the Pro plan")
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"keys": g.listed})
	case r.Method == "GET" && path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"chat-model","object":"model","created":1,"owned_by":"svc"}]}`)
	case r.Method == "POST" && (path == "/v1/chat/completions" || path == "/v1/embeddings" || path == "/v1/audio/speech"):
		g.requests++
		g.inference(w, r, path)
	default:
		http.NotFound(w, r)
	}
}

func (g *fakeGateway) inference(w http.ResponseWriter, r *http.Request, path string) {
	body, _ := io.ReadAll(r.Body)
	if mediaType(r.Header) != ContentType || strings.Contains(string(body), "secret") {
		g.t.Errorf("the gateway got a clear request: %s %s", r.Header.Get("Content-Type"), body)
	}
	env, err := ParseEnvelope(body)
	if err != nil {
		gatewayError(w, 400, "invalid_encrypted_request", err.Error())
		return
	}
	kp, ok := g.workers[env.KeyID]
	if !ok {
		w.Header().Set("X-Svc-Error-Code", "no_private_inference_worker")
		gatewayError(w, 503, "service_unavailable", "no connected worker holds the key")
		return
	}
	if pin := r.Header.Get(PinHeader); pin != "" && !slices.ContainsFunc(g.listed, func(p PublicKeyInfo) bool { return p.KeyID == env.KeyID && p.WorkerID == pin }) {
		gatewayError(w, 400, "invalid_encrypted_request", "the request is sealed to another worker's key than X-Svc-Worker-Id names")
		return
	}
	if env.Model == "busy-model" {
		w.Header().Set("Retry-After", "1")
		gatewayError(w, 429, "rate_limit_error", "every worker serving the model is busy")
		return
	}

	// The worker's side.
	req, err := OpenRequest(kp, body)
	if err != nil {
		gatewayError(w, 400, "invalid_encrypted_request", err.Error())
		return
	}
	if g.misbehave == "unsealed" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"forged"}}]}`)
		return
	}
	var in struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		Input string `json:"input"`
	}
	json.Unmarshal(req.Body, &in)
	s := req.Sealer
	w.Header().Set("X-Worker-Id", "w1")
	if path == "/v1/embeddings" {
		w.Header().Set("Content-Type", ContentType)
		w.Write(s.ReplyBody([]byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,` +
			fmt.Sprint(len(in.Input)) + `]}],"model":"embed-model","usage":{"prompt_tokens":1,"total_tokens":1}}`)))
		return
	}
	if path == "/v1/audio/speech" {
		w.Header().Set("Content-Type", ContentType)
		if in.Input == "too long" {
			w.WriteHeader(400)
			w.Write(s.ReplyBody([]byte(`{"error":{"message":"input too long: too long","type":"invalid_request_error"}}`)))
			return
		}
		w.Write(s.ReplyBody([]byte("RIFF....WAVE")))
		return
	}
	prompt := in.Messages[len(in.Messages)-1].Content
	if prompt == "too long" {
		// The engine's error may quote the prompt, so it is sealed too.
		w.Header().Set("Content-Type", ContentType)
		w.WriteHeader(400)
		w.Write(s.ReplyBody([]byte(`{"error":{"message":"prompt too long: too long","type":"invalid_request_error"}}`)))
		return
	}
	answer := "echo: " + prompt
	if !req.Stream || g.misbehave == "body-for-stream" {
		reply := s.ReplyBody([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"chat-model",` +
			`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":` + fmt.Sprintf("%q", answer) + `}}]}`))
		// The gateway names the worker beside the sealed fields.
		reply = append(reply[:len(reply)-1], `,"svc":{"worker":{"id":"w1","name":"box"}}}`...)
		w.Header().Set("Content-Type", ContentType)
		w.Write(reply)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, ": keep-alive\n\n")
	w.Write(sseEvent(s.StartData()))
	for _, part := range []string{"echo: ", prompt} {
		w.Write(sseEvent(s.EventData([]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"chat-model",` +
			`"choices":[{"index":0,"delta":{"content":` + fmt.Sprintf("%q", part) + `}}]}`))))
		io.WriteString(w, ": keep-alive\n\n")
	}
	io.WriteString(w, `data: {"svc":{"worker":{"id":"w1"}}}`+"\n\n")
	if g.misbehave == "drop-final" {
		io.WriteString(w, doneEvent)
		return
	}
	w.Write(streamEnd(s))
}

func newClient(srv *httptest.Server, prefix string) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(srv.URL+prefix+"/"),
		option.WithAPIKey("test-key"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: NewTransport(srv.Client().Transport, nil)}),
	)
}

func chatParams(model, prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
}

func TestTransportOpenAI(t *testing.T) {
	g, srv := newFakeGateway(t, testKey(t, 1))
	ctx := context.Background()
	for _, prefix := range []string{"/v1", "/api/v1"} {
		t.Run(prefix, func(t *testing.T) {
			client := newClient(srv, prefix)

			comp, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "a secret question"))
			if err != nil {
				t.Fatal(err)
			}
			if got := comp.Choices[0].Message.Content; got != "echo: a secret question" {
				t.Fatalf("content %q", got)
			}
			if svc := comp.JSON.ExtraFields["svc"].Raw(); !strings.Contains(svc, `"w1"`) {
				t.Fatalf("svc annotation %q", svc)
			}

			stream := client.Chat.Completions.NewStreaming(ctx, chatParams("chat-model", "another secret"))
			var text strings.Builder
			for stream.Next() {
				for _, c := range stream.Current().Choices {
					text.WriteString(c.Delta.Content)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if text.String() != "echo: another secret" {
				t.Fatalf("streamed %q", text.String())
			}

			emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model: "embed-model", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("secret text")},
			})
			if err != nil {
				t.Fatal(err)
			}
			if e := emb.Data[0].Embedding; len(e) != 2 || e[1] != float64(len("secret text")) {
				t.Fatalf("embedding %v", e)
			}

			// Everything else passes through.
			models, err := client.Models.List(ctx)
			if err != nil || len(models.Data) != 1 {
				t.Fatalf("models %v, %v", models, err)
			}
		})
	}
	if fetches, _ := g.counts(); fetches != 2 { // once per prefix: the transports are separate
		t.Fatalf("%d key fetches", fetches)
	}
}

func TestTransportRefetchesOnUnknownKey(t *testing.T) {
	old, next := testKey(t, 1), testKey(t, 2)
	g, srv := newFakeGateway(t, old)
	client := newClient(srv, "/v1")
	ctx := context.Background()
	if _, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "one")); err != nil {
		t.Fatal(err)
	}
	// The worker restarts with a new key; the client still has the old.
	g.disconnect(old)
	g.connect(next)
	comp, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "two"))
	if err != nil {
		t.Fatal(err)
	}
	if fetches, requests := g.counts(); comp.Choices[0].Message.Content != "echo: two" || fetches != 2 || requests != 3 {
		t.Fatalf("content %q after %d fetches, %d requests", comp.Choices[0].Message.Content, fetches, requests)
	}

	// No worker at all: one refetch, then the gateway's 503 as it is.
	g.disconnect(next)
	g.set(func() { g.listed = []PublicKeyInfo{testPub(next, "chat-model")} })
	_, err = client.Chat.Completions.New(ctx, chatParams("chat-model", "three"))
	var apiErr *openai.Error
	if fetches, _ := g.counts(); !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || fetches != 3 {
		t.Fatalf("err %v after %d fetches", err, fetches)
	}
}

func TestTransportErrors(t *testing.T) {
	g, srv := newFakeGateway(t, testKey(t, 1))
	client := newClient(srv, "/v1")
	ctx := context.Background()
	var apiErr *openai.Error

	// A clear gateway error passes as it is.
	g.set(func() { g.listed[0].Models = append(g.listed[0].Models, "busy-model") })
	_, err := client.Chat.Completions.New(ctx, chatParams("busy-model", "hi"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("busy: %v", err)
	}

	// A worker's sealed error keeps its status and is opened.
	_, err = client.Chat.Completions.New(ctx, chatParams("chat-model", "too long"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Message != "prompt too long: too long" {
		t.Fatalf("sealed error: %v", err)
	}

	// No key serves the model: the request is not sent at all.
	_, before := g.counts()
	_, err = client.Chat.Completions.New(ctx, chatParams("other-model", "hi"))
	if _, after := g.counts(); !errors.Is(err, ErrNoKey) || after != before {
		t.Fatalf("no key: %v", err)
	}

	// Fail closed on a success that is not sealed, or is cut short.
	for _, m := range []string{"unsealed", "body-for-stream"} {
		g.set(func() { g.misbehave = m })
		if _, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "hi")); m == "unsealed" && !errors.Is(err, ErrInvalidReply) {
			t.Fatalf("%s: %v", m, err)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, chatParams("chat-model", "hi"))
		for stream.Next() {
		}
		if !errors.Is(stream.Err(), ErrInvalidReply) {
			t.Fatalf("%s stream: %v", m, stream.Err())
		}
	}
	g.set(func() { g.misbehave = "drop-final" })
	stream := client.Chat.Completions.NewStreaming(ctx, chatParams("chat-model", "hi"))
	n := 0
	for stream.Next() {
		n++
	}
	if !errors.Is(stream.Err(), ErrTruncated) || n != 2 {
		t.Fatalf("truncated stream: %d chunks, %v", n, stream.Err())
	}
	g.set(func() { g.misbehave = "" })

	// The key directory's refusal reaches the client as the answer.
	_, srv2 := newFakeGateway(t, testKey(t, 1))
	g2 := srv2.Config.Handler.(*fakeGateway)
	g2.set(func() { g2.keysStatus = 403 })
	client2 := newClient(srv2, "/v1")
	_, err = client2.Chat.Completions.New(ctx, chatParams("chat-model", "hi"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 || !strings.Contains(string(apiErr.DumpResponse(true)), "plan_required") {
		t.Fatalf("plan: %v", err)
	}
	if _, requests := g2.counts(); requests != 0 {
		t.Fatalf("%d requests sent without a key", requests)
	}
}

// An opened reply has the type of what was asked for, and an opened error
// is JSON, whatever the request would have had back.
func TestTransportOpenedTypes(t *testing.T) {
	_, srv := newFakeGateway(t, testKey(t, 1))
	hc := &http.Client{Transport: NewTransport(srv.Client().Transport, nil)}
	for _, tc := range []struct {
		input, status, ctype, body string
	}{
		{"hello", "200 OK", "audio/wav", "RIFF....WAVE"},
		{"too long", "400 Bad Request", "application/json", "input too long"},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/audio/speech",
			strings.NewReader(`{"model":"speech-model","input":`+strconv.Quote(tc.input)+`,"voice":"alloy"}`))
		req.Header.Set("Authorization", "Bearer test-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Status != tc.status || mediaType(resp.Header) != tc.ctype || !strings.Contains(string(b), tc.body) {
			t.Fatalf("%s: %s %s %s", tc.input, resp.Status, resp.Header.Get("Content-Type"), b)
		}
	}
}

func TestTransportPinned(t *testing.T) {
	kp := testKey(t, 1)
	_, srv := newFakeGateway(t, kp)
	ctx := context.Background()
	for _, tc := range []struct {
		pin string
		ok  bool
	}{{Fingerprint(kp.Public().PublicKey), true}, {Fingerprint(testKey(t, 2).Public().PublicKey), false}} {
		tr := NewTransport(srv.Client().Transport, Pinned(Directory{Transport: srv.Client().Transport}, strings.ToUpper(tc.pin)))
		client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: tr}))
		_, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "hi"))
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, ErrNoKey) {
			t.Fatalf("pinned %v: %v", tc.ok, err)
		}
	}
}

// A request pinned to a worker (X-Svc-Worker-Id) is sealed to that
// worker's key, which the gateway requires; a worker with no key for the
// model gets nothing sent.
func TestTransportSealsToThePinnedWorker(t *testing.T) {
	k1, k2 := testKey(t, 1), testKey(t, 2)
	g, srv := newFakeGateway(t, k1, k2)
	ctx := context.Background()
	tr := NewTransport(srv.Client().Transport, Directory{Transport: srv.Client().Transport})
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: tr}))
	for range 12 {
		if _, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "hi"), option.WithHeader(PinHeader, "w-"+k2.KeyID())); err != nil {
			t.Fatal(err)
		}
	}
	_, before := g.counts()
	_, err := client.Chat.Completions.New(ctx, chatParams("chat-model", "hi"), option.WithHeader(PinHeader, "w-gone"))
	if _, after := g.counts(); !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "w-gone") || after != before {
		t.Fatalf("pinned to a worker without a key: %v, %d requests sent", err, after-before)
	}
}

// Inference the gateway has no private form of is refused rather than
// sent in the clear, unless the Transport allows it; what is not
// inference passes.
func TestTransportRefusesClearOnlyInference(t *testing.T) {
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sent = append(sent, r.URL.Path+" "+string(b))
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	tr := NewTransport(srv.Client().Transport, Directory{Transport: srv.Client().Transport})
	post := func(path string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"model":"m","input":"a secret"}`))
		req.Header.Set("Content-Type", "application/json")
		return tr.RoundTrip(req)
	}
	for _, path := range []string{"/v1/responses", "/api/v1/completions", "/v1/messages", "/v1//moderations", "/v1/audio/translations"} {
		if _, err := post(path); !errors.Is(err, ErrClearOnly) {
			t.Errorf("%s: %v, want ErrClearOnly", path, err)
		}
	}
	if len(sent) != 0 {
		t.Fatalf("sent in the clear: %q", sent)
	}
	if resp, err := post("/v1/other"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("another route: %v", err)
	}
	tr.AllowClear = true
	if resp, err := post("/v1/responses"); err != nil || resp.StatusCode != 404 || len(sent) != 2 {
		t.Fatalf("allowed in the clear: %v, sent %q", err, sent)
	}
}

func TestTransportRefusesUnsealable(t *testing.T) {
	_, srv := newFakeGateway(t, testKey(t, 1))
	tr := NewTransport(srv.Client().Transport, nil)
	for _, body := range []string{"", "not json", `{"messages":[]}`, `{"model":"chat-model","Model":"x"}`} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer test-key")
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
			t.Fatalf("sent %q", body)
		}
	}
}

// A path the gateway routes as inference is sealed however it is written:
// the gateway decodes it and makes runs of slashes one, so a request the
// transport took for another route would go out in the clear.
func TestSealedRouteAsTheGatewayRoutes(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions":         "",
		"/v1//chat/completions":        "",
		"//api/v1/embeddings/":         "",
		"/gw/v1/%63hat/completions":    "/gw",
		"/gw//api//v1//audio/speech":   "/gw",
		"/v1/models":                   "-",
		"/v1/chat/completions/extra":   "-",
		"/v1/chat%2Fcompletions":       "",
		"/api/v1/images//generations/": "",
		"/api/v1/rerank?x=1":           "",
		"/v1/audio/transcriptions///":  "",
	} {
		u, err := url.Parse("http://gw.test" + path)
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{Method: http.MethodPost, URL: u, Header: http.Header{"Content-Type": {"application/json"}}}
		base, ok := sealedRoute(req)
		switch {
		case want == "-" && ok:
			t.Errorf("%s sealed", path)
		case want != "-" && (!ok || base.Path != want):
			t.Errorf("%s: sealed %v, base %v, want %q", path, ok, base, want)
		}
	}
}

// Requests that need the same keys at once share one directory fetch.
func TestTransportSharesADirectoryFetch(t *testing.T) {
	g, srv := newFakeGateway(t, testKey(t, 1))
	client := newClient(srv, "/v1")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if _, err := client.Chat.Completions.New(ctx, chatParams("chat-model", fmt.Sprint("n", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if fetches, requests := g.counts(); fetches != 1 || requests != 16 {
		t.Fatalf("%d directory fetches for %d requests", fetches, requests)
	}
}

// An upload whose envelope would be over the gateway's audio limit is
// refused before it is sent, saying why: sealing adds a third.
func TestTransportRefusesAnUploadOverTheLimit(t *testing.T) {
	g, srv := newFakeGateway(t, testKey(t, 1))
	tr := NewTransport(srv.Client().Transport, nil)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("model", "speech-model")
	fw, _ := mw.CreateFormFile("file", "big.wav")
	_, _ = fw.Write(make([]byte, 20<<20))
	_ = mw.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/audio/transcriptions", &body)
	req.Header.Set("Authorization", "Bearer test-key")
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a 20 MB upload was sent sealed")
	}
	if _, requests := g.counts(); requests != 0 || !strings.Contains(err.Error(), "26 MB limit") {
		t.Fatalf("%d requests, err %v", requests, err)
	}
}
