package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// liveWindows shapes a live transcription's windowed re-decoding: every
// engine transcribes whole files, so the audio so far is wrapped as a WAV
// and transcribed again as it grows. Tests shorten it.
type liveWindows struct {
	// Every is how much new audio (seconds) brings the next partial.
	Every float64
	// Window bounds the audio decoded at once (seconds): past it, the
	// segments that ended Keep seconds before its end are settled and
	// not decoded again, so a long session costs the same per partial as
	// a short one, and no engine is given more than it handles well.
	Window float64
	Keep   float64
}

func (a *Agent) liveWindows() liveWindows {
	if a.cfg.live.Every > 0 {
		return a.cfg.live
	}
	return liveWindows{Every: 3, Window: 30, Keep: 5}
}

// liveRead is how much of the body one read takes.
const liveRead = 32 << 10

// transcribeLive runs a live transcription on eng: the PCM body is read
// as it arrives, a partial event is sent for every Every seconds of new
// audio, and a final event when the body ends. The result is the final
// decode's, or the first failure.
func transcribeLive(ctx context.Context, eng engine.Engine, model string, params []byte, body io.Reader, sink engine.Sink, w liveWindows) *api.Result {
	var p api.LiveParams
	if err := json.Unmarshal(params, &p); err != nil || p.SampleRate < api.LiveMinRate || p.SampleRate > api.LiveMaxRate {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "invalid live transcription parameters")
	}
	d := &liveDecoder{eng: eng, model: model, p: p, w: w, bytesPerSec: 2 * float64(p.SampleRate)}
	buf := make([]byte, liveRead)
	since := 0 // bytes since the last decode
	for {
		n, err := body.Read(buf)
		d.pending = append(d.pending, buf[:n]...)
		d.received += int64(n)
		since += n
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return engine.Cancelled()
		}
		if float64(since) >= w.Every*d.bytesPerSec {
			since = 0
			if res := d.partial(ctx, sink); res != nil {
				return res
			}
		}
	}
	return d.final(ctx, sink)
}

// liveDecoder is a live transcription's state: the audio not yet
// settled, and the transcript of what was.
type liveDecoder struct {
	eng         engine.Engine
	model       string
	p           api.LiveParams
	w           liveWindows
	bytesPerSec float64

	pending  []byte        // PCM after offset
	offset   float64       // seconds settled before pending
	settled  []api.Segment // on the session's clock
	received int64
	language string
	last     *api.Result // the latest decode's
}

func (d *liveDecoder) seconds(n int) float64 { return float64(n/2*2) / d.bytesPerSec }

// partial decodes the window and sends what it heard; past the window it
// settles the segments that are done.
func (d *liveDecoder) partial(ctx context.Context, sink engine.Sink) *api.Result {
	t, res := d.decode(ctx, d.pending)
	if res != nil {
		return res
	}
	span := d.seconds(len(d.pending))
	text := joinText(d.settled, t.Text)
	start, end := round3(d.offset), round3(d.offset+span)
	if res := sendLive(ctx, sink, api.LiveEvent{Type: api.LivePartial, Text: &text, Start: &start, End: &end}); res != nil {
		return res
	}
	if span >= d.w.Window {
		d.settle(t, span)
	}
	return nil
}

// settle keeps the window's segments that ended Keep seconds before its
// end and drops their audio; one segment as long as the window is kept
// whole, audio and all, so the window always moves.
func (d *liveDecoder) settle(t *api.Transcript, span float64) {
	cut := 0.0
	var keep []api.Segment
	for _, s := range t.Segments {
		if s.End <= span-d.w.Keep {
			keep = append(keep, s)
			cut = s.End
		}
	}
	if len(keep) == 0 {
		keep, cut = t.Segments, span
	}
	for _, s := range keep {
		d.settled = append(d.settled, d.onSessionClock(s))
	}
	at := min(int(math.Round(cut*d.bytesPerSec))/2*2, len(d.pending))
	d.pending = append(d.pending[:0], d.pending[at:]...)
	d.offset += d.seconds(at)
}

