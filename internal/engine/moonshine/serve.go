package moonshine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

const (
	// sampleRate is the rate Moonshine and the VAD take.
	sampleRate = 16000
	// maxSeconds bounds one transcription. The runner holds the samples
	// twice over (115 MB for 30 minutes), and everyone queued behind waits
	// for it: on two cores 30 minutes of speech take two to three minutes.
	maxSeconds = 30 * 60
)

// Serve transcribes a transcription request.
func (e *Engine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	if req.Kind != api.KindTranscription {
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			fmt.Sprintf("moonshine does not serve %q requests: it only transcribes", req.Kind))
	}
	if req.Model != e.model {
		return engine.Failure(http.StatusNotFound, api.TypeNotFound,
			fmt.Sprintf("model %q not found: this moonshine engine serves %s", req.Model, e.model))
	}
	var p api.TranscriptionParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		return badRequest("invalid transcription parameters: " + err.Error())
	}
	if p.Translate {
		// It hears English only: what it would give back is a transcript
		// of whatever it took for English, not a translation.
		return engine.Failure(http.StatusNotImplemented, api.TypeNotSupported,
			e.model+" transcribes English speech and does not translate; send English audio to /v1/audio/transcriptions")
	}
	if p.Language != "" && !strings.EqualFold(p.Language, "en") {
		return badRequest(fmt.Sprintf("language: %s transcribes English only, not %q", e.model, p.Language))
	}
	if p.Seconds > maxSeconds {
		return tooLong(p.Seconds)
	}
	if req.Audio == nil {
		return badRequest("file: no audio came with the request")
	}
	samples, seconds, fail := decode(ctx, req.Audio)
	if fail != nil {
		return fail
	}
	rep, loadMs, err := e.transcribe(ctx, samples)
	if err != nil {
		return e.failure(ctx, err)
	}
	e.log.Debug("transcribed", "seconds", seconds, "segments", len(rep.Segments),
		"vad_ms", rep.VADMs, "decode_ms", rep.DecodeMs)
	data, err := json.Marshal(transcript(rep, seconds, p.Words))
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode transcript: "+err.Error())
	}
	if err := sink.Body(ctx, data); err != nil {
		return engine.Cancelled()
	}
	res := engine.OK()
	if loadMs != nil {
		cold := true
		res.Timing.ModelLoadMs, res.Timing.ColdStart = loadMs, &cold
	}
	return res
}

// decode reads the upload into 16 kHz samples, with its duration.
func decode(ctx context.Context, r io.Reader) ([]float32, float64, *api.Result) {
	pcm, err := audio.Decode(r)
	if err != nil {
		fe, unusable := errors.AsType[*audio.FormatError](err)
		switch {
		case unusable && fe.Unsupported:
			// A sound file this worker cannot read, where one whose engine
			// takes the file as it is can: the gateway's code for a file it
			// cannot read, with the status of a worker's lasting limit.
			res := engine.Failure(http.StatusNotImplemented, api.TypeNotSupported, "file: "+err.Error())
			res.Error.Code, res.Error.Param = "unsupported_audio_encoding", "file"
			return nil, 0, res
		case unusable:
			res := badRequest("file: " + err.Error())
			res.Error.Code, res.Error.Param = "unreadable_audio", "file"
			return nil, 0, res
		case errors.Is(err, audio.ErrUnsupported):
			res := badRequest("file: " + err.Error())
			res.Error.Code, res.Error.Param = "unsupported_audio_format", "file"
			return nil, 0, res
		case errors.Is(err, audio.ErrTooLong):
			return nil, 0, tooLong(math.Inf(1))
		case ctx.Err() != nil:
			return nil, 0, engine.Cancelled()
		}
		// The transfer from the gateway broke.
		return nil, 0, engine.Failure(http.StatusBadGateway, api.TypeUpstream, "read the audio: "+err.Error())
	}
	seconds := float64(len(pcm.Samples)) / float64(pcm.Rate)
	if seconds > maxSeconds {
		return nil, 0, tooLong(seconds)
	}
	samples := pcm.Samples
	if pcm.Rate != sampleRate {
		samples = audio.Resample(samples, pcm.Rate, sampleRate)
	}
	return samples, seconds, nil
}

