package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/harness"
)

// newMarker is a string sent only inside encrypted requests, which no
// byte of the gateway's may ever hold. It is made at run time: a constant
// would be in the test binary, which the gateway's process runs.
func newMarker() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "MARKER-" + hex.EncodeToString(b)
}

// privateClient is openai-go over the sealing transport, with base as the
// transport under it.
func privateClient(s *server, key string, base http.RoundTripper) openai.Client {
	t := e2ee.NewTransport(base, e2ee.Directory{Transport: base})
	return openai.NewClient(option.WithBaseURL(s.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: t}))
}

// Chat (whole and streamed), embeddings, speech and transcription sealed
// end to end with the
// official client over the transport: answered, the worker named beside
// the sealed reply, no estimate on the usage rows, and the marker nowhere
// in the gateway's data directory or logs.
func TestPrivateInference(t *testing.T) {
	marker := newMarker()
	s := startServer(t, "", "--log-level", "debug")
	key := s.adminKey()
	w := startWorker(t, s.URL, s.tokenFile(), "vault", "--engine", "sim=tps=0,ttft=0,rtf=0", "--log-level", "debug")
	client := privateClient(s, key, http.DefaultTransport)
	ctx := context.Background()

	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "sim-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a secret " + marker + "\nsim: tokens=12")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Usage.CompletionTokens != 12 {
		t.Fatalf("chat %+v", resp)
	}
	if svc := svcOf(t, resp.RawJSON()); svc["worker"] == nil {
		t.Errorf("no worker beside the sealed reply: %s", resp.RawJSON())
	}
	// The worker logs its key's fingerprint, which clients pin keys by.
	var dir struct {
		Keys []e2ee.PublicKeyInfo `json:"keys"`
	}
	if err := json.Unmarshal(s.do("GET", "/api/v1/e2e/keys", "", bearer(key)).Body, &dir); err != nil || len(dir.Keys) != 1 {
		t.Fatalf("key directory %+v: %v", dir, err)
	}
	if fp := e2ee.Fingerprint(dir.Keys[0].PublicKey); !strings.Contains(w.Log().String(), fp) {
		t.Errorf("the worker's log does not name its key's fingerprint %s", fp)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "sim-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream a secret " + marker + "\nsim: tokens=30")},
	})
	var text strings.Builder
	chunks := 0
	var usage openai.CompletionUsage
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
		chunks++
	}
	if err := stream.Err(); err != nil || chunks < 30 || text.Len() == 0 {
		t.Fatalf("stream: %d chunks, %q, %v", chunks, text.String(), err)
	}
	// Usage is always in a stream: the worker seals a sealed stream's.
	if usage.CompletionTokens != 30 || usage.PromptTokens == 0 || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
		t.Fatalf("sealed stream usage %+v", usage)
	}

	// max_tokens caps the answer apart from the thinking, sealed or not:
	// the worker holds a sealed chat's answer to it, as the gateway
	// cannot read the cap.
	capped, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "sim-reasoner", MaxTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("think " + marker + "\nsim: tokens=30 reasoning=5")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := capped.Choices[0]; c.FinishReason != "length" || len(strings.Fields(c.Message.Content)) > 3 ||
		capped.Usage.CompletionTokens != 7 {
		t.Fatalf("sealed chat capped at 2: %q, %s, usage %+v; want the answer cut at 2 after 5 of thinking",
			c.Message.Content, c.FinishReason, capped.Usage)
	}
	cappedStream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "sim-reasoner", MaxTokens: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("think " + marker + "\nsim: tokens=30 reasoning=5")},
	})
	answers, finish := 0, ""
	var cappedUsage openai.CompletionUsage
	for cappedStream.Next() {
		if u := cappedStream.Current().Usage; u.TotalTokens > 0 {
			cappedUsage = u
		}
		for _, ch := range cappedStream.Current().Choices {
			if ch.Delta.Content != "" {
				answers++
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := cappedStream.Err(); err != nil || answers != 2 || finish != "length" {
		t.Fatalf("sealed stream capped at 2: %d answer chunks, finish %q, %v", answers, finish, err)
	}
	// The engine, stopped at the cap, reported no usage: the worker
	// counted it, 5 of thinking and 2 of answer.
	if cappedUsage.CompletionTokens != 7 || cappedUsage.CompletionTokensDetails.ReasoningTokens != 5 || cappedUsage.PromptTokens == 0 {
		t.Fatalf("sealed stream capped at 2: usage %+v", cappedUsage)
	}

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "sim-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("embed " + marker)}})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings %+v, %v", emb, err)
	}

	speechResp, err := client.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "sim-tts", Input: "say " + marker,
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("nova")}, ResponseFormat: openai.AudioSpeechNewParamsResponseFormatWAV})
	if err != nil {
		t.Fatal(err)
	}
	wav, _ := io.ReadAll(speechResp.Body)
	speechResp.Body.Close()
	if speechResp.Header.Get("Content-Type") != "audio/wav" || speechResp.Header.Get("X-Worker-Name") != "vault" {
		t.Fatalf("speech headers %v", speechResp.Header)
	}
	spoken := checkSpeechWAV(t, wav).Seconds

	// A transcription: the upload sealed whole, the transcript rendered by
	// the worker in the format asked.
	clip := tone(t, 2, 16000)
	tr, err := client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(clip), "clip.wav", "audio/wav"), Model: "sim-stt",
		ResponseFormat: openai.AudioResponseFormatVerboseJSON, TimestampGranularities: []string{"segment"}})
	if err != nil || tr.AsTranscription().Text == "" || !strings.Contains(tr.RawJSON(), `"segments"`) || svcOf(t, tr.RawJSON())["worker"] == nil {
		t.Fatalf("sealed transcription %v: %s", err, tr.RawJSON())
	}
	var srt *http.Response
	_, _ = client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(clip), "clip.wav", "audio/wav"), Model: "sim-stt",
		ResponseFormat: openai.AudioResponseFormatSRT}, option.WithResponseInto(&srt))
	if srt == nil || srt.StatusCode != 200 || !strings.HasPrefix(srt.Header.Get("Content-Type"), "application/x-subrip") {
		t.Fatalf("sealed srt %+v", srt)
	}

	// Usage rows: written, no estimate but of the answers the worker
	// stopped at the cap, streamed or whole, which it counted.
	var rows []map[string]any
	harness.Eventually(5*time.Second, func() bool {
		_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(key)).Body, &rows)
		return len(rows) >= 8
	})
	if len(rows) != 8 {
		t.Fatalf("rows %v", rows)
	}
	for _, r := range rows {
		counted := r["model"] == "sim-reasoner"
		if r["status_code"].(float64) != 200 || r["tokens_estimated"] != counted ||
			counted && (r["completion_tokens"] != 7.0 || r["reasoning_tokens"] != 5.0) {
			t.Errorf("row %v", r)
		}
		// The gateway cannot open the audio made; the worker says how long.
		if r["request_type"] == "speech" && r["speech_seconds"] != spoken {
			t.Errorf("sealed speech row %v, want speech_seconds %v", r, spoken)
		}
	}

	// A file that is not audio: the check's own message, sealed, as a
	// clear upload gets it (the spec's "Unsupported audio format").
	_, err = client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File: openai.File(strings.NewReader("not audio "+marker), "a.wav", "audio/wav"), Model: "sim-stt"})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "Unsupported audio format") {
		t.Errorf("a sealed upload that is not audio: %v", err)
	}

	assertNoPlaintext(t, s, w, marker)
}

