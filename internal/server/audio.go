package server

import (
	"bytes"
	"encoding/json"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/relay"
	"github.com/svc-dev/svc/internal/speech"
	"github.com/svc-dev/svc/internal/transcription"
)

// transcriptions is POST /v1/audio/transcriptions: check the upload,
// stream the file to a worker, render the transcript as asked.
func (s *Server) transcriptions(c *call) error {
	if sealed(c) {
		return s.privateInference(c, api.KindTranscription)
	}
	// The relay reads the upload after this handler may have returned (a
	// reply kept alive), so it takes the body from fasthttp: a swap, not a
	// copy, and the only buffer the upload ever has here.
	body := c.ctx.Request.SwapBody(nil)
	req, err := transcription.Parse(string(c.ctx.Request.Header.ContentType()), body)
	if err != nil {
		return err
	}
	params, err := json.Marshal(req.Params)
	if err != nil {
		return err
	}
	r := inference(c, api.KindTranscription, req.Model, false)
	r.Params = params
	r.Upload = req.Audio
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
	return s.relayUnary(c, r, formLate)
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
			s.relay.Refuse(r, err)
			return err
		}
	}
	if r.Body, err = json.Marshal(req.Params); err != nil {
		s.relay.Refuse(r, err)
		return err
	}
	asJSON := bytes.Contains(c.ctx.Request.Header.Peek("Accept"), []byte("application/json"))
	r.NoKeepAlive = !asJSON
	r.Render = func(a relay.Answer) (relay.Output, error) {
		secs, err := speech.Seconds(a.Body)
		if err != nil {
			return relay.Output{}, relay.BadReply(a.Worker, "WAV audio", err)
		}
		out := relay.Output{ContentType: "audio/wav", Body: a.Body, AudioSeconds: secs, AudioFormat: api.AudioWAV}
		if asJSON {
			out.ContentType = "application/json"
			out.Body, err = speech.Reply(a.Body, secs, c.requestID, a.Svc)
		}
		return out, err
	}
	return s.relayUnary(c, r, formLate)
}
