package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// wordEngine transcribes a WAV as one segment per whole second, "w0 w1
// ...", and records the length of each file it was given.
type wordEngine struct {
	decoded []float64
	fail    int // fail the nth decode (1-based); 0 never
}

func (e *wordEngine) Kind() string                                { return "fake" }
func (e *wordEngine) Models(context.Context) ([]api.Model, error) { return nil, nil }
func (e *wordEngine) Serve(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	var p api.TranscriptionParams
	if err := json.Unmarshal(req.Body, &p); err != nil || req.Kind != api.KindTranscription || p.Format != api.AudioWAV {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "bad request")
	}
	wav, err := io.ReadAll(req.Audio)
	if err != nil || len(wav) < 44 || string(wav[:4]) != "RIFF" {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "not a WAV")
	}
	secs := float64(len(wav)-44) / 16000 // 8 kHz, 16-bit
	e.decoded = append(e.decoded, secs)
	if e.fail == len(e.decoded) {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "engine broke")
	}
	t := api.Transcript{Language: "en", Duration: secs}
	var words []string
	for i := 0; float64(i) < secs; i++ {
		w := fmt.Sprintf("w%d", i)
		words = append(words, w)
		t.Segments = append(t.Segments, api.Segment{ID: i, Start: float64(i), End: min(float64(i+1), secs), Text: w})
	}
	t.Text = strings.Join(words, " ")
	data, _ := json.Marshal(t)
	_ = sink.Body(ctx, data)
	return engine.OK()
}

// chunks yields one piece per Read, as audio arriving in bursts.
type chunks struct{ pieces [][]byte }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.pieces[0])
	if c.pieces[0] = c.pieces[0][n:]; len(c.pieces[0]) == 0 {
		c.pieces = c.pieces[1:]
	}
	return n, nil
}

func pcmPieces(seconds, every float64) *chunks {
	var c chunks
	for at := 0.0; at < seconds-1e-9; at += every {
		c.pieces = append(c.pieces, make([]byte, int(min(every, seconds-at)*16000)))
	}
	return &c
}

type liveSink struct{ events []api.LiveEvent }

func (s *liveSink) Event(_ context.Context, data []byte) error {
	var ev api.LiveEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	s.events = append(s.events, ev)
	return nil
}
func (s *liveSink) Body(context.Context, []byte) error {
	return errors.New("no body in a live session")
}

func liveParams(rate int) []byte {
	b, _ := json.Marshal(api.LiveParams{SampleRate: rate})
	return b
}

// Partials come every Every seconds of audio, each decoding no more than
// the window; past it, settled text is kept and not decoded again; the
// final covers the whole session, its segments on the session's clock.
func TestLiveWindows(t *testing.T) {
	eng := &wordEngine{}
	sink := &liveSink{}
	w := liveWindows{Every: 1, Window: 4, Keep: 1}
	res := transcribeLive(t.Context(), eng, "m", liveParams(8000), pcmPieces(9.5, 0.5), sink, w)
	if res.Status != http.StatusOK {
		t.Fatalf("result %+v", res)
	}
	if len(sink.events) < 2 {
		t.Fatalf("events %+v", sink.events)
	}
	partials := sink.events[:len(sink.events)-1]
	if len(partials) != 9 {
		t.Fatalf("%d partials for 9.5 s at one a second, want 9", len(partials))
	}
	lastEnd, lastStart := 0.0, 0.0
	for i, ev := range partials {
		if ev.Type != api.LivePartial || ev.Text == nil || ev.Start == nil || ev.End == nil {
			t.Fatalf("partial %d: %+v", i, ev)
		}
		if *ev.End != float64(i+1) || *ev.Start < lastStart || *ev.End <= lastEnd {
			t.Fatalf("partial %d spans %v-%v after %v-%v", i, *ev.Start, *ev.End, lastStart, lastEnd)
		}
		lastStart, lastEnd = *ev.Start, *ev.End
	}
	if lastStart == 0 {
		t.Fatal("the window never moved past settled audio")
	}
	for _, d := range eng.decoded {
		if d > w.Window+w.Every {
			t.Fatalf("decoded %v s at once, past the window: %v", d, eng.decoded)
		}
	}
	final := sink.events[len(sink.events)-1]
	if final.Type != api.LiveFinal || final.Duration == nil || *final.Duration != 9.5 || final.Language != "en" {
		t.Fatalf("final %+v", final)
	}
	at := 0.0
	for i, s := range final.Segments {
		if s.ID != i || s.Start != at {
			t.Fatalf("segment %d %+v does not follow %v", i, s, at)
		}
		at = s.End
	}
	if at != 9.5 {
		t.Fatalf("segments end at %v, want 9.5", at)
	}
	if n := len(strings.Fields(*final.Text)); n != len(final.Segments) {
		t.Fatalf("final text %q has %d words for %d segments", *final.Text, n, len(final.Segments))
	}
	// Each partial's text begins with what was settled before its window.
	if !strings.HasPrefix(*final.Text, "w0 w1") {
		t.Fatalf("final text %q", *final.Text)
	}
}

