package e2ee

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// KeySource fetches an organisation's published keys. gateway is the
// gateway's base URL (scheme, host and any path before /v1 or /api/v1);
// header is the inference request's, for its credentials.
type KeySource interface {
	Keys(ctx context.Context, gateway *url.URL, header http.Header) ([]PublicKeyInfo, error)
}

// Directory is the gateway's key directory, GET {gateway}/api/v1/e2e/keys,
// asked with the inference request's own credentials.
type Directory struct {
	// Transport sends the request; nil means http.DefaultTransport.
	Transport http.RoundTripper
}

// maxDirectory bounds the key directory: a key is about 1.7 kB of JSON.
const maxDirectory = 8 << 20

// Keys implements KeySource.
func (d Directory) Keys(ctx context.Context, gateway *url.URL, header http.Header) ([]PublicKeyInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gateway.JoinPath("api/v1/e2e/keys").String(), nil)
	if err != nil {
		return nil, fmt.Errorf("e2ee: key directory: %w", err)
	}
	for _, h := range []string{"Authorization", "X-Api-Key", "User-Agent"} {
		if v := header.Values(h); len(v) > 0 {
			req.Header[h] = slices.Clone(v)
		}
	}
	req.Header.Set("Accept", "application/json")
	rt := d.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("e2ee: key directory: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDirectory+1))
	if err != nil {
		return nil, fmt.Errorf("e2ee: key directory: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{StatusCode: resp.StatusCode, Header: resp.Header.Clone(), Body: body}
	}
	if len(body) > maxDirectory {
		return nil, fmt.Errorf("e2ee: key directory larger than %d bytes", maxDirectory)
	}
	var list struct {
		Keys []PublicKeyInfo `json:"keys"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("e2ee: key directory: %w", err)
	}
	return list.Keys, nil
}

// StatusError is the key directory's refusal (401, 403 plan_required and
// so on). The transport answers the inference request with it, so the
// gateway's error reaches the client as on a clear request.
type StatusError struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

func (e *StatusError) Error() string {
	if msg := clearMessage(e.Body); msg != "" {
		return fmt.Sprintf("e2ee: key directory answered %d: %s", e.StatusCode, msg)
	}
	return fmt.Sprintf("e2ee: key directory answered %d", e.StatusCode)
}

func (e *StatusError) response(req *http.Request) *http.Response {
	resp := &http.Response{
		Status:     fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode)),
		StatusCode: e.StatusCode,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     e.Header.Clone(),
		Request:    req,
	}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	setBody(resp, e.Body, "")
	return resp
}

// Pinned passes on only the keys whose Fingerprint is listed. The key
// directory is served by the gateway the requests are hidden from; a
// client that learns its workers' fingerprints another way (from the
// worker's operator) need not trust the directory.
func Pinned(src KeySource, fingerprints ...string) KeySource {
	allow := make([]string, len(fingerprints))
	for i, f := range fingerprints {
		allow[i] = strings.ToLower(f)
	}
	return pinned{src: src, allow: allow}
}

type pinned struct {
	src   KeySource
	allow []string
}

func (p pinned) Keys(ctx context.Context, gateway *url.URL, header http.Header) ([]PublicKeyInfo, error) {
	keys, err := p.src.Keys(ctx, gateway, header)
	return slices.DeleteFunc(keys, func(k PublicKeyInfo) bool {
		return !slices.Contains(p.allow, Fingerprint(k.PublicKey))
	}), err
}

// Transport is an http.RoundTripper that seals chat completion,
// embedding, rerank, image generation and audio requests to a worker's key
// (the one X-Svc-Worker-Id names, when it is set) and opens the replies.
// Inference with no private form fails with ErrClearOnly unless
// AllowClear is set; every other request passes through. A request it
// cannot seal fails: it is never sent in the clear.
type Transport struct {
	base http.RoundTripper
	keys KeySource
	// AllowClear sends inference that has no private form (ErrClearOnly)
	// in the clear rather than refuse it.
	AllowClear bool

	mu    sync.Mutex
	cache map[[32]byte]cachedKeys
	// loads is the directory fetch under way for a cache entry, which
	// every request that needs it waits for rather than fetching again.
	loads singleflight.Group
}

type cachedKeys struct {
	keys    []PublicKeyInfo // only entries that passed publicKey
	fetched time.Time
}

const (
	// keyTTL bounds how long a new worker's key goes unused; a departed
	// worker's key is dropped sooner, on its first 503.
	keyTTL = 5 * time.Minute
	// maxCached bounds the cache for a process sealing for many keys.
	maxCached = 1024
	// directoryTimeout bounds a fetch of the key directory, which several
	// requests may be waiting for: it is not ended by one of them leaving.
	directoryTimeout = 30 * time.Second
	// errorCodeHeader and noWorkerCode mark a request sealed to a key no
	// connected worker holds.
	errorCodeHeader = "X-Svc-Error-Code"
	noWorkerCode    = "no_private_inference_worker"
)

// NewTransport wraps base (nil: http.DefaultTransport). keys nil means the
// gateway's own key directory, fetched through base.
func NewTransport(base http.RoundTripper, keys KeySource) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	if keys == nil {
		keys = Directory{Transport: base}
	}
	return &Transport{base: base, keys: keys, cache: map[[32]byte]cachedKeys{}}
}

// clearOnly reports whether req is inference the gateway serves only in
// the clear.
func clearOnly(req *http.Request) bool {
	if req.Method != http.MethodPost || req.URL == nil || mediaType(req.Header) == ContentType {
		return false
	}
	p := routePath(req.URL)
	for _, s := range [...]string{"/v1/completions", "/v1/responses", "/v1/messages", "/v1/moderations", "/v1/audio/translations"} {
		if strings.HasSuffix(p, s) {
			return true
		}
	}
	return false
}

// sealedRoute reports whether req is to be sealed and, if so, the
// gateway's base URL.
func sealedRoute(req *http.Request) (*url.URL, bool) {
	if req.Method != http.MethodPost || req.URL == nil {
		return nil, false
	}
	if mediaType(req.Header) == ContentType {
		return nil, false // sealed already
	}
	p := routePath(req.URL)
	// The /api/v1 forms come first so the gateway's base is cut at the
	// right place.
	for _, s := range [...]string{"/api/v1/chat/completions", "/api/v1/embeddings", "/api/v1/rerank", "/api/v1/images/generations",
		"/api/v1/audio/speech", "/api/v1/audio/transcriptions",
		"/v1/chat/completions", "/v1/embeddings", "/v1/rerank", "/v1/images/generations", "/v1/audio/speech", "/v1/audio/transcriptions"} {
		if strings.HasSuffix(p, s) {
			g := *req.URL
			g.Path, g.RawPath, g.RawQuery, g.Fragment = strings.TrimSuffix(p, s), "", "", ""
			return &g, true
		}
	}
	return nil, false
}

// routePath is the path the gateway routes u by: decoded (url.URL's Path
// is), runs of slashes made one, as the gateway reads a path, so that
// /v1//chat/completions is sealed as the chat completion the gateway
// serves it as; and no trailing slash.
func routePath(u *url.URL) string {
	p := u.Path
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return strings.TrimSuffix(p, "/")
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	gateway, ok := sealedRoute(req)
	if !ok {
		if !t.AllowClear && clearOnly(req) {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("e2ee: %w: POST %s would be sent in the clear (set the Transport's AllowClear to send it so)", ErrClearOnly, routePath(req.URL))
		}
		return t.base.RoundTrip(req)
	}
	body, err := readRequestBody(req)
	if err != nil {
		return nil, err
	}
	ctype := "application/json"
	var f bodyFields
	switch path := routePath(req.URL); {
	case strings.HasSuffix(path, "/audio/transcriptions"):
		// An upload is sealed with its Content-Type on a line before it,
		// for its multipart boundary; the reply opens to the format asked.
		var format string
		if f.model, format, err = uploadFields(req.Header.Get("Content-Type"), body); err != nil {
			return nil, fmt.Errorf("e2ee: %w", err)
		}
		body = append([]byte(req.Header.Get("Content-Type")+"\n"), body...)
		ctype = transcriptType(format)
		f.upload = true
	case strings.HasSuffix(path, "/audio/speech"):
		ctype = "audio/wav"
		fallthrough
	default:
		if f, err = routingFields(body); err != nil {
			return nil, fmt.Errorf("e2ee: %w", err)
		}
	}
	resp, err := t.send(req, gateway, body, f, ctype, false)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(errorCodeHeader) == noWorkerCode {
		// The key left with its worker; the directory lists the current
		// ones. Once: a second miss is the gateway's answer to give.
		resp.Body.Close()
		return t.send(req, gateway, body, f, ctype, true)
	}
	return resp, nil
}

// uploadFields reads a transcription upload's model and response format.
func uploadFields(contentType string, body []byte) (model, format string, err error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", "", errors.New("a transcription is sealed from a multipart/form-data upload")
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", "", fmt.Errorf("reading the upload: %w", err)
		}
		switch part.FormName() {
		case "model", "response_format":
			v, err := io.ReadAll(io.LimitReader(part, MaxModel+1))
			if err != nil {
				return "", "", fmt.Errorf("reading the upload: %w", err)
			}
			if part.FormName() == "model" {
				model = strings.TrimSpace(string(v))
			} else {
				format = strings.TrimSpace(string(v))
			}
		}
	}
	if model == "" {
		return "", "", errors.New("the upload names no model")
	}
	return model, format, nil
}

// transcriptType is the Content-Type a transcript in format has, as the
// gateway answers it in the clear.
func transcriptType(format string) string {
	switch format {
	case "text":
		return "text/plain; charset=utf-8"
	case "srt":
		return "application/x-subrip; charset=utf-8"
	case "vtt":
		return "text/vtt; charset=utf-8"
	}
	return "application/json"
}

func readRequestBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, errors.New("e2ee: the request has no body to seal")
	}
	defer req.Body.Close()
	b, err := io.ReadAll(io.LimitReader(req.Body, MaxEnvelope+1))
	if err != nil {
		return nil, fmt.Errorf("e2ee: reading the request body: %w", err)
	}
	if len(b) > MaxEnvelope {
		return nil, fmt.Errorf("e2ee: request body larger than %d bytes", MaxEnvelope)
	}
	return b, nil
}

// send seals body to a key for its model, sends it and opens the reply.
func (t *Transport) send(req *http.Request, gateway *url.URL, body []byte, f bodyFields, ctype string, refresh bool) (*http.Response, error) {
	key, err := t.pick(req.Context(), gateway, req.Header, f.model, refresh)
	if se := (*StatusError)(nil); errors.As(err, &se) {
		return se.response(req), nil
	}
	if err != nil {
		return nil, err
	}
	envelope, opener, err := SealRequest(key, f.model, f.stream, body)
	if err != nil {
		return nil, err
	}
	if f.upload && len(envelope) > MaxUpload {
		return nil, fmt.Errorf("e2ee: the sealed upload is %.1f MB, over the gateway's %d MB limit for audio (sealing adds a third: about %d MB of audio fits)",
			float64(len(envelope))/1e6, MaxUpload>>20, MaxUpload>>20*3/4)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(envelope))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(envelope)), nil }
	out.ContentLength = int64(len(envelope))
	out.Header.Set("Content-Type", ContentType)
	out.Header.Del("Content-Length")
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	resp.Request = req
	return openResponse(resp, opener, f.stream, ctype)
}

// openResponse turns the gateway's reply into the clear one. Only a reply
// that opens is returned as a success; a non-2xx that is not sealed is the
// gateway's own error, which holds nothing secret, and passes as it is.
func openResponse(resp *http.Response, o *ResponseOpener, stream bool, ctype string) (*http.Response, error) {
	ok := resp.StatusCode/100 == 2
	if ok && stream && mediaType(resp.Header) == "text/event-stream" {
		body := resp.Body
		resp.Body = struct {
			io.Reader
			io.Closer
		}{o.NewStreamReader(body), body}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		resp.Header.Set("Content-Type", "text/event-stream")
		return resp, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxReply+1))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("e2ee: reading the reply: %w", err)
	}
	if len(raw) > MaxReply {
		return nil, replyError("reply larger than %d bytes", MaxReply)
	}
	if isSealedReply(raw) {
		if ok && stream {
			// The worker streams what was asked to be streamed; a body in
			// its place was rebuilt by someone else.
			return nil, replyError("a streaming request got a non-streaming %d reply", resp.StatusCode)
		}
		plain, err := o.OpenBody(raw)
		if err != nil {
			return nil, err
		}
		if !ok {
			// A worker's error is JSON whatever a success would have been
			// (speech's audio, a transcript's text).
			ctype = "application/json"
		}
		if !strings.HasPrefix(ctype, "application/json") {
			setBody(resp, plain, ctype)
			return resp, nil
		}
		setBody(resp, withClearSvc(plain, raw), ctype)
		return resp, nil
	}
	if ok {
		if msg := clearMessage(raw); msg != "" {
			return nil, replyError("the %d reply is not sealed: %s", resp.StatusCode, msg)
		}
		return nil, replyError("the %d reply is not sealed", resp.StatusCode)
	}
	setBody(resp, raw, "")
	return resp, nil
}

func isSealedReply(raw []byte) bool {
	var probe struct {
		Version json.RawMessage `json:"svc_e2e"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.Version != nil
}

func setBody(resp *http.Response, b []byte, contentType string) {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	if contentType != "" {
		resp.Header.Set("Content-Type", contentType)
	}
}

func mediaType(h http.Header) string {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt
}

// withClearSvc copies the gateway's clear "svc" annotation (the serving
// worker) into an opened JSON object that has none, so a private reply
// reads like a clear one. It is the one part of an opened body that is
// not authenticated, and it says only what the gateway knows anyway.
func withClearSvc(plain, reply []byte) []byte {
	var r struct {
		Svc json.RawMessage `json:"svc"`
	}
	if json.Unmarshal(reply, &r) != nil || len(r.Svc) == 0 || r.Svc[0] != '{' {
		return plain
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(plain, &obj) != nil || obj == nil {
		return plain // not a JSON object
	}
	if _, ok := obj["svc"]; ok {
		return plain
	}
	// Splice before the closing brace, keeping the worker's bytes.
	t := bytes.TrimSpace(plain)
	out := append([]byte(nil), t[:len(t)-1]...)
	if len(obj) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"svc":`...)
	out = append(out, r.Svc...)
	return append(out, '}')
}

// pick chooses a key for model. The key decides the worker, so among
// several workers serving the model one is chosen at random.
func (t *Transport) pick(ctx context.Context, gateway *url.URL, header http.Header, model string, refresh bool) (PublicKeyInfo, error) {
	keys, fresh, err := t.cachedKeys(ctx, gateway, header, refresh)
	if err != nil {
		return PublicKeyInfo{}, err
	}
	// A request pinned to a worker (X-Svc-Worker-Id) is sealed to that
	// worker's key: the gateway refuses one sealed to another's.
	pin := strings.TrimSpace(header.Get(PinHeader))
	c := serving(keys, model, pin)
	if len(c) == 0 && !fresh {
		// A worker that came online since the fetch may serve it.
		if keys, _, err = t.cachedKeys(ctx, gateway, header, true); err != nil {
			return PublicKeyInfo{}, err
		}
		c = serving(keys, model, pin)
	}
	if len(c) == 0 {
		if pin != "" {
			return PublicKeyInfo{}, fmt.Errorf("e2ee: %w %q on the worker %s named by %s", ErrNoKey, model, pin, PinHeader)
		}
		return PublicKeyInfo{}, fmt.Errorf("e2ee: %w %q", ErrNoKey, model)
	}
	return c[rand.IntN(len(c))], nil
}

// PinHeader is the request header that pins a request to one worker.
const PinHeader = "X-Svc-Worker-Id"

// serving lists the keys of workers serving model, of the worker pin
// alone when it is set.
func serving(keys []PublicKeyInfo, model, pin string) []PublicKeyInfo {
	var c []PublicKeyInfo
	for _, k := range keys {
		if k.Serves(model) && (pin == "" || k.WorkerID == pin) {
			c = append(c, k)
		}
	}
	return c
}

// cachedKeys returns the keys for a gateway and credential, fetching them
// when refresh is set or the cache is stale; fresh reports a fetch.
func (t *Transport) cachedKeys(ctx context.Context, gateway *url.URL, header http.Header, refresh bool) (keys []PublicKeyInfo, fresh bool, err error) {
	// Keyed by credential as well: one process may act for several
	// organisations. Hashed so the cache holds no credentials.
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q", gateway.String(), header.Values("Authorization"), header.Values("X-Api-Key"))
	var id [32]byte
	h.Sum(id[:0])

	t.mu.Lock()
	e, ok := t.cache[id]
	t.mu.Unlock()
	if ok && !refresh && time.Since(e.fetched) < keyTTL {
		return e.keys, false, nil
	}
	// A refresh is a fetch of its own: one that joined a plain look-up
	// could be handed the very keys it was refreshing.
	key := string(id[:])
	if refresh {
		key += "\x00refresh"
	}
	load := t.loads.DoChan(key, func() (any, error) {
		if !refresh {
			// A fetch may have ended between the look above and this
			// one, which would otherwise fetch again.
			t.mu.Lock()
			e, ok := t.cache[id]
			t.mu.Unlock()
			if ok && time.Since(e.fetched) < keyTTL {
				return e.keys, nil
			}
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), directoryTimeout)
		defer cancel()
		all, err := t.keys.Keys(lctx, gateway, header)
		if err != nil {
			return nil, err
		}
		// Entries this client cannot use (another version or suite, a key
		// id that does not match its key) are dropped, not fatal: a
		// directory may list keys for newer clients.
		keys := slices.DeleteFunc(slices.Clone(all), func(k PublicKeyInfo) bool {
			_, err := k.publicKey()
			return err != nil
		})
		t.mu.Lock()
		if len(t.cache) >= maxCached {
			clear(t.cache)
		}
		t.cache[id] = cachedKeys{keys: keys, fetched: time.Now()}
		t.mu.Unlock()
		return keys, nil
	})
	select {
	case r := <-load:
		if r.Err != nil {
			return nil, false, r.Err
		}
		return r.Val.([]PublicKeyInfo), true, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}
