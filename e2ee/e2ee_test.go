package e2ee

import (
	"bytes"
	"crypto/hpke"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func testKey(t testing.TB, fill byte) *KeyPair {
	t.Helper()
	kp, err := NewKeyPair(bytes.Repeat([]byte{fill}, seedSize))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func testPub(kp *KeyPair, models ...string) PublicKeyInfo {
	p := kp.Public()
	p.WorkerID, p.WorkerName, p.Models = "w1", "box", models
	return p
}

// sseEvent frames a payload as the relay does.
func sseEvent(data []byte) []byte {
	return []byte("data: " + string(data) + "\n\n")
}

// streamEnd is the end of a successful stream as the client receives it.
func streamEnd(s *ResponseSealer) []byte {
	return append(sseEvent(s.FinalData()), doneEvent...)
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"the secret prompt"}]}`
const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"the secret prompt"}]}`

func seal(t testing.TB, kp *KeyPair, model string, stream bool, body string) ([]byte, *ResponseOpener) {
	t.Helper()
	env, o, err := SealRequest(testPub(kp, model), model, stream, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return env, o
}

func open(t testing.TB, kp *KeyPair, env []byte) *Request {
	t.Helper()
	r, err := OpenRequest(kp, env)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// editJSON rewrites one field of a JSON object.
func editJSON(t testing.TB, b []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func flipB64(t testing.TB, s string, i int) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	b[i%len(b)] ^= 1
	return base64.StdEncoding.EncodeToString(b)
}

func TestRoundTripBody(t *testing.T) {
	kp := testKey(t, 1)
	env, opener := seal(t, kp, "m", false, chatBody)
	if bytes.Contains(env, []byte("secret prompt")) {
		t.Fatal("envelope holds the prompt in the clear")
	}

	e, err := ParseEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	if e.Version != 1 || e.Suite != DefaultSuite() || e.KeyID != kp.KeyID() || e.Model != "m" || e.Stream {
		t.Fatalf("gateway view %+v", e)
	}

	r := open(t, kp, env)
	if string(r.Body) != chatBody || r.Model != "m" || r.Stream || r.KeyID != kp.KeyID() {
		t.Fatalf("worker view %+v body %s", r.Envelope, r.Body)
	}
	answer := `{"id":"x","object":"chat.completion","choices":[{"message":{"content":"the secret answer"}}]}`
	reply := r.Sealer.ReplyBody([]byte(answer))
	if bytes.Contains(reply, []byte("secret answer")) {
		t.Fatal("reply holds the answer in the clear")
	}
	// The gateway adds its clear annotation beside the sealed fields.
	reply = editJSON(t, reply, func(m map[string]any) { m["svc"] = map[string]any{"worker": map[string]any{"id": "w1"}} })

	got, err := opener.OpenBody(reply)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != answer {
		t.Fatalf("opened %s", got)
	}
}

func TestRoundTripMultiChunkBody(t *testing.T) {
	kp := testKey(t, 1)
	env, opener := seal(t, kp, "m", false, chatBody)
	s := open(t, kp, env).Sealer
	reply := wireBody(s.Nonce(), s.SealChunk([]byte("ab")), s.SealChunk(nil), s.SealFinal([]byte("cd")))
	got, err := opener.OpenBody(reply)
	if err != nil || string(got) != "abcd" {
		t.Fatalf("opened %q, %v", got, err)
	}
}

func wireBody(nonce []byte, chunks ...[]byte) []byte {
	w := map[string]any{"svc_e2e": 1, "response_nonce": base64.StdEncoding.EncodeToString(nonce)}
	var cs []string
	for _, c := range chunks {
		cs = append(cs, base64.StdEncoding.EncodeToString(c))
	}
	w["chunks"] = cs
	b, _ := json.Marshal(w)
	return b
}

func TestRoundTripStream(t *testing.T) {
	kp := testKey(t, 1)
	env, opener := seal(t, kp, "m", true, streamBody)
	r := open(t, kp, env)
	if !r.Stream {
		t.Fatal("stream flag lost")
	}
	s := r.Sealer
	var wire bytes.Buffer
	wire.WriteString(": keep-alive\n\n")
	wire.Write(sseEvent(s.StartData()))
	wire.WriteString(": keep-alive\n\n")
	wire.Write(sseEvent(s.EventData([]byte(`{"choices":[{"delta":{"content":"sec"}}]}`))))
	wire.WriteString("data: {\"svc\":{\"worker\":{\"id\":\"w1\"}}}\n\n")
	wire.Write(sseEvent(s.EventData([]byte("{\n\"choices\":[{\"delta\":{\"content\":\"ret\"}}]}"))))
	wire.Write(streamEnd(s))
	if bytes.Contains(wire.Bytes(), []byte("sec")) && bytes.Contains(wire.Bytes(), []byte("content")) {
		t.Fatal("stream holds content in the clear")
	}

	got, err := io.ReadAll(opener.NewStreamReader(&wire))
	if err != nil {
		t.Fatal(err)
	}
	want := "data: {\"choices\":[{\"delta\":{\"content\":\"sec\"}}]}\n\n" +
		"data: {\ndata: \"choices\":[{\"delta\":{\"content\":\"ret\"}}]}\n\n" +
		"data: [DONE]\n\n"
	if string(got) != want {
		t.Fatalf("clear stream\n%q\nwant\n%q", got, want)
	}
}

// sealedStream is a sealed stream of two chunks and the final, as events.
func sealedStream(t testing.TB) (*ResponseOpener, []string) {
	kp := testKey(t, 1)
	env, opener := seal(t, kp, "m", true, streamBody)
	s := open(t, kp, env).Sealer
	start := string(sseEvent(s.StartData()))
	c0 := string(sseEvent(s.EventData([]byte(`{"n":0}`))))
	c1 := string(sseEvent(s.EventData([]byte(`{"n":1}`))))
	end := string(streamEnd(s))
	return opener, []string{start, c0, c1, strings.TrimSuffix(end, doneEvent), doneEvent}
}

func readStream(o *ResponseOpener, events ...string) (string, error) {
	b, err := io.ReadAll(o.NewStreamReader(strings.NewReader(strings.Join(events, ""))))
	return string(b), err
}

func TestStreamTampering(t *testing.T) {
	o, ev := sealedStream(t)
	if out, err := readStream(o, ev...); err != nil || !strings.HasSuffix(out, doneEvent) {
		t.Fatalf("untouched stream: %q, %v", out, err)
	}
	flip := func(event string) string {
		var m map[string]any
		json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(event, "data: "))), &m)
		m["c"] = flipB64(t, m["c"].(string), 5)
		b, _ := json.Marshal(m)
		return "data: " + string(b) + "\n\n"
	}
	unfinal := func(event string) string { return strings.Replace(event, `,"final":true`, "", 1) }
	// Another reply to another request: its chunks are under another key.
	o2, ev2 := sealedStream(t)
	_ = o2

	for _, tc := range []struct {
		name   string
		events []string
		want   error
	}{
		{"flipped chunk", []string{ev[0], flip(ev[1]), ev[2], ev[3], ev[4]}, ErrInvalidReply},
		{"flipped final", []string{ev[0], ev[1], ev[2], flip(ev[3]), ev[4]}, ErrInvalidReply},
		{"reordered", []string{ev[0], ev[2], ev[1], ev[3], ev[4]}, ErrInvalidReply},
		{"dropped chunk", []string{ev[0], ev[1], ev[3], ev[4]}, ErrInvalidReply},
		{"dropped final", []string{ev[0], ev[1], ev[2], ev[4]}, ErrTruncated},
		{"cut before done", []string{ev[0], ev[1], ev[2]}, ErrTruncated},
		{"cut mid-event", []string{ev[0], ev[1], ev[2], ev[3][:len(ev[3])/2]}, ErrTruncated},
		{"final flag stripped", []string{ev[0], ev[1], ev[2], unfinal(ev[3]), ev[4]}, ErrInvalidReply},
		{"chunk after final", []string{ev[0], ev[1], ev[2], ev[3], ev[1], ev[4]}, ErrInvalidReply},
		{"final repeated", []string{ev[0], ev[1], ev[2], ev[3], ev[3], ev[4]}, ErrInvalidReply},
		{"no header", []string{ev[1], ev[2], ev[3], ev[4]}, ErrInvalidReply},
		{"second header", []string{ev[0], ev[1], ev[0], ev[2], ev[3], ev[4]}, ErrInvalidReply},
		{"other reply's header", []string{ev2[0], ev[1], ev[2], ev[3], ev[4]}, ErrInvalidReply},
		{"other reply's chunk", []string{ev[0], ev2[1], ev[2], ev[3], ev[4]}, ErrInvalidReply},
		{"not JSON", []string{ev[0], "data: hello\n\n", ev[1], ev[2], ev[3], ev[4]}, ErrInvalidReply},
		{"wrong version", []string{strings.Replace(ev[0], `"svc_e2e":1`, `"svc_e2e":2`, 1), ev[1], ev[2], ev[3], ev[4]}, ErrInvalidReply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := readStream(o, tc.events...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if strings.Contains(out, doneEvent) && !strings.HasPrefix(tc.name, "chunk after") && !strings.HasPrefix(tc.name, "final repeated") {
				t.Fatalf("a broken stream yielded [DONE]: %q", out)
			}
		})
	}
}