func assertNoPlaintext(t *testing.T, s *server, w *workerProc, marker string) {
	t.Helper()
	if found, ok := memoryHolds(w.Pid(), []byte(marker)); ok && !found {
		t.Error("the memory scan does not find the marker even in the worker")
	}
	switch found, ok := memoryHolds(s.Pid(), []byte(marker)); {
	case !ok:
		t.Log("cannot read the gateway's memory here; skipped that check")
	case found:
		t.Error("the gateway's memory holds the marker")
	}
	s.stop(15) // SIGTERM: the store is closed and everything flushed
	_ = filepath.WalkDir(s.Data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".sock") {
			return nil
		}
		b, _ := os.ReadFile(path)
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("%s holds the marker", path)
		}
		return nil
	})
	if strings.Contains(s.Log().String(), marker) {
		t.Error("the gateway's log holds the marker")
	}
}

// Every row of the spec's private-inference error table, and moderation's
// refusal of a sealed body.
func TestPrivateInferenceErrors(t *testing.T) {
	marker := newMarker()
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "vault", "--engine", "sim=tps=0,ttft=0")
	keys := s.e2eKeys(key)
	pub := keys["vault"]
	body := `{"model":"sim-chat","messages":[{"role":"user","content":"` + marker + `"}]}`
	envelope, _, err := e2ee.SealRequest(pub, "sim-chat", false, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sealedPost := func(path string, b []byte, hs ...header) reply {
		return s.do("POST", path, string(b), append(hs, bearer(key), header{"Content-Type", e2ee.ContentType})...)
	}
	nestedType := func(r reply) string {
		var n struct {
			Detail struct {
				Error struct{ Type string } `json:"error"`
			} `json:"detail"`
		}
		_ = json.Unmarshal(r.Body, &n)
		return n.Detail.Error.Type
	}

	// The one that works, for contrast.
	if r := sealedPost("/v1/chat/completions", envelope); r.Status != 200 || r.Header.Get("X-Worker-Name") != "vault" {
		t.Fatalf("sealed chat = %d %s", r.Status, r.Body)
	}
	// 400 invalid_encrypted_request: malformed, and an unknown version.
	for _, bad := range [][]byte{[]byte(`{"svc_e2e":1}`), bytes.Replace(envelope, []byte(`"svc_e2e":1`), []byte(`"svc_e2e":9`), 1), []byte("not json")} {
		if r := sealedPost("/v1/chat/completions", bad); r.Status != 400 || nestedType(r) != "invalid_encrypted_request" {
			t.Errorf("malformed %q = %d %s", bad[:min(len(bad), 20)], r.Status, r.Body)
		}
	}
	// 503 no_private_inference_worker: sealed to a key nobody holds.
	other, _ := e2ee.GenerateKeyPair()
	stray, _, _ := e2ee.SealRequest(other.Public(), "sim-chat", false, []byte(body))
	if r := sealedPost("/v1/chat/completions", stray); r.Status != 503 || r.Header.Get("X-Svc-Error-Code") != "no_private_inference_worker" ||
		nestedType(r) != "service_unavailable" || r.Header.Get("Retry-After") == "" {
		t.Errorf("unknown key = %d %v %s", r.Status, r.Header, r.Body)
	}
	// The same envelope twice: the worker refuses the replay, also in
	// other bytes (spacing, member order, a member added), which carry the
	// same sealed request.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(envelope, &members); err != nil {
		t.Fatal(err)
	}
	reordered := []byte("{")
	for _, k := range slices.Backward(slices.Sorted(maps.Keys(members))) {
		if len(reordered) > 1 {
			reordered = append(reordered, ',')
		}
		reordered = append(append(append(reordered, strconv.Quote(k)...), ':'), members[k]...)
	}
	reordered = append(reordered, '}')
	added := append(slices.Clone(bytes.TrimSuffix(bytes.TrimSpace(envelope), []byte("}"))), `,"x":1}`...)
	for name, again := range map[string][]byte{"as sent": envelope, "spaced": append(slices.Clone(envelope), ' '),
		"reordered": reordered, "with a member added": added} {
		if r := sealedPost("/v1/chat/completions", again); r.Status != 400 || !strings.Contains(string(r.Body), "replay") {
			t.Errorf("replay %s = %d %s", name, r.Status, r.Body)
		}
	}
	// Content filtering still applies: the worker checks what it opened.
	// Its verdict goes to the client sealed, labels and all: the gateway
	// learns only that the request failed with a 400.
	filtered := filteredKey(t, s)
	flagged, flaggedOpener, _ := e2ee.SealRequest(pub, "sim-chat", false,
		[]byte(`{"model":"sim-chat","messages":[{"role":"user","content":"how to hurt someone\nsim: verdict=unsafe labels=Violent"}]}`))
	r := s.do("POST", "/v1/chat/completions", string(flagged), bearer(filtered), header{"Content-Type", e2ee.ContentType})
	if r.Status != 400 || r.Header.Get("Content-Type") != e2ee.ContentType ||
		strings.Contains(string(r.Body), "content_filter") || strings.Contains(string(r.Body), "hurt") {
		t.Errorf("flagged sealed chat on a filtered key = %d %v %s", r.Status, r.Header, r.Body)
	}
	var refusal api.Body
	if plain, err := flaggedOpener.OpenBody(r.Body); err != nil || json.Unmarshal(plain, &refusal) != nil ||
		refusal.Error == nil || refusal.Error.Type != "content_filter" || !strings.Contains(refusal.Error.Message, "Violent") {
		t.Errorf("the flagged chat's refusal, opened: %s %v", plain, err)
	}
	if row := waitRow(t, s, key, r.Header.Get("X-Request-Id")); strings.Contains(fmt.Sprint(row), "content_filter") ||
		strings.Contains(fmt.Sprint(row), "Violent") {
		t.Errorf("the gateway's row tells of the verdict: %v", row)
	}
	// X-Svc-Worker-Id pins a sealed request only to the worker holding its
	// key: a pin to another is refused, not ignored.
	pinned, _, _ := e2ee.SealRequest(pub, "sim-chat", false, []byte(body))
	if r := sealedPost("/v1/chat/completions", pinned, header{"X-Svc-Worker-Id", "wk_00000000000000ff"}); r.Status != 400 ||
		!strings.Contains(string(r.Body), "cannot open it") {
		t.Errorf("pinned to another worker = %d %s", r.Status, r.Body)
	}
	pinned, _, _ = e2ee.SealRequest(pub, "sim-chat", false, []byte(body))
	if r := sealedPost("/v1/chat/completions", pinned, header{"X-Svc-Worker-Id", pub.WorkerID}); r.Status != 200 {
		t.Errorf("pinned to the key's worker = %d %s", r.Status, r.Body)
	}
	// A request that opens and fails validation gets the body the same
	// request sent clear gets, with its list of fields, sealed to the
	// client, streamed or not, and the spec's 400 for an encrypted
	// request where the clear one gets 422; the gateway's answer and row
	// say only that it is invalid.
	for _, stream := range []bool{false, true} {
		bad := `{"model":"sim-chat","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"robot","content":"` + marker + `"}]}`
		clear := s.do("POST", "/v1/chat/completions", bad, bearer(key))
		sealed, opener, _ := e2ee.SealRequest(pub, "sim-chat", stream, []byte(bad))
		r := sealedPost("/v1/chat/completions", sealed)
		var refusal, clearRefusal map[string]any
		plain, err := opener.OpenBody(r.Body)
		if r.Status != 400 || clear.Status != 422 || strings.Contains(string(r.Body), "messages.0.role") || err != nil ||
			json.Unmarshal(plain, &refusal) != nil || json.Unmarshal(clear.Body, &clearRefusal) != nil ||
			!reflect.DeepEqual(refusal, clearRefusal) || !strings.Contains(string(plain), `"errors":[{"field":"messages.0.role"`) {
			t.Errorf("invalid sealed chat (stream %v) = %d %s, opened %s %v; clear %d %s", stream, r.Status, r.Body, plain, err, clear.Status, clear.Body)
		}
		if row := waitRow(t, s, key, r.Header.Get("X-Request-Id")); strings.Contains(fmt.Sprint(row), "role") {
			t.Errorf("the gateway's row names the field: %v", row)
		}
	}
	// The spec's own case: a reasoning.max_tokens that is no whole number
	// of 0 or more is 422, and 400 on an encrypted request.
	badBudget := `{"model":"sim-reasoner","reasoning":{"max_tokens":-1},"messages":[{"role":"user","content":"hi"}]}`
	clearBudget := s.do("POST", "/v1/chat/completions", badBudget, bearer(key))
	sealedBudget, budgetOpener, _ := e2ee.SealRequest(pub, "sim-reasoner", false, []byte(badBudget))
	r = sealedPost("/v1/chat/completions", sealedBudget)
	if plain, err := budgetOpener.OpenBody(r.Body); clearBudget.Status != 422 || r.Status != 400 || err != nil ||
		!strings.Contains(string(plain), `"field":"reasoning.max_tokens"`) {
		t.Errorf("reasoning.max_tokens -1: clear %d %s; sealed %d, opened %s %v", clearBudget.Status, clearBudget.Body, r.Status, plain, err)
	}
	// An engine's failure (here 500, which the gateway answers 502) goes
	// to the client sealed too, with the engine's own message, also once
	// the gateway tried for another worker and found none.
	for _, stream := range []bool{false, true} {
		failing := `{"model":"sim-chat","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"` + marker + `\nsim: fail=500"}]}`
		sealed, opener, _ := e2ee.SealRequest(pub, "sim-chat", stream, []byte(failing))
		r := sealedPost("/v1/chat/completions", sealed)
		var failure api.Body
		plain, err := opener.OpenBody(r.Body)
		if r.Status != 502 || r.Header.Get("Content-Type") != e2ee.ContentType || err != nil || json.Unmarshal(plain, &failure) != nil ||
			failure.Error == nil || failure.Error.Message == "" || failure.Error.Type != api.TypeUpstream {
			t.Errorf("sealed chat the engine fails (stream %v) = %d %s, opened %s %v", stream, r.Status, r.Body, plain, err)
		}
	}
	// Moderation cannot judge what it cannot read.
	if r := sealedPost("/v1/moderations", envelope); r.Status != 400 || r.Header.Get("X-Svc-Error-Code") != "encrypted_input_not_supported" {
		t.Errorf("moderation = %d %s", r.Status, r.Body)
	}
	// The other routes without a private form refuse it the same way,
	// naming those that have one.
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/completions", "/v1/audio/translations"} {
		r := sealedPost(path, envelope)
		if r.Status != 400 || r.Header.Get("X-Svc-Error-Code") != "encrypted_input_not_supported" || !strings.Contains(string(r.Body), "/v1/embeddings") {
			t.Errorf("sealed %s = %d %s", path, r.Status, r.Body)
		}
	}
	// 403 e2e_required for clear inference once the organisation asks;
	// sealed requests still go.
	s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e":true}`)
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "clear", false), bearer(key)); r.Status != 403 || nestedType(r) != "e2e_required" {
		t.Errorf("clear with require_e2e = %d %s", r.Status, r.Body)
	}
	fresh, _, _ := e2ee.SealRequest(pub, "sim-chat", false, []byte(body))
	if r := sealedPost("/v1/chat/completions", fresh); r.Status != 200 {
		t.Errorf("sealed with require_e2e = %d %s", r.Status, r.Body)
	}
	// 403 plan_required: private inference is a Pro feature.
	s.console("PATCH", "/api/v1/console/orgs/default", `{"plan":"free","require_e2e":false}`)
	again, _, _ := e2ee.SealRequest(pub, "sim-chat", false, []byte(body))
	if r := sealedPost("/v1/chat/completions", again); r.Status != 403 || nestedType(r) != "plan_required" {
		t.Errorf("free plan = %d %s", r.Status, r.Body)
	}
}

