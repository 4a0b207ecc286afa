package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

// maxSpeechInput is OpenAI's limit on the text of one speech request, in
// characters.
const maxSpeechInput = 4096

// audioJob is a transcription or speech request, checked and ready to run.
type audioJob struct {
	model *model
	dir   directives
	rtf   float64 // the work takes rtf times the clip's duration
}

// prepareAudio finds the model of an audio request and reads the
// directives in directiveText: a transcription's prompt, a speech
// request's input.
func (s *simulator) prepareAudio(modelID, capability, directiveText string) (*audioJob, *api.Result) {
	m, fail := s.lookup(modelID, capability)
	if fail != nil {
		return nil, fail
	}
	dir, err := parseDirectives(directiveText)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	j := &audioJob{model: m, dir: dir, rtf: s.cfg.AudioRTF}
	if dir.rtf != nil {
		j.rtf = *dir.rtf
	}
	return j, nil
}

// scripted plays a hang or fail directive. As with chat they act before
// any work, so a failure costs nothing and may be retried elsewhere. It
// returns nil when the request has neither.
func (j *audioJob) scripted(ctx context.Context) *api.Result { return j.dir.scripted(ctx) }

// process stands for the engine's work on a clip of the given length:
// loading a cold model, the fixed latency, then the real-time factor. It
// returns the result of a run that went through, or Cancelled.
func (s *simulator) process(ctx context.Context, j *audioJob, seconds float64) *api.Result {
	return s.work(ctx, j.model, s.cfg.Latency+workTime(seconds, j.rtf))
}

// work stands for an engine's work on a request answered whole: loading a
// cold model, then d. It returns the result of a run that went through,
// with a cold start's timing, or Cancelled.
func (s *simulator) work(ctx context.Context, m *model, d time.Duration) *api.Result {
	wait, cold, err := m.acquire(ctx, &s.cfg)
	if err != nil {
		return engine.Cancelled()
	}
	defer func() { m.touch(s.cfg.Now()) }()
	if err := s.cfg.Sleep(ctx, d); err != nil {
		return engine.Cancelled()
	}
	res := engine.OK()
	if cold {
		load, c := ms(wait), true
		res.Timing.ModelLoadMs, res.Timing.ColdStart = &load, &c
	}
	return res
}

// workTime is rtf times seconds, clamped so that absurd directives cannot
// overflow a Duration.
func workTime(seconds, rtf float64) time.Duration {
	d := seconds * rtf * float64(time.Second)
	if !(d > 0) { // NaN too
		return 0
	}
	return time.Duration(min(d, float64(24*time.Hour)))
}

func (e *Engine) serveTranscription(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	var p api.TranscriptionParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		return badRequest("invalid transcription parameters: " + err.Error())
	}
	j, fail := e.sim.prepareAudio(req.Model, api.CapTranscription, p.Prompt)
	if fail != nil {
		return fail
	}
	if res := j.scripted(ctx); res != nil {
		return res
	}
	if req.Audio == nil {
		return badRequest("file: no audio came with the request")
	}
	c, err := readClip(req.Audio)
	if err != nil {
		return clipFailure(ctx, err)
	}
	if p.Format != "" && c.info.Format != p.Format {
		return badRequest(fmt.Sprintf("file: the audio is %s, not %s as its parameters say", c.info.Format, p.Format))
	}
	seconds := c.seconds(p.Seconds)
	res := e.sim.process(ctx, j, seconds)
	if res.Status != http.StatusOK {
		return res
	}
	if j.dir.cut {
		return engine.CutOff(nil)
	}
	data, err := json.Marshal(transcribe(j.model.spec.ID, c, seconds, &p))
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode transcript: "+err.Error())
	}
	if err := sink.Body(ctx, data); err != nil {
		return engine.Cancelled()
	}
	return res
}

// clipFailure is the result of an upload readClip could not take: the
// transfer broke (or was cancelled), or the file is not audio.
func clipFailure(ctx context.Context, err error) *api.Result {
	if _, ok := errors.AsType[*uploadError](err); ok {
		if ctx.Err() != nil {
			return engine.Cancelled()
		}
		return engine.Failure(http.StatusBadGateway, api.TypeUpstream, err.Error())
	}
	return badRequest(err.Error())
}

// speechJob is a checked speech request.
type speechJob struct {
	*audioJob
	text  string // what is said: the input without its directive lines
	voice string
	speed float64
}

// prepareSpeech checks a speech request as OpenAI does and fills in the
// defaults: the model's voice, speed 1.
func (s *simulator) prepareSpeech(modelID string, p *api.SpeechParams) (*speechJob, *api.Result) {
	j, fail := s.prepareAudio(modelID, api.CapSpeech, p.Input)
	if fail != nil {
		return nil, fail
	}
	spec := &j.model.spec
	switch n := utf8.RuneCountInString(p.Input); {
	case strings.TrimSpace(p.Input) == "":
		return nil, badRequest("input: must not be empty")
	case n > maxSpeechInput:
		return nil, badRequest(fmt.Sprintf("input: %d characters, more than the %d one request can say", n, maxSpeechInput))
	}
	voice := p.Voice
	if voice == "" {
		voice = spec.DefaultVoice
	}
	if !slices.Contains(spec.Voices, voice) {
		return nil, badRequest(fmt.Sprintf("voice: %q is not a voice of %s; choose one of %s",
			voice, spec.ID, strings.Join(spec.Voices, ", ")))
	}
	speed := p.Speed
	if speed == 0 {
		speed = 1
	}
	if !(speed >= 0.25 && speed <= 4) {
		return nil, badRequest(fmt.Sprintf("speed: %g is outside 0.25 to 4", p.Speed))
	}
	return &speechJob{audioJob: j, text: withoutDirectives(p.Input), voice: voice, speed: speed}, nil
}

func (e *Engine) serveSpeech(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	var p api.SpeechParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		return badRequest("invalid speech parameters: " + err.Error())
	}
	j, fail := e.sim.prepareSpeech(req.Model, &p)
	if fail != nil {
		return fail
	}
	if res := j.scripted(ctx); res != nil {
		return res
	}
	pcm := synthesize(j.text, j.voice, j.speed)
	var wav bytes.Buffer
	if err := audio.EncodeWAV(&wav, pcm); err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode speech: "+err.Error())
	}
	res := e.sim.process(ctx, j.audioJob, pcmSeconds(pcm))
	if res.Status != http.StatusOK {
		return res
	}
	if j.dir.cut {
		return engine.CutOff(nil)
	}
	if err := sink.Body(ctx, wav.Bytes()); err != nil {
		return engine.Cancelled()
	}
	return res
}

// pcmSeconds is the length of pcm.
func pcmSeconds(pcm audio.PCM) float64 {
	if pcm.Rate <= 0 {
		return 0
	}
	return float64(len(pcm.Samples)) / float64(pcm.Rate)
}

func badRequest(msg string) *api.Result {
	return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, msg)
}