func TestStreamClearEvents(t *testing.T) {
	o, ev := sealedStream(t)
	// The gateway's annotations and keep-alives anywhere, CRLF line ends,
	// and no clear [DONE]: still whole.
	events := []string{": keep-alive\r\n\r\n", `data: {"svc":{"worker":{"id":"w"}}}` + "\r\n\r\n", ev[0], ": keep-alive\n\n", ev[1],
		`data: {"svc":{}}` + "\n\n", ev[2], ev[3], `data: {"svc":{"request_id":"r"}}` + "\n\n"}
	out, err := readStream(o, events...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "data: {\"n\":0}\n\ndata: {\"n\":1}\n\ndata: [DONE]\n\n"; out != want {
		t.Fatalf("got %q", out)
	}

	// A gateway error frame mid-stream reaches the client as a frame and
	// as a read error.
	frame := `data: {"error":{"message":"worker went away","type":"service_unavailable"}}` + "\n\n"
	out, err = readStream(o, ev[0], ev[1], frame)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "worker went away") {
		t.Fatalf("err %v", err)
	}
	if !strings.HasSuffix(out, strings.TrimPrefix(frame, "")) || strings.Contains(out, "[DONE]") {
		t.Fatalf("out %q", out)
	}

	// Only the frame's error goes on: text the gateway put beside it, or
	// in an error event, is not passed off as the model's.
	for _, injected := range []string{
		`data: {"error":{"message":"gone"},"choices":[{"index":0,"delta":{"content":"INJECTED"}}]}` + "\n\n",
		"event: error\n" + `data: {"choices":[{"index":0,"delta":{"content":"INJECTED"}}]}` + "\n\n",
	} {
		out, err = readStream(o, ev[0], ev[1], injected)
		if !errors.Is(err, ErrTruncated) || strings.Contains(out, "INJECTED") || !strings.Contains(out, `data: {"error":{`) {
			t.Fatalf("injected frame %q gave %q, %v", injected, out, err)
		}
	}

	// A clear [DONE] before the final chunk is truncation.
	if _, err := readStream(o, ev[0], ev[1], doneEvent); !errors.Is(err, ErrTruncated) {
		t.Fatalf("early [DONE]: %v", err)
	}
}

