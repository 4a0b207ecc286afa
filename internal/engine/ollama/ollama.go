// Package ollama is the worker's adapter for Ollama over its native API
// (/api/chat, /api/generate, /api/embed, /api/tags, /api/show, /api/ps,
// /api/pull). It translates OpenAI-format requests to Ollama's own and the
// answers back, so that the gateway sees the same shapes whatever engine a
// worker runs. Raw completions go to /api/generate with raw set, so that a
// guard model gets the worker's prompt rather than its own template's.
//
// The native API rather than Ollama's /v1 is used because only it reports
// load and evaluation timings, model capabilities and loaded state.
package ollama

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Kind is the engine kind this adapter reports.
const Kind = "ollama"

const (
	// maxErrorBody bounds what is read of an error answer.
	maxErrorBody = 1 << 20
	// maxLine bounds one NDJSON line or one whole JSON answer: a line
	// carries a few tokens, but a non-streamed reply or an embeddings
	// batch is one object.
	maxLine = 16 << 20
)

// Config configures an Engine.
type Config struct {
	// BaseURL is Ollama's address, e.g. http://127.0.0.1:11434.
	BaseURL string
	// HTTPClient is optional. The default has no overall Timeout: the
	// request context bounds every call, and generations run long.
	HTTPClient *http.Client
	// Now is an optional clock, for the "created" fields.
	Now func() time.Time
}

// Engine talks to one Ollama server. It is safe for concurrent use.
type Engine struct {
	base   string
	client *http.Client
	now    func() time.Time

	mu sync.Mutex
	// shows caches /api/show per model name; an entry is reused while the
	// model's digest is unchanged.
	shows map[string]showEntry
	// loaded is the set of models Ollama holds in memory, as of the last
	// /api/ps plus the models served since: each maps to 0 when /api/ps
	// listed it, else to the serve that marked it (a count from marks).
	// loadedKnown is false until the first /api/ps: before it, cold
	// starts cannot be told apart.
	loaded      map[string]uint64
	marks       uint64
	loadedKnown bool
	// kept are the models Keep was asked to keep (by ModelKey): every
	// request for one tells Ollama to keep it loaded for good. A request
	// that does not say leaves a loaded model's keep_alive as it is, but
	// one that loads it again (Ollama restarted, or evicted it) would load
	// it for Ollama's idle timeout alone.
	kept map[string]bool
	// contexts are the contexts, by ModelKey, that /api/ps last showed
	// each model loaded with.
	contexts map[string]int
}

var (
	_ engine.Engine    = (*Engine)(nil)
	_ engine.Installer = (*Engine)(nil)
	_ engine.Info      = (*Engine)(nil)
	_ engine.Keeper    = (*Engine)(nil)
)

// New returns an adapter for the Ollama server at cfg.BaseURL.
func New(cfg Config) (*Engine, error) {
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("ollama: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ollama: base URL %q: want http(s)://host[:port]", cfg.BaseURL)
	}
	e := &Engine{
		base:     base,
		client:   cfg.HTTPClient,
		now:      cfg.Now,
		shows:    make(map[string]showEntry),
		loaded:   make(map[string]uint64),
		kept:     make(map[string]bool),
		contexts: make(map[string]int),
	}
	if e.client == nil {
		e.client = defaultClient()
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e, nil
}

// defaultClient connects directly (no proxy from the environment: Ollama
// runs on this host or its LAN) and keeps enough idle connections for
// Ollama's parallel slots.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConns = 64
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}

// Kind returns "ollama".
func (e *Engine) Kind() string { return Kind }

// Info describes the engine for the worker's hello.
func (e *Engine) Info() api.EngineInfo {
	return api.EngineInfo{Kind: Kind, URL: engine.PublicURL(e.base)}
}

