package speech

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Request
	}{
		{"minimal", `{"model":"tts","input":"Hello"}`, Request{Model: "tts", Params: api.SpeechParams{Input: "Hello"}}},
		{"every field", `{"model":"tts","input":"Hi","voice":"nova","response_format":"wav","speed":1.5,"instructions":"calm","stream_format":"audio"}`,
			Request{Model: "tts", Params: api.SpeechParams{Input: "Hi", Voice: "nova", Speed: 1.5, Instructions: "calm"}}},
		{"voice as an object", `{"model":"tts","input":"Hi","voice":{"id":"custom-1"}}`,
			Request{Model: "tts", Params: api.SpeechParams{Input: "Hi", Voice: "custom-1"}}},
		{"nulls are absent", `{"model":"tts","input":"Hi","voice":null,"speed":null}`,
			Request{Model: "tts", Params: api.SpeechParams{Input: "Hi"}}},
		{"4096 characters", `{"model":"tts","input":"` + strings.Repeat("é", MaxInput) + `"}`,
			Request{Model: "tts", Params: api.SpeechParams{Input: strings.Repeat("é", MaxInput)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Fatalf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestParseRefusals(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
		field  string // first field of a 422, param of a 400
		msg    string
	}{
		{"empty body", ``, 400, "", "body is empty"},
		{"malformed", `{"model":`, 400, "", "Malformed JSON"},
		{"not an object", `["tts"]`, 422, "body", "object"},
		{"no model", `{"input":"hi"}`, 422, "model", "required"},
		{"model not a string", `{"model":5,"input":"hi"}`, 422, "model", "string"},
		{"no input", `{"model":"tts"}`, 422, "input", "required"},
		{"blank input", `{"model":"tts","input":"  "}`, 422, "input", "empty"},
		{"a NUL alone", `{"model":"tts","input":"\u0000"}`, 422, "input", "empty"},
		{"control characters alone", `{"model":"tts","input":" \t\u0000\u001b "}`, 422, "input", "empty"},
		{"voice a number", `{"model":"tts","input":"hi","voice":3}`, 422, "voice", "voice name"},
		{"speed too slow", `{"model":"tts","input":"hi","speed":0.1}`, 422, "speed", "between"},
		{"speed a word", `{"model":"tts","input":"hi","speed":"fast"}`, 422, "speed", "number"},
		{"mp3", `{"model":"tts","input":"hi","response_format":"mp3"}`, 400, "response_format", "only wav"},
		{"pcm", `{"model":"tts","input":"hi","response_format":"pcm"}`, 400, "response_format", "only wav"},
		{"sse", `{"model":"tts","input":"hi","stream_format":"sse"}`, 400, "stream_format", "stream_format"},
		{"model in another case", `{"MODEL":"tts","input":"hi"}`, 400, "model", "in another case"},
		{"speed in another case", `{"model":"tts","input":"hi","Speed":0.1}`, 400, "speed", "in another case"},
		{"an unknown field with a capital", `{"model":"tts","input":"hi","X_Extra":1}`, -1, "", ""},
		{"empty voice", `{"model":"tts","input":"hi","voice":""}`, 400, "voice", "empty voice"},
		{"empty response_format", `{"model":"tts","input":"hi","response_format":""}`, 400, "response_format", "only wav"},
		{"empty stream_format", `{"model":"tts","input":"hi","stream_format":""}`, 400, "stream_format", "stream_format"},
		{"null", `null`, 422, "body", "object"},
		{"a field under two cases", `{"model":"tts","input":"hi","INPUT":"bye"}`, 400, "input", "in another case"},
		{"input too long", `{"model":"tts","input":"` + strings.Repeat("a", MaxInput+1) + `"}`, 400, "input", "4,096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body))
			if tt.status < 0 {
				// Not a refusal: a name not matched exactly is not the field.
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an *api.Error", err)
			}
			if ae.HTTPStatus() != tt.status || !strings.Contains(ae.Message, tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", ae.HTTPStatus(), ae.Message, tt.status, tt.msg)
			}
			if tt.status == 422 && ae.Fields[0].Field != tt.field || tt.status == 400 && ae.Param != tt.field {
				t.Fatalf("got fields %+v param %q, want %q", ae.Fields, ae.Param, tt.field)
			}
		})
	}
}

func TestFit(t *testing.T) {
	model := &api.Model{ID: "tts", Voices: []string{"alloy", "nova"}, DefaultVoice: "alloy"}
	tests := []struct {
		name  string
		model *api.Model
		voice string
		want  string // the voice chosen, or the error's code
	}{
		{"default voice", model, "", "alloy"},
		{"a listed voice", model, "nova", "nova"},
		{"unknown voice", model, "bogus", "unknown_voice"},
		{"no voices listed: the engine decides", &api.Model{ID: "tts"}, "anything", "anything"},
		{"no default and none asked", &api.Model{ID: "tts", Voices: []string{"a"}}, "", "voice_required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Request{Model: "tts", Params: api.SpeechParams{Input: "x", Voice: tt.voice}}
			err := r.Fit(tt.model)
			var ae *api.Error
			switch {
			case errors.As(err, &ae):
				if ae.Code != tt.want || ae.HTTPStatus() != 400 || ae.Param != "voice" {
					t.Fatalf("got %+v, want code %s", ae, tt.want)
				}
				if tt.want == "unknown_voice" && !strings.Contains(ae.Message, "alloy, nova") {
					t.Fatalf("the message does not list the voices: %s", ae.Message)
				}
			case err != nil:
				t.Fatal(err)
			case r.Params.Voice != tt.want:
				t.Fatalf("voice %q, want %q", r.Params.Voice, tt.want)
			}
		})
	}
}

func TestReply(t *testing.T) {
	wav := pcmWAV(24000, 12000) // half a second
	secs, err := Seconds(wav)
	if err != nil || secs != 0.5 {
		t.Fatalf("seconds %v err %v", secs, err)
	}
	out, err := Reply(wav, secs, "req-1", json.RawMessage(`{"worker":{"id":"w"},"request_id":"req-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var r api.SpeechReply
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	audio, _ := base64.StdEncoding.DecodeString(r.Audio)
	if !bytes.Equal(audio, wav) || r.Format != "wav" || r.DurationMs != 500 || r.RequestID != "req-1" || len(r.Svc) == 0 {
		t.Fatalf("reply %+v", r)
	}
	if _, err := Seconds([]byte("not audio")); err == nil {
		t.Fatal("a reply that is not audio was accepted")
	}
}

// pcmWAV is a silent mono 16-bit WAV of n samples at rate.
func pcmWAV(rate, n int) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + 2*n))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(1))
	le(uint32(rate))
	le(uint32(2 * rate))
	le(uint16(2))
	le(uint16(16))
	b.WriteString("data")
	le(uint32(2 * n))
	b.Write(make([]byte, 2*n))
	return b.Bytes()
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model":"tts","input":"Hello","voice":"alloy","speed":1}`))
	f.Add([]byte(`{"model":"tts","input":"` + strings.Repeat("a", MaxInput+1) + `"}`))
	f.Add([]byte(`{"voice":{"id":""}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || (ae.HTTPStatus() != 400 && ae.HTTPStatus() != 422) {
				t.Fatalf("err = %v, want a 400 or 422", err)
			}
			return
		}
		if r.Model == "" || strings.TrimSpace(r.Params.Input) == "" {
			t.Fatalf("accepted %q as %+v", body, r)
		}
	})
}
