package e2ee

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func FuzzParseEnvelope(f *testing.F) {
	kp := testKey(f, 1)
	env, _ := seal(f, kp, "m", false, chatBody)
	f.Add(env)
	envStream, _ := seal(f, kp, "a/model:with-chars", true, `{"model":"a/model:with-chars","stream":true}`)
	f.Add(envStream)
	f.Add([]byte(`{"svc_e2e":1}`))
	f.Add([]byte(`{"svc_e2e":2,"kem_id":25722}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := ParseEnvelope(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("error not marked invalid: %v", err)
			}
			return
		}
		if e.Version != Version || e.Suite != DefaultSuite() || !isKeyID(e.KeyID) || checkModel(e.Model) != nil ||
			len(e.enc) != xwingEncSize || len(e.ct) < aeadTagSize {
			t.Fatalf("accepted %+v", e)
		}
		// Whatever parses re-encodes to an envelope that parses the same.
		b, err := e.marshal()
		if err != nil {
			t.Fatal(err)
		}
		e2, err := ParseEnvelope(b)
		if err != nil || e2.KeyID != e.KeyID || e2.Model != e.Model || e2.Stream != e.Stream ||
			!bytes.Equal(e2.enc, e.enc) || !bytes.Equal(e2.ct, e.ct) {
			t.Fatalf("re-encoded envelope differs: %v", err)
		}
		// The info binds every routing field, so whatever opens carries
		// the fields of a genuine envelope. (Fuzz workers each seal their
		// own seeds, so the ciphertexts themselves are not compared.)
		if _, err := OpenRequest(kp, body); err == nil {
			if !(e.Model == "m" && !e.Stream || e.Model == "a/model:with-chars" && e.Stream) {
				t.Fatalf("opened an envelope with forged routing fields %q %v", e.Model, e.Stream)
			}
		}
	})
}

// FuzzStreamReader feeds the reader mutations of a genuine sealed stream.
// Whatever it gets, it may finish without error only by yielding exactly
// the genuine clear stream: nothing can be forged, dropped or reordered.
func FuzzStreamReader(f *testing.F) {
	o, s := fixedReply(f)
	start := string(sseEvent(s.StartData()))
	c0 := string(sseEvent(s.EventData([]byte(`{"n":0}`))))
	c1 := string(sseEvent(s.EventData([]byte("{\n\"n\":1}"))))
	end := string(streamEnd(s))
	ev := []string{start, c0, c1, strings.TrimSuffix(end, doneEvent), doneEvent}
	genuine := strings.Join(ev, "")
	want, err := readStream(o, ev...)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(genuine))
	f.Add([]byte(": keep-alive\n\n" + ev[0] + `data: {"svc":{}}` + "\n\n" + ev[1] + ev[2] + ev[3]))
	f.Add([]byte(ev[0] + ev[2] + ev[1] + ev[3] + ev[4]))
	f.Add([]byte(ev[0] + ev[1] + ev[2] + ev[4]))
	f.Add([]byte(ev[0] + ev[1] + `data: {"error":{"message":"x"}}` + "\n\n"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		got, err := io.ReadAll(o.NewStreamReader(bytes.NewReader(stream)))
		if err == nil && string(got) != want {
			t.Fatalf("accepted a stream that reads\n%q\nwant\n%q", got, want)
		}
		if err != nil && !errors.Is(err, ErrInvalidReply) && !errors.Is(err, ErrTruncated) && !strings.Contains(err.Error(), "reading stream") {
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}

func FuzzOpenBody(f *testing.F) {
	o, s := fixedReply(f)
	genuine := wireBody(s.Nonce(), s.SealChunk([]byte("ab")), s.SealFinal([]byte("cd")))
	f.Add(genuine)
	f.Add([]byte(`{"svc_e2e":1,"response_nonce":"","chunks":[]}`))
	f.Fuzz(func(t *testing.T, reply []byte) {
		got, err := o.OpenBody(reply)
		if err == nil && string(got) != "abcd" {
			t.Fatalf("opened a forged reply: %q", got)
		}
	})
}

// fixedReply is an opener and sealer for one reply that every fuzz worker
// process derives alike, so seeds sealed by the coordinator open in the
// workers. (A sealed request would not do: its secret is random.)
func fixedReply(f *testing.F) (*ResponseOpener, *ResponseSealer) {
	secret := bytes.Repeat([]byte{1}, secretSize)
	enc := bytes.Repeat([]byte{2}, xwingEncSize)
	s, err := newResponseSealer(secret, enc, bytes.Repeat([]byte{3}, nonceSize))
	if err != nil {
		f.Fatal(err)
	}
	return &ResponseOpener{secret: secret, enc: enc}, s
}