// Serve runs one chat, completion or embeddings request; reranking and
// image generation, which Ollama does not serve, are a 501.
func (e *Engine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	switch req.Kind {
	case api.KindChat:
		return e.chat(ctx, req, sink)
	case api.KindCompletion:
		return e.generate(ctx, req, sink)
	case api.KindEmbeddings:
		return engine.ForKind(req.Kind, e.embed(ctx, req, sink))
	case api.KindRerank:
		// A lasting limitation of the engine, not of the request: 501, so
		// the client is told to use another model or worker.
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			"Ollama does not serve reranking; serve the model with vLLM or llama-server --reranking (svc worker --engine openai=URL)")
	case api.KindImages:
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			"Ollama does not serve image generation over its API; serve the model with an OpenAI-compatible image server (svc worker --engine openai=URL)")
	}
	return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
		fmt.Sprintf("the Ollama engine does not serve %q requests", req.Kind))
}

// send makes one call to Ollama with in as the JSON body (nil for none).
// An error means no response arrived; the caller checks the status.
func (e *Engine) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/x-ndjson")
	return e.client.Do(req)
}

// postWhole posts a client's request, in, to path and reads the answer
// whole, for the requests Ollama answers with one JSON object; what names
// the answer in a failure, which comes back as the client's Result.
func (e *Engine) postWhole(ctx context.Context, path string, in any, what string) ([]byte, *api.Result) {
	resp, err := e.send(ctx, http.MethodPost, path, in)
	if err != nil {
		if ctx.Err() != nil {
			return nil, engine.Cancelled()
		}
		return nil, engine.Unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, engine.ErrorResult(resp.StatusCode, readError(resp.Body))
	}
	b, err := readAll(resp.Body, maxLine)
	if err != nil {
		if ctx.Err() != nil {
			return nil, engine.Cancelled()
		}
		return nil, engine.Unreachable(fmt.Errorf("read %s: %w", what, err))
	}
	return b, nil
}

// call makes a call whose answer is one JSON object, decoded into out.
func (e *Engine) call(ctx context.Context, method, path string, in, out any) error {
	resp, err := e.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return statusError(resp)
	}
	b, err := readAll(resp.Body, maxLine)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// statusError reads an error answer into a Go error, for the calls whose
// failures are not a client's Result (models, pull, keep).
func statusError(resp *http.Response) error {
	b := readError(resp.Body)
	var v struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &v) == nil && v.Error != "" {
		msg = v.Error
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &statusErr{status: resp.StatusCode, msg: msg}
}

// statusErr is an error answer of Ollama's.
type statusErr struct {
	status int
	msg    string
}

func (e *statusErr) Error() string { return fmt.Sprintf("ollama answered %d: %s", e.status, e.msg) }

// readError reads at most maxErrorBody of an error answer; a failure to
// read leaves what arrived, which is all ErrorResult needs.
func readError(r io.Reader) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, maxErrorBody))
	return b
}

var errTooLarge = errors.New("answer too large")

// readAll reads r whole, failing beyond limit bytes rather than
// truncating JSON into something misleading.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	return b, nil
}

// lines returns a scanner over NDJSON whose lines may be up to maxLine.
func lines(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	return sc
}

// hasError reports whether an NDJSON line carries an "error" member.
func hasError(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null" && string(raw) != `""`
}

// errorText is the message of an "error" member, which Ollama sends as a
// string.
func errorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// badAnswer is the result of an answer the adapter cannot read: a
// retryable 502, as another worker's Ollama may well do better.
func badAnswer(err error) *api.Result {
	return engine.ErrorResult(http.StatusBadGateway, []byte("unreadable answer from Ollama: "+err.Error()))
}

// marshal encodes v as JSON without escaping <, > and &, which model
// output is full of ("<think>", code) and OpenAI sends as is.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// newID returns a random identifier for completions and tool calls.
func newID(prefix string) string { return prefix + rand.Text() }

// ModelKey normalises a model name the way Ollama does, so "llama3" and
// "llama3:latest" are the same model in the loaded set.
func ModelKey(name string) string {
	name = strings.ToLower(strings.TrimSpace(name))
	if !strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		name += ":latest"
	}
	return name
}

// KeepForever is Ollama's keep_alive for a model never to be unloaded:
// any negative duration.
const KeepForever = -1