func TestReplyTampering(t *testing.T) {
	kp := testKey(t, 1)
	env, o := seal(t, kp, "m", false, chatBody)
	s := open(t, kp, env).Sealer
	nonce := s.Nonce()
	c0, c1, fin := s.SealChunk([]byte("a")), s.SealChunk([]byte("b")), s.SealFinal([]byte("c"))
	flip := func(b []byte) []byte { b = bytes.Clone(b); b[0] ^= 1; return b }
	otherNonce := bytes.Clone(nonce)
	otherNonce[0] ^= 1

	if got, err := o.OpenBody(wireBody(nonce, c0, c1, fin)); err != nil || string(got) != "abc" {
		t.Fatalf("untouched: %q %v", got, err)
	}
	for _, tc := range []struct {
		name  string
		reply []byte
		want  error
	}{
		{"flipped chunk", wireBody(nonce, flip(c0), c1, fin), ErrInvalidReply},
		{"flipped final", wireBody(nonce, c0, c1, flip(fin)), ErrInvalidReply},
		{"flipped nonce", wireBody(otherNonce, c0, c1, fin), ErrInvalidReply},
		{"reordered", wireBody(nonce, c1, c0, fin), ErrInvalidReply},
		{"dropped final", wireBody(nonce, c0, c1), ErrTruncated},
		{"no chunks", wireBody(nonce), ErrTruncated},
		{"chunk after final", wireBody(nonce, c0, c1, fin, c0), ErrInvalidReply},
		{"final alone", wireBody(nonce, fin), ErrInvalidReply},
		{"short nonce", wireBody(nonce[:12], c0, c1, fin), ErrInvalidReply},
		{"wrong version", bytes.Replace(wireBody(nonce, c0, c1, fin), []byte(`"svc_e2e":1`), []byte(`"svc_e2e":2`), 1), ErrInvalidReply},
		{"not JSON", []byte("<html>"), ErrInvalidReply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := o.OpenBody(tc.reply); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}

	// Another request's opener cannot read this reply.
	_, o2 := seal(t, kp, "m", false, chatBody)
	if _, err := o2.OpenBody(wireBody(nonce, c0, c1, fin)); !errors.Is(err, ErrInvalidReply) {
		t.Fatalf("other opener: %v", err)
	}
}

func TestSealerRefusesAfterFinal(t *testing.T) {
	kp := testKey(t, 1)
	env, _ := seal(t, kp, "m", false, chatBody)
	s := open(t, kp, env).Sealer
	s.SealFinal(nil)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	s.SealChunk(nil)
}

func TestRequestTampering(t *testing.T) {
	kp, other := testKey(t, 1), testKey(t, 2)
	env, _ := seal(t, kp, "m", false, chatBody)
	envStream, _ := seal(t, kp, "m", true, streamBody)
	set := func(k string, v any) []byte { return editJSON(t, env, func(m map[string]any) { m[k] = v }) }
	var w map[string]any
	json.Unmarshal(env, &w)

	for _, tc := range []struct {
		name string
		kp   *KeyPair
		env  []byte
		want error
	}{
		{"flipped enc", kp, set("enc", flipB64(t, w["enc"].(string), 7)), ErrInvalidEnvelope},
		{"flipped enc X25519 share", kp, set("enc", flipB64(t, w["enc"].(string), xwingEncSize-1)), ErrInvalidEnvelope},
		{"flipped ct", kp, set("ct", flipB64(t, w["ct"].(string), 3)), ErrInvalidEnvelope},
		{"flipped tag", kp, set("ct", flipB64(t, w["ct"].(string), -1+len(chatBody)+aeadTagSize)), ErrInvalidEnvelope},
		{"model changed", kp, set("model", "bigger-model"), ErrInvalidEnvelope},
		{"stream changed", kp, set("stream", true), ErrInvalidEnvelope},
		{"stream cleared", kp, editJSON(t, envStream, func(m map[string]any) { m["stream"] = false }), ErrInvalidEnvelope},
		{"key id changed", kp, set("key_id", "0123456789abcdef"), ErrUnknownKey},
		{"sent to another worker", other, env, ErrUnknownKey},
		{"relabelled for another worker", other, set("key_id", other.KeyID()), ErrInvalidEnvelope},
		{"unknown version", kp, set("svc_e2e", 2), ErrInvalidEnvelope},
		{"unknown kem", kp, set("kem_id", 0x0020), ErrInvalidEnvelope},
		{"unknown kdf", kp, set("kdf_id", 3), ErrInvalidEnvelope},
		{"unknown aead", kp, set("aead_id", 3), ErrInvalidEnvelope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OpenRequest(tc.kp, tc.env)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if r != nil {
				t.Fatal("request returned with an error")
			}
		})
	}
}