// tamper is a transport under the sealing one that changes sealed replies
// on their way to the client.
type tamper struct {
	base http.RoundTripper
	fn   func([]byte) []byte
}

func (tp tamper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tp.base.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.Path, "/chat/completions") {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	b = tp.fn(b)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// An attacker between client and gateway who changes a byte of a sealed
// chunk, drops the final chunk or swaps two chunks is caught every time:
// the client gets an error, never altered text.
func TestPrivateInferenceTamperDetected(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "vault", "--engine", "sim=tps=0,ttft=0")
	events := func(b []byte) [][]byte { return bytes.Split(bytes.TrimSpace(b), []byte("\n\n")) }
	join := func(ev [][]byte) []byte { return append(bytes.Join(ev, []byte("\n\n")), "\n\n"...) }
	tests := []struct {
		name   string
		stream bool
		fn     func([]byte) []byte
	}{
		{"flip a byte of a sealed reply", false, func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"chunks":["`)) + 20
			b[i] ^= 1
			return b
		}},
		{"flip a byte of a streamed chunk", true, func(b []byte) []byte {
			i := bytes.Index(b, []byte(`{"c":"`)) + 12
			b[i] ^= 1
			return b
		}},
		{"drop the final chunk", true, func(b []byte) []byte {
			var kept [][]byte
			for _, e := range events(b) {
				if !bytes.Contains(e, []byte(`"final":true`)) {
					kept = append(kept, e)
				}
			}
			return join(kept)
		}},
		{"swap two chunks", true, func(b []byte) []byte {
			ev := events(b)
			var idx []int
			for i, e := range ev {
				if bytes.HasPrefix(e, []byte(`data: {"c":`)) {
					idx = append(idx, i)
				}
			}
			ev[idx[1]], ev[idx[2]] = ev[idx[2]], ev[idx[1]]
			return join(ev)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := privateClient(s, key, tamper{http.DefaultTransport, tc.fn})
			params := openai.ChatCompletionNewParams{Model: "sim-chat",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello\nsim: tokens=8")}}
			if !tc.stream {
				if _, err := client.Chat.Completions.New(context.Background(), params); err == nil {
					t.Fatal("a tampered reply was accepted")
				}
				return
			}
			st := client.Chat.Completions.NewStreaming(context.Background(), params)
			for st.Next() {
			}
			if st.Err() == nil {
				t.Fatal("a tampered stream was accepted")
			}
		})
	}
}

// linkTamper sits between a worker and the gateway and, once armed, flips
// one bit inside the first websocket message that carries its marker, in
// the direction it watches: the gateway's frames to the worker are sent in
// the clear, the worker's are masked, and a flipped masked bit flips the
// same bit of the message.
type linkTamper struct {
	ln       net.Listener
	target   string
	marker   []byte
	toWorker bool // watch the gateway's frames, else the worker's
	armed    atomic.Bool
	hits     atomic.Int32
	wg       sync.WaitGroup
}

func newLinkTamper(t *testing.T, target string, marker string, toWorker bool) *linkTamper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lt := &linkTamper{ln: ln, target: target, marker: []byte(marker), toWorker: toWorker}
	lt.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			lt.wg.Go(func() { lt.pipe(up, c, !toWorker); up.Close(); c.Close() })
			lt.wg.Go(func() { lt.pipe(c, up, toWorker); up.Close(); c.Close() })
		}
	})
	t.Cleanup(func() { ln.Close(); lt.wg.Wait() })
	return lt
}