// EmbedsOnly reports whether msg is Ollama's refusal of /api/generate for
// a model that only embeds, which /api/embed loads instead.
func EmbedsOnly(status int, msg string) bool {
	return status == http.StatusBadRequest && strings.Contains(msg, "does not support generate")
}

// keepAlive is the keep_alive of a request for model: forever for a kept
// model, else nil for Ollama's own default.
func (e *Engine) keepAlive(model string) *int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kept[ModelKey(model)] {
		return ptr(KeepForever)
	}
	return nil
}

// keepRequest loads a model without running it: /api/generate and
// /api/embed load the model and answer at once when given no prompt or
// input.
type keepRequest struct {
	Model     string `json:"model"`
	KeepAlive int    `json:"keep_alive"`
}

// Keep loads model and keeps it loaded: a request with no prompt, and a
// keep_alive of forever on every request for it from then on. A model
// that only embeds does not generate, and is loaded through /api/embed.
func (e *Engine) Keep(ctx context.Context, model string) (time.Duration, error) {
	e.mu.Lock()
	e.kept[ModelKey(model)] = true
	e.mu.Unlock()
	in := keepRequest{Model: model, KeepAlive: KeepForever}
	var out struct {
		LoadDuration int64 `json:"load_duration"`
	}
	before := e.loadState(model)
	start := time.Now()
	err := e.call(ctx, http.MethodPost, "/api/generate", in, &out)
	var se *statusErr
	if errors.As(err, &se) && EmbedsOnly(se.status, se.msg) {
		err = e.call(ctx, http.MethodPost, "/api/embed", in, &out)
	}
	if err != nil {
		return 0, fmt.Errorf("keep %s loaded: %w", model, err)
	}
	e.markLoaded(model)
	if before.known && before.loaded {
		return 0, nil
	}
	// Ollama's answer to a load without a prompt carries no timings: the
	// call's own time is the load's, for a model known not to be loaded.
	// Unknown (no /api/ps yet) is no load: the worker keeps such a model
	// again at every listing, and reports only loads.
	switch {
	case out.LoadDuration > 0:
		return time.Duration(out.LoadDuration), nil
	case before.known:
		return time.Since(start), nil
	}
	return 0, nil
}

// loadState is what the adapter knew about a model before a request.
type loadState struct{ loaded, known bool }

func (e *Engine) loadState(model string) loadState {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, loaded := e.loaded[ModelKey(model)]
	return loadState{loaded: loaded, known: e.loadedKnown}
}

// markLoaded records that Ollama holds model now: it has just served it.
func (e *Engine) markLoaded(model string) {
	e.mu.Lock()
	e.marks++
	e.loaded[ModelKey(model)] = e.marks
	e.mu.Unlock()
}

// lastMark is taken before asking /api/ps, for setLoaded.
func (e *Engine) lastMark() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.marks
}

// setLoaded replaces the loaded set with what /api/ps reported. Models
// served after since stay: the answer may predate their load.
func (e *Engine) setLoaded(names map[string]bool, since uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	loaded := make(map[string]uint64, len(names))
	for n := range names {
		loaded[n] = 0
	}
	for n, mark := range e.loaded {
		if mark > since {
			loaded[n] = mark
		}
	}
	e.loaded = loaded
	e.loadedKnown = true
}

// timing turns Ollama's nanosecond counters into the Result's timing.
// Ollama reports a small load_duration even for a model already in memory,
// so the load counts as a cold start only when the model was known not to
// be loaded before the request.
func timing(before loadState, loadNs, promptNs int64, evalCount int, evalNs int64) api.Timing {
	var t api.Timing
	if promptNs > 0 {
		t.TTFTMs = ptr(ms(promptNs))
	}
	if evalCount > 0 && evalNs > 0 {
		t.TokensPerSecond = ptr(float64(evalCount) / (float64(evalNs) / 1e9))
	}
	if before.known && !before.loaded && loadNs > 0 {
		t.ModelLoadMs = ptr(ms(loadNs))
		t.ColdStart = ptr(true)
	}
	return t
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func ptr[T any](v T) *T { return &v }