// sealRaw seals body without SealRequest's own checks, as a dishonest
// client could.
func sealRaw(t testing.TB, kp *KeyPair, e Envelope, body string) []byte {
	t.Helper()
	pk, err := kp.Public().publicKey()
	if err != nil {
		t.Fatal(err)
	}
	enc, s, err := hpke.NewSender(pk, hpke.HKDFSHA256(), hpke.AES256GCM(), e.info())
	if err != nil {
		t.Fatal(err)
	}
	ct, err := s.Seal(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	e.enc, e.ct = enc, ct
	b, err := e.marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBodyMustMatchEnvelope(t *testing.T) {
	kp := testKey(t, 1)
	e := Envelope{Version: 1, Suite: DefaultSuite(), KeyID: kp.KeyID(), Model: "small", Stream: false}
	for _, tc := range []struct {
		name, body string
		stream     bool
		ok         bool
	}{
		{"same", `{"model":"small"}`, false, true},
		{"stream null", `{"model":"small","stream":null}`, false, true},
		{"streamed", `{"model":"small","stream":true}`, true, true},
		{"not JSON object", `model=big`, false, true},
		{"other model", `{"model":"big"}`, false, false},
		{"stream differs", `{"model":"small","stream":true}`, false, false},
		{"stream differs other way", `{"model":"small"}`, true, false},
		{"duplicate model", `{"model":"small","model":"big"}`, false, false},
		{"model in other case", `{"model":"small","Model":"big"}`, false, false},
		{"stream folded", `{"model":"small","ſtream":true}`, false, false},
		{"stream not bool", `{"model":"small","stream":"yes"}`, false, false},
		{"no model", `{"messages":[]}`, false, false},
		{"trailing data", `{"model":"small"} {"model":"big"}`, false, false},
		{"broken JSON", `{"model":"small",`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e
			e.Stream = tc.stream
			_, err := OpenRequest(kp, sealRaw(t, kp, e, tc.body))
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("err %v", err)
			}
			_, _, err = SealRequest(testPub(kp, "small"), "small", tc.stream, []byte(tc.body))
			if tc.ok != (err == nil) {
				t.Fatalf("SealRequest err %v", err)
			}
		})
	}
}

