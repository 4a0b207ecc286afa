package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/svc-dev/svc/internal/api"
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
	r := s.newRelay(c, api.KindTranscription, req.Model, false, params)
	r.entry.SetAudioSeconds(req.Params.Seconds)
	r.upload = req.Audio
	r.audioSeconds, r.audioFormat = req.Params.Seconds, req.Params.Format
	r.noKeepAlive = !req.JSON()
	r.render = func(answer []byte) (string, []byte, error) {
		var t api.Transcript
		if err := json.Unmarshal(answer, &t); err != nil {
			return "", nil, r.badReply("a transcript", err)
		}
		svc, err := json.Marshal(svcReply{Worker: r.svcWorker(), RequestID: r.requestID})
		if err != nil {
			return "", nil, err
		}
		return req.Render(&t, svc)
	}
	return r.unary(c)
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
	r := s.newRelay(c, api.KindSpeech, req.Model, false, nil)
	// A model that is unknown or does not speak is answered by the fleet
	// with the 404 that names the right endpoint.
	if r.model = s.fleet.Model(c.principal.OrgID, req.Model); r.model != nil && r.model.Has(api.CapSpeech) {
		if err := req.Fit(r.model); err != nil {
			r.done(err)
			return err
		}
	}
	if r.body, err = json.Marshal(req.Params); err != nil {
		r.done(err)
		return err
	}
	asJSON := bytes.Contains(c.ctx.Request.Header.Peek("Accept"), []byte("application/json"))
	r.noKeepAlive = !asJSON
	r.render = func(wav []byte) (string, []byte, error) {
		secs, err := speech.Seconds(wav)
		if err != nil {
			return "", nil, r.badReply("WAV audio", err)
		}
		r.audioSeconds, r.audioFormat = secs, api.AudioWAV
		if !asJSON {
			return "audio/wav", wav, nil
		}
		svc, err := json.Marshal(svcReply{Worker: r.svcWorker(), RequestID: r.requestID})
		if err != nil {
			return "", nil, err
		}
		out, err := speech.Reply(wav, secs, r.requestID, svc)
		return "application/json", out, err
	}
	return r.unary(c)
}

// badReply is the 502 for a worker answer the gateway cannot use.
func (r *relay) badReply(want string, err error) error {
	return &api.Error{Status: http.StatusBadGateway, Code: "bad_worker_reply", Err: err,
		Message: "worker " + r.lease.Worker.Name + " did not answer with " + want}
}