// A short session is one decode per partial and one final of the whole.
func TestLiveShortSessionFinalIsWhole(t *testing.T) {
	eng := &wordEngine{}
	sink := &liveSink{}
	res := transcribeLive(t.Context(), eng, "m", liveParams(8000), pcmPieces(2.5, 0.25), sink, liveWindows{Every: 3, Window: 30, Keep: 5})
	if res.Status != http.StatusOK || len(sink.events) != 1 || sink.events[0].Type != api.LiveFinal {
		t.Fatalf("result %+v events %+v", res, sink.events)
	}
	if len(eng.decoded) != 1 || eng.decoded[0] != 2.5 || *sink.events[0].Text != "w0 w1 w2" {
		t.Fatalf("decoded %v, final %q", eng.decoded, *sink.events[0].Text)
	}
}

// No audio at all is an empty final, without troubling the engine.
func TestLiveEmpty(t *testing.T) {
	eng := &wordEngine{}
	sink := &liveSink{}
	res := transcribeLive(t.Context(), eng, "m", liveParams(16000), &chunks{}, sink, liveWindows{Every: 3, Window: 30, Keep: 5})
	if res.Status != http.StatusOK || len(sink.events) != 1 || *sink.events[0].Text != "" || *sink.events[0].Duration != 0 || len(eng.decoded) != 0 {
		t.Fatalf("result %+v events %+v decoded %v", res, sink.events, eng.decoded)
	}
}

// An engine failure ends the session with the engine's result.
func TestLiveEngineFailure(t *testing.T) {
	eng := &wordEngine{fail: 2}
	sink := &liveSink{}
	res := transcribeLive(t.Context(), eng, "m", liveParams(8000), pcmPieces(5, 1), sink, liveWindows{Every: 1, Window: 30, Keep: 5})
	if res.Status != http.StatusInternalServerError || len(sink.events) != 1 {
		t.Fatalf("result %+v events %+v", res, sink.events)
	}
}

func TestLiveRefusesBadParams(t *testing.T) {
	for _, p := range [][]byte{[]byte("{"), liveParams(4000), liveParams(96000)} {
		res := transcribeLive(t.Context(), &wordEngine{}, "m", p, &chunks{}, &liveSink{}, liveWindows{Every: 3, Window: 30, Keep: 5})
		if res.Status != http.StatusBadRequest {
			t.Fatalf("%s: %+v", p, res)
		}
	}
}

// Segments past settled audio are on the session's clock to the
// millisecond, as verbose_json's are, whatever the audio's rate makes of
// the settled offset (22,050 Hz: no round number of seconds).
func TestLiveSegmentsToTheMillisecond(t *testing.T) {
	sink := &liveSink{}
	w := liveWindows{Every: 1, Window: 4, Keep: 1}
	res := transcribeLive(t.Context(), &wordEngine{}, "m", liveParams(22050), pcmPieces(20, 0.5), sink, w)
	if res.Status != http.StatusOK || len(sink.events) == 0 {
		t.Fatalf("result %+v, events %+v", res, sink.events)
	}
	final := sink.events[len(sink.events)-1]
	if len(final.Segments) < 6 {
		t.Fatalf("final %+v: too few segments to have settled any", final)
	}
	for _, s := range final.Segments {
		if s.Start != round3(s.Start) || s.End != round3(s.End) {
			t.Fatalf("segment %d spans %v-%v", s.ID, s.Start, s.End)
		}
	}
}