// transcribe runs samples through the runner, waiting for its turn, and
// starting the runner if it is not running. loadMs is set when it had to
// be started.
func (e *Engine) transcribe(ctx context.Context, samples []float32) (rep *reply, loadMs *float64, err error) {
	if err := e.acquire(ctx); err != nil {
		return nil, nil, err
	}
	defer e.release()
	r := e.run.Load()
	if r != nil && r.hasExited() {
		e.log.Warn("runner exited; starting another", "err", r.err, "stderr", r.stderr.tail())
		e.run.Store(nil)
		r = nil
	}
	if r == nil {
		start := time.Now()
		if r, err = e.startRunner(ctx); err != nil {
			return nil, nil, err
		}
		e.run.Store(r)
		ms := float64(time.Since(start).Microseconds()) / 1000
		loadMs = &ms
	}
	rep, err = r.transcribe(ctx, e.done, samples)
	var reported errRunner
	if err != nil && !errors.As(err, &reported) {
		// Whatever it was doing, its stream is out of step now.
		e.run.Store(nil)
		r.discard()
	}
	return rep, loadMs, err
}

// failure is the result of a request the runner did not answer.
func (e *Engine) failure(ctx context.Context, err error) *api.Result {
	select {
	case <-e.done:
		return unavailable(errClosed)
	default:
	}
	if ctx.Err() != nil {
		return engine.Cancelled()
	}
	if errors.Is(err, errStart) {
		return engine.Unreachable(err)
	}
	if _, ok := errors.AsType[errRunner](err); ok {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
	r := engine.Failure(http.StatusBadGateway, api.TypeUpstream, "moonshine runner failed: "+err.Error())
	r.Retryable = true
	return r
}

func badRequest(msg string) *api.Result {
	return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, msg)
}

func tooLong(seconds float64) *api.Result {
	msg := fmt.Sprintf("file: moonshine transcribes at most %d minutes of audio in one request", maxSeconds/60)
	if !math.IsInf(seconds, 0) {
		msg += fmt.Sprintf("; this file lasts %.1f", seconds/60)
	}
	return badRequest(msg)
}

// transcript is the answer to a request: the runner's segments with text,
// numbered, and their words when asked for.
func transcript(rep *reply, seconds float64, words bool) api.Transcript {
	t := api.Transcript{Language: "en", Duration: round(seconds, 1e3), Segments: []api.Segment{}}
	var texts []string
	for _, s := range rep.Segments {
		text := strings.TrimSpace(s.Text)
		if text == "" {
			continue
		}
		seg := api.Segment{
			ID:           len(t.Segments),
			Start:        round(s.Start, 1e3),
			End:          round(s.End, 1e3),
			Text:         text,
			AvgLogprob:   round(s.AvgLogprob, 1e4),
			NoSpeechProb: round(s.NoSpeechProb, 1e4),
		}
		t.Segments = append(t.Segments, seg)
		texts = append(texts, text)
		if words {
			t.Words = append(t.Words, spreadWords(seg)...)
		}
	}
	t.Text = strings.Join(texts, " ")
	return t
}

// spreadWords times a segment's words. Moonshine gives no word timings,
// so each word gets a share of the segment's span in proportion to its
// length: a rough guess that at least keeps words in order and inside
// their segment.
func spreadWords(seg api.Segment) []api.Word {
	fields := strings.Fields(seg.Text)
	total := 0
	for _, w := range fields {
		total += len([]rune(w))
	}
	out := make([]api.Word, 0, len(fields))
	span, at := seg.End-seg.Start, 0
	for _, w := range fields {
		start := seg.Start + span*float64(at)/float64(total)
		at += len([]rune(w))
		end := seg.Start + span*float64(at)/float64(total)
		out = append(out, api.Word{Word: w, Start: round(start, 1e3), End: round(end, 1e3)})
	}
	return out
}

// round rounds x to 1/unit.
func round(x, unit float64) float64 { return math.Round(x*unit) / unit }