func (lt *linkTamper) URL() string { return "http://" + lt.ln.Addr().String() }

// pipe copies src to dst; when watch is set it parses websocket frames
// (after the HTTP upgrade) to find the marker.
func (lt *linkTamper) pipe(dst, src net.Conn, watch bool) {
	buf := make([]byte, 0, 1<<16)
	tmp := make([]byte, 32<<10)
	upgraded := false
	for {
		n, err := src.Read(tmp)
		if n > 0 {
			buf = append(buf, tmp[:n]...)
			out := len(buf)
			if watch {
				out = lt.scan(&buf, &upgraded)
			}
			if _, werr := dst.Write(buf[:out]); werr != nil {
				return
			}
			buf = append(buf[:0], buf[out:]...)
		}
		if err != nil {
			return
		}
	}
}

// scan flips the marked message once armed and returns how much of buf
// holds whole frames (or the HTTP exchange before them).
func (lt *linkTamper) scan(buf *[]byte, upgraded *bool) int {
	b := *buf
	off := 0
	if !*upgraded {
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i < 0 {
			return 0
		}
		*upgraded, off = true, i+4
	}
	for {
		if len(b)-off < 2 {
			return off
		}
		masked := b[off+1]&0x80 != 0
		n, hdr := int(b[off+1]&0x7f), 2
		switch n {
		case 126:
			if len(b)-off < 4 {
				return off
			}
			n, hdr = int(binary.BigEndian.Uint16(b[off+2:])), 4
		case 127:
			if len(b)-off < 10 {
				return off
			}
			n, hdr = int(binary.BigEndian.Uint64(b[off+2:])), 10
		}
		var key []byte
		if masked {
			if len(b)-off < hdr+4 {
				return off
			}
			key = b[off+hdr : off+hdr+4]
			hdr += 4
		}
		if len(b)-off < hdr+n {
			return off
		}
		payload := b[off+hdr : off+hdr+n]
		clear := payload
		if masked {
			clear = make([]byte, n)
			for i := range payload {
				clear[i] = payload[i] ^ key[i%4]
			}
		}
		if lt.armed.Load() {
			if i := bytes.Index(clear, lt.marker); i >= 0 && i+len(lt.marker)+8 < n {
				payload[i+len(lt.marker)+8] ^= 0x01
				lt.armed.Store(false)
				lt.hits.Add(1)
			}
		}
		off += hdr + n
	}
}