func TestParseEnvelopeErrors(t *testing.T) {
	kp := testKey(t, 1)
	env, _ := seal(t, kp, "m", false, chatBody)
	set := func(k string, v any) []byte { return editJSON(t, env, func(m map[string]any) { m[k] = v }) }
	del := func(k string) []byte { return editJSON(t, env, func(m map[string]any) { delete(m, k) }) }
	const marker = "SECRETXX"
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"not JSON", []byte(marker + "{"), "not a JSON object"},
		{"array", []byte(`["` + marker + `"]`), "not a JSON object"},
		{"version 2", set("svc_e2e", 2), "unsupported envelope version"},
		{"version string", set("svc_e2e", marker), "unsupported envelope version"},
		{"version quoted", set("svc_e2e", "1"), "unsupported envelope version"},
		{"version null", set("svc_e2e", nil), "missing svc_e2e"},
		{"version fraction", set("svc_e2e", 1.5), "unsupported envelope version"},
		{"version 2 reshaped", []byte(`{"svc_e2e":2,"stream":"` + marker + `"}`), "unsupported envelope version"},
		{"no version", del("svc_e2e"), "missing svc_e2e"},
		{"kem", set("kem_id", 16), "unsupported suite"},
		{"kem too big", set("kem_id", 70000), "kem_id is not a 16-bit"},
		{"kem quoted", set("kem_id", strconv.Itoa(int(kp.Public().KEMID))), "kem_id is not a 16-bit"},
		{"kdf negative", set("kdf_id", -1), "kdf_id is not a 16-bit"},
		{"no aead", del("aead_id"), "missing aead_id"},
		{"key id upper", set("key_id", strings.ToUpper(kp.KeyID())), "key_id is not"},
		{"key id short", set("key_id", marker), "key_id is not"},
		{"no key id", del("key_id"), "missing key_id"},
		{"no model", del("model"), "missing model"},
		{"empty model", set("model", ""), "model is empty"},
		{"long model", set("model", marker+strings.Repeat("x", MaxModel)), "longer than"},
		{"control in model", set("model", marker+"\n"), "control"},
		{"no stream", del("stream"), "missing stream"},
		{"stream string", set("stream", marker), "not a JSON object"},
		{"enc not base64", set("enc", marker+"!"), "enc is not"},
		{"enc short", set("enc", base64.StdEncoding.EncodeToString([]byte(marker))), "enc is not"},
		{"enc unpadded", set("enc", strings.TrimRight(base64.RawStdEncoding.EncodeToString(make([]byte, xwingEncSize+1)), "=")), "enc is not"},
		{"ct short", set("ct", base64.StdEncoding.EncodeToString([]byte(marker))), "ct is not"},
		{"no ct", del("ct"), "missing ct"},
		{"too large", append(bytes.Repeat([]byte(" "), MaxEnvelope), env...), "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnvelope(tc.body)
			if !errors.Is(err, ErrInvalidEnvelope) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("error quotes the body: %v", err)
			}
		})
	}
}