// onSessionClock is a segment of the window after the settled audio on the
// session's clock, its times to the millisecond as verbose_json has them:
// the offset is a byte count over the audio's rate, and its sum with a
// window's times is no round figure.
func (d *liveDecoder) onSessionClock(s api.Segment) api.Segment {
	s.Start, s.End = round3(s.Start+d.offset), round3(s.End+d.offset)
	return s
}

// final decodes what is left and sends the whole transcript.
func (d *liveDecoder) final(ctx context.Context, sink engine.Sink) *api.Result {
	res := engine.OK()
	segs := d.settled
	tail := ""
	if len(d.pending) >= 2 {
		t, failed := d.decode(ctx, d.pending)
		if failed != nil {
			return failed
		}
		res = d.last
		for _, s := range t.Segments {
			segs = append(segs, d.onSessionClock(s))
		}
		tail = t.Text
	}
	text := joinText(d.settled, tail)
	for i := range segs {
		segs[i].ID = i
	}
	if segs == nil {
		segs = []api.Segment{}
	}
	dur := round3(d.seconds(int(min(d.received, math.MaxInt))))
	ev := api.LiveEvent{Type: api.LiveFinal, Text: &text, Segments: segs, Language: d.language, Duration: &dur}
	if failed := sendLive(ctx, sink, ev); failed != nil {
		return failed
	}
	return res
}

// decode transcribes pcm with the engine's ordinary transcription.
func (d *liveDecoder) decode(ctx context.Context, pcm []byte) (*api.Transcript, *api.Result) {
	pcm = pcm[:len(pcm)/2*2]
	wav := pcmWAV(d.p.SampleRate, pcm)
	params, err := json.Marshal(api.TranscriptionParams{Language: d.p.Language, Format: api.AudioWAV,
		Seconds: d.seconds(len(pcm)), Bytes: int64(len(wav))})
	if err != nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
	var got captureSink
	res := d.eng.Serve(ctx, &engine.Request{Kind: api.KindTranscription, Model: d.model, Body: params, Audio: bytes.NewReader(wav)}, &got)
	if res == nil {
		return nil, engine.Failure(http.StatusInternalServerError, api.TypeServer, "the engine returned no result")
	}
	if res.Status != http.StatusOK {
		return nil, res
	}
	var t api.Transcript
	if err := json.Unmarshal(got.body, &t); err != nil {
		return nil, engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the engine's transcript is not usable: "+err.Error())
	}
	if t.Language != "" {
		d.language = t.Language
	}
	d.last = res
	return &t, nil
}

// joinText is the settled text followed by a window's.
func joinText(settled []api.Segment, window string) string {
	var b strings.Builder
	for _, s := range settled {
		if t := strings.TrimSpace(s.Text); t != "" {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(t)
		}
	}
	if t := strings.TrimSpace(window); t != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t)
	}
	return b.String()
}

func sendLive(ctx context.Context, sink engine.Sink, ev api.LiveEvent) *api.Result {
	data, err := json.Marshal(ev)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
	if err := sink.Event(ctx, data); err != nil {
		return engine.Cancelled()
	}
	return nil
}

// pcmWAV wraps 16-bit mono PCM in the canonical 44-byte WAV header.
func pcmWAV(rate int, pcm []byte) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, 44+len(pcm))
	b = append(b, "RIFF"...)
	b = le.AppendUint32(b, uint32(36+len(pcm)))
	b = append(b, "WAVEfmt "...)
	b = le.AppendUint32(b, 16)
	b = le.AppendUint16(b, 1) // PCM
	b = le.AppendUint16(b, 1) // mono
	b = le.AppendUint32(b, uint32(rate))
	b = le.AppendUint32(b, uint32(2*rate))
	b = le.AppendUint16(b, 2)
	b = le.AppendUint16(b, 16)
	b = append(b, "data"...)
	b = le.AppendUint32(b, uint32(len(pcm)))
	return append(b, pcm...)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