// An attacker on the link between gateway and worker who changes a sealed
// request or a sealed reply is caught: the worker refuses the request,
// the client refuses the reply; neither ever accepts altered content.
func TestPrivateInferenceLinkTamperDetected(t *testing.T) {
	for _, tc := range []struct {
		name, marker string
		toWorker     bool
		stream       bool
	}{
		{"the request", `"ct":"`, true, false},
		{"a reply chunk", `{"c":"`, false, true},
		{"a whole reply", `"chunks":["`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, "")
			key := s.adminKey()
			lt := newLinkTamper(t, strings.TrimPrefix(s.URL, "http://"), tc.marker, tc.toWorker)
			name := "tampered-" + strings.ReplaceAll(tc.name, " ", "-")
			startWorker(t, lt.URL(), s.tokenFile(), name, "--engine", "sim=tps=0,ttft=0")
			client := privateClient(s, key, http.DefaultTransport)
			params := openai.ChatCompletionNewParams{Model: "sim-chat",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello\nsim: tokens=8")}}
			// Wait until the worker's key is listed.
			s.workerNamed(key, name, statusIs("healthy"))
			if !harness.Eventually(10*time.Second, func() bool {
				keys := s.e2eKeys(key)
				return len(keys) == 1 && keys[name].KeyID != ""
			}) {
				t.Fatalf("keys: %v", s.e2eKeys(key))
			}
			lt.armed.Store(true)
			var err error
			if tc.stream {
				st := client.Chat.Completions.NewStreaming(context.Background(), params)
				for st.Next() {
				}
				err = st.Err()
			} else {
				_, err = client.Chat.Completions.New(context.Background(), params)
			}
			if lt.hits.Load() != 1 {
				t.Fatalf("the tamperer found no %s to change", tc.marker)
			}
			if err == nil {
				t.Fatal("a reply through a tampered link was accepted")
			}
		})
	}
}

