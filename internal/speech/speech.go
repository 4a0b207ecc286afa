// Package speech is POST /v1/audio/speech: checking a request against the
// model's voices, and the JSON form of the answer.
package speech

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/jsonbody"
)

// MaxInput is the longest text spoken in one request, in characters.
const MaxInput = 4096

// Request is a speech request whose shape has been checked; Fit checks it
// against the model that will speak it.
type Request struct {
	Model  string
	Params api.SpeechParams
}

// Parse reads a request body. Malformed JSON and the spec's three refusals
// (an unsupported response_format, input over 4,096 characters) are 400;
// missing or mistyped fields are a 422 naming them.
func Parse(raw []byte) (*Request, error) {
	// Names are matched exactly, as on every other route: encoding/json
	// would read "MODEL" as model, and a miscased key sent after the
	// right one would win.
	// The members checked here are named for the case check: sent in
	// another case, an engine could obey them where this did not look.
	m, err := jsonbody.Members(raw, "model", "input", "voice", "response_format", "speed", "instructions", "stream_format")
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, api.Invalid(api.FieldError{Field: "body", Type: api.FieldWrongType, Message: "expected a JSON object"})
	}
	b := struct{ Model, Input, Voice, ResponseFormat, Speed, Instructions, StreamFormat json.RawMessage }{
		m["model"], m["input"], m["voice"], m["response_format"], m["speed"], m["instructions"], m["stream_format"]}
	r := &Request{}
	var v api.Validator
	str := func(field string, raw json.RawMessage, dst *string) bool {
		if !present(raw) {
			return false
		}
		if json.Unmarshal(raw, dst) != nil {
			v.Add(field, api.FieldWrongType, "expected a string")
			return false
		}
		return true
	}
	if !str("model", b.Model, &r.Model) {
		if !present(b.Model) {
			v.Add("model", api.FieldMissing, "required")
		}
	} else if r.Model == "" {
		v.Add("model", api.FieldInvalid, "must not be empty")
	}
	p := &r.Params
	if !str("input", b.Input, &p.Input) {
		if !present(b.Input) {
			v.Add("input", api.FieldMissing, "required: the text to speak")
		}
	} else if blank(p.Input) {
		v.Add("input", api.FieldInvalid, "must not be empty")
	}
	emptyVoice := false
	if present(b.Voice) {
		// OpenAI's clients also send a custom voice as {"id": ...}.
		var obj struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(b.Voice, &p.Voice) != nil {
			if json.Unmarshal(b.Voice, &obj) != nil || obj.ID == "" {
				v.Add("voice", api.FieldWrongType, "expected a voice name")
			}
			p.Voice = obj.ID
		} else {
			emptyVoice = p.Voice == ""
		}
	}
	if present(b.Speed) {
		if json.Unmarshal(b.Speed, &p.Speed) != nil {
			v.Add("speed", api.FieldWrongType, "expected a number")
		} else if p.Speed < 0.25 || p.Speed > 4 {
			v.Add("speed", api.FieldOutOfRange, "must be between 0.25 and 4")
		}
	}
	str("instructions", b.Instructions, &p.Instructions)
	var format, streamFormat string
	// A format sent empty names none: it is refused as unsupported, as
	// OpenAI refuses it, rather than read as the default.
	hasFormat := str("response_format", b.ResponseFormat, &format)
	hasStreamFormat := str("stream_format", b.StreamFormat, &streamFormat)
	if err := v.Err(); err != nil {
		return nil, err
	}
	switch {
	case hasFormat && format != api.AudioWAV:
		return nil, &api.Error{Kind: api.KindInvalidRequest, Code: "unsupported_response_format", Param: "response_format",
			Message: "Unsupported response_format " + strconv.Quote(format) + ": only wav is supported (24 kHz, 16-bit, mono)"}
	case hasStreamFormat && streamFormat != "audio":
		return nil, &api.Error{Kind: api.KindInvalidRequest, Code: "unsupported_stream_format", Param: "stream_format",
			Message: "Unsupported stream_format " + strconv.Quote(streamFormat) + ": the audio is sent whole"}
	case emptyVoice:
		return nil, &api.Error{Kind: api.KindInvalidRequest, Code: "unknown_voice", Param: "voice",
			Message: "An empty voice names none; leave voice out for the model's default voice"}
	case utf8.RuneCountInString(p.Input) > MaxInput:
		return nil, &api.Error{Kind: api.KindInvalidRequest, Code: "input_too_long", Param: "input",
			Message: "The input is longer than 4,096 characters; split it into several requests"}
	}
	return r, nil
}

// Fit checks the voice against the model's voices, choosing its default
// voice when the request named none. A model that lists no voices takes
// whatever its engine does.
func (r *Request) Fit(m *api.Model) error {
	if r.Params.Voice == "" {
		r.Params.Voice = m.DefaultVoice
	}
	if len(m.Voices) == 0 || slices.Contains(m.Voices, r.Params.Voice) {
		return nil
	}
	if r.Params.Voice == "" {
		return &api.Error{Kind: api.KindInvalidRequest, Code: "voice_required", Param: "voice",
			Message: "Model " + m.ID + " has no default voice; choose one of " + strings.Join(m.Voices, ", ")}
	}
	return &api.Error{Kind: api.KindInvalidRequest, Code: "unknown_voice", Param: "voice",
		Message: "Model " + m.ID + " has no voice " + r.Params.Voice + "; choose one of " + strings.Join(m.Voices, ", ")}
}

// Seconds checks that a worker's answer is a WAV file and returns its
// length.
func Seconds(wav []byte) (float64, error) {
	info, err := audio.Probe(bytes.NewReader(wav))
	if err != nil {
		return 0, err
	}
	if info.Format != api.AudioWAV {
		return 0, errors.New("the worker's audio is " + info.Format + ", not wav")
	}
	return info.Seconds, nil
}

// Reply is the JSON form of an answer, for clients that asked for
// application/json: the WAV in base64 beside its length and svc.
func Reply(wav []byte, seconds float64, requestID string, svc json.RawMessage) ([]byte, error) {
	return json.Marshal(api.SpeechReply{
		Audio: base64.StdEncoding.EncodeToString(wav), Format: api.AudioWAV,
		DurationMs: int64(seconds*1000 + 0.5), RequestID: requestID, Svc: svc,
	})
}

// present reports whether a field was sent with a value other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// blank reports text with nothing to speak: white space and control
// characters alone (a NUL among them, which no engine speaks).
func blank(text string) bool {
	return strings.TrimFunc(text, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) == ""
}