func TestHeaderLayout(t *testing.T) {
	e := Envelope{Version: 1, Suite: DefaultSuite(), KeyID: "0011223344556677", Model: "ab", Stream: true}
	want, _ := hex.DecodeString("01" + "647a" + "0001" + "0002" + "0011223344556677" + "01" + "0002" + "6162")
	if got := e.header(); !bytes.Equal(got, want) {
		t.Fatalf("header %x, want %x", got, want)
	}
	if got := e.info(); !bytes.Equal(got, append([]byte("svc e2e v1 request\x00"), want...)) {
		t.Fatalf("info %q", got)
	}
}

func TestPublicKeyInfo(t *testing.T) {
	kp := testKey(t, 1)
	p := kp.Public()
	if len(p.KeyID) != 16 || p.KeyID != KeyID(p.PublicKey) || len(p.PublicKey) != 1216 {
		t.Fatalf("key %s, %d bytes", p.KeyID, len(p.PublicKey))
	}
	b, err := json.Marshal(testPub(kp, "m"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, want := range map[string]any{"key_id": p.KeyID, "version": 1.0, "kem_id": 25722.0, "kdf_id": 1.0, "aead_id": 2.0,
		"public_key": base64.StdEncoding.EncodeToString(p.PublicKey), "worker_id": "w1", "worker_name": "box"} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}

	// A directory entry whose id names another key is refused.
	bad := testPub(kp, "m")
	bad.KeyID = testKey(t, 2).KeyID()
	if _, _, err := SealRequest(bad, "m", false, []byte(chatBody)); err == nil {
		t.Fatal("sealed to a mislabelled key")
	}
	bad = testPub(kp, "m")
	bad.AEADID = 1
	if _, _, err := SealRequest(bad, "m", false, []byte(chatBody)); err == nil {
		t.Fatal("sealed with an unsupported suite")
	}
}

func TestLoadOrCreateKeyPair(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "e2e.key")
	a, err := LoadOrCreateKeyPair(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	b, err := LoadOrCreateKeyPair(path)
	if err != nil || b.KeyID() != a.KeyID() {
		t.Fatalf("reloaded %v, %v", b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "sub", ".e2e-key-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	if runtime.GOOS != "windows" {
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKeyPair(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("loose mode: %v", err)
		}
	}

	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abc"), 0o600)
	if _, err := LoadOrCreateKeyPair(short); err == nil {
		t.Fatal("short key file accepted")
	}
	if _, err := LoadOrCreateKeyPair(dir); err == nil {
		t.Fatal("directory accepted as key file")
	}
}

func TestWriteSeedWithoutHardLinks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e2e.key")
	noLinks := func(string, string) error { return &os.LinkError{Op: "link", Err: errors.ErrUnsupported} }
	seed := bytes.Repeat([]byte{9}, seedSize)
	if err := writeSeed(path, seed, noLinks); err != nil {
		t.Fatal(err)
	}
	if got, err := readSeed(path); err != nil || !bytes.Equal(got, seed) {
		t.Fatalf("read back %x, %v", got, err)
	}
	if err := writeSeed(path, bytes.Repeat([]byte{8}, seedSize), noLinks); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("replaced an existing key: %v", err)
	}
	if got, _ := readSeed(path); !bytes.Equal(got, seed) {
		t.Fatal("key changed")
	}
}

func TestLoadOrCreateKeyPairConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e2e.key")
	ids := make(chan string, 8)
	for range cap(ids) {
		go func() {
			kp, err := LoadOrCreateKeyPair(path)
			if err != nil {
				t.Error(err)
				ids <- ""
				return
			}
			ids <- kp.KeyID()
		}()
	}
	first := <-ids
	for range cap(ids) - 1 {
		if id := <-ids; id != first {
			t.Fatalf("workers sharing a key file got keys %s and %s", first, id)
		}
	}
}