// memoryHolds reports whether the running process pid has needle anywhere
// in its readable memory (Linux: /proc/pid/maps and /proc/pid/mem, which a
// parent may read). ok is false where the memory cannot be read.
func memoryHolds(pid int, needle []byte) (found, ok bool) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false, false
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false, false
	}
	defer mem.Close()
	read := false
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "r") {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil || hi <= lo || hi-lo > 1<<32 {
			continue
		}
		buf := make([]byte, hi-lo)
		n, _ := mem.ReadAt(buf, int64(lo))
		if n > 0 {
			read = true
		}
		if bytes.Contains(buf[:n], needle) {
			return true, true
		}
	}
	return false, read
}

// A sealed stream survives its worker's link dropping: the request is
// pinned to the key's worker, which resumes on reconnect with nothing
// lost or repeated, so the opened text is what an uncut run gives.
func TestPrivateInferenceSurvivesLinkDrops(t *testing.T) {
	s := startServer(t, "", "--worker-grace", "20s")
	key := s.adminKey()
	p := newProxy(t, strings.TrimPrefix(s.URL, "http://"))
	startWorker(t, p.URL(), s.tokenFile(), "flaky-vault", "--engine", "sim=tps=1500,ttft=0")
	client := privateClient(s, key, http.DefaultTransport)
	params := openai.ChatCompletionNewParams{Model: "sim-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long story\nsim: tokens=1500")}}
	cuts := 0
	read := func(cut bool) string {
		st := client.Chat.Completions.NewStreaming(context.Background(), params)
		var text strings.Builder
		n := 0
		for st.Next() {
			for _, ch := range st.Current().Choices {
				text.WriteString(ch.Delta.Content)
			}
			if n++; cut && n%300 == 0 {
				cuts += p.cut()
			}
		}
		if err := st.Err(); err != nil {
			t.Fatalf("stream (cut %v) after %d chunks: %v", cut, n, err)
		}
		return text.String()
	}
	want := read(false)
	if got := read(true); got != want || len(want) < 3000 || cuts == 0 {
		t.Fatalf("cut %d times, the stream differs: got %d bytes, want %d", cuts, len(got), len(want))
	}
}
