package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/speech"
	"github.com/svc-dev/svc/internal/transcription"
)

// transcriptions is POST /v1/audio/transcriptions.
func (s *Server) transcriptions(c *call) error {
	return s.transcribe(c, transcription.Parse)
}

// translations is POST /v1/audio/translations: a transcription whose text
// comes out in English.
func (s *Server) translations(c *call) error {
	if sealed(c) {
		return errNotSealable("translations", "send the audio as an encrypted transcription")
	}
	return s.transcribe(c, transcription.ParseTranslation)
}

// transcribe checks the upload as it arrives with parse, spooling the
// file to disk, then sends the file to a worker and renders the
// transcript as asked.
func (s *Server) transcribe(c *call, parse func(string, io.Reader, io.Writer) (*transcription.Request, error)) error {
	if sealed(c) {
		// A sealed upload goes to the worker as it came: it is read whole,
		// within the same limit.
		if err := readBody(c.ctx, transcription.MaxBody, s.bodies, &c.bodyHeld); err != nil {
			if errors.Is(err, errOverLimit) {
				return transcription.ErrBodyTooLarge
			}
			return err
		}
		return s.privateInference(c, api.KindTranscription)
	}
	sp, err := newSpool(s.spoolDir)
	if err != nil {
		return err
	}
	started := false
	defer func() {
		if !started {
			sp.close()
		}
	}()
	body := requestBody(c.ctx)
	if body == nil {
		// fasthttp read the body whole.
		body = bytes.NewReader(c.ctx.PostBody())
	}
	req, err := parse(string(c.ctx.Request.Header.ContentType()), body, sp)
	if err != nil && req != nil {
		c.model = req.Model
	}
	if errors.Is(err, transcription.ErrBodyTooLarge) || errors.Is(err, errRequestTimeout) || errors.Is(err, errClientGone) {
		// The rest of the body is still coming and will not be read, or
		// stopped coming.
		if errors.Is(err, transcription.ErrBodyTooLarge) {
			closeUnread(c.ctx)
		} else {
			c.ctx.SetConnectionClose()
		}
	}
	if err != nil {
		return err
	}
	if err := sp.done(); err != nil {
		return err
	}
	params, err := json.Marshal(req.Params)
	if err != nil {
		return err
	}
	r := inference(c, api.KindTranscription, req.Model, false)
	r.Params = params
	// Each worker tried reads the file from the start: the relay may read
	// it after this handler has returned (a reply kept alive), so it is
	// closed when the call ends, not here.
	r.Upload = sp.reader
	r.AudioSeconds, r.AudioFormat = req.Params.Seconds, req.Params.Format
	r.NoKeepAlive = !req.JSON()
	r.Render = func(a relay.Answer) (relay.Output, error) {
		var t api.Transcript
		if err := json.Unmarshal(a.Body, &t); err != nil {
			return relay.Output{}, relay.BadReply(a.Worker, "a transcript", err)
		}
		ctype, out, err := req.Render(&t, a.Svc)
		return relay.Output{ContentType: ctype, Body: out}, err
	}
	rc := s.start(c, r)
	started = true
	rc.OnEnd(sp.close)
	return s.answerUnary(c, rc, formLate)
}

// speech is POST /v1/audio/speech: raw WAV by default, or the JSON form
// (base64 audio beside its length and svc) for Accept: application/json,
// which alone may be kept alive through a long generation.
func (s *Server) speech(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindSpeech)
	}
	req, err := speech.Parse(c.ctx.PostBody())
	if err != nil {
		return err
	}
	r := inference(c, api.KindSpeech, req.Model, false)
	// A model that is unknown or does not speak is answered by the fleet
	// with the 404 that names the right endpoint.
	if r.ModelInfo = s.fleet.Model(c.principal.OrgID, req.Model); r.ModelInfo != nil && r.ModelInfo.Has(api.CapSpeech) {
		if err := req.Fit(r.ModelInfo); err != nil {
			s.refuse(c, r, err)
			return err
		}
	}
	if r.Body, err = json.Marshal(req.Params); err != nil {
		s.refuse(c, r, err)
		return err
	}
	asJSON := wantsJSON(c.ctx.Request.Header.Peek("Accept"))
	r.NoKeepAlive = !asJSON
	r.Render = func(a relay.Answer) (relay.Output, error) {
		secs, err := speech.Seconds(a.Body)
		if err != nil {
			return relay.Output{}, relay.BadReply(a.Worker, "WAV audio", err)
		}
		// The length is the row's speech_seconds: its audio_seconds and
		// audio_format are a transcription's, of the audio it was sent.
		out := relay.Output{ContentType: "audio/wav", Body: a.Body, SpeechSeconds: secs}
		if asJSON {
			out.ContentType = "application/json"
			out.Body, err = speech.Reply(a.Body, secs, c.requestID, a.Svc)
		}
		return out, err
	}
	return s.relayUnary(c, r, formLate)
}
