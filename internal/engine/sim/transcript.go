package sim

import (
	"crypto/sha256"
	"io"
	"math"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
)

// clip is what the simulator learns from an uploaded file: its container
// and length from the headers, and a digest of its bytes, which seeds the
// transcript so that the same file always reads the same.
type clip struct {
	info   audio.Info
	digest [sha256.Size]byte
}

// seconds is the clip's length from its headers, else the length its
// sender declared.
func (c *clip) seconds(declared float64) float64 {
	if c.info.Seconds > 0 {
		return c.info.Seconds
	}
	return max(declared, 0)
}

// uploadError is a failure to read the upload itself, as opposed to a
// file that is not audio.
type uploadError struct{ err error }

func (e *uploadError) Error() string { return "read the uploaded audio: " + e.err.Error() }
func (e *uploadError) Unwrap() error { return e.err }

// readRecorder remembers the first error of r other than EOF, so that a
// broken transfer can be told from a bad file whatever Probe makes of it.
type readRecorder struct {
	r   io.Reader
	err error
}

func (rr *readRecorder) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	if err != nil && err != io.EOF && rr.err == nil {
		rr.err = err
	}
	return n, err
}

// readClip reads an upload to the end, probing and hashing it on the way,
// so that memory stays bounded whatever the file's size. A broken
// transfer is an *uploadError; a file that is not audio is Probe's error,
// whose message is meant for the client.
func readClip(r io.Reader) (clip, error) {
	h := sha256.New()
	src := &readRecorder{r: r}
	tee := io.TeeReader(src, h)
	info, err := audio.Probe(tee)
	if err == nil {
		// Probe reads to the end; this only makes the digest's coverage
		// independent of that.
		_, err = io.Copy(io.Discard, tee)
	}
	if src.err != nil {
		return clip{}, &uploadError{src.err}
	}
	if err != nil {
		return clip{}, err
	}
	c := clip{info: info}
	h.Sum(c.digest[:0])
	return c, nil
}

// Transcript shape: speech at 2.2 to 2.8 words a second, cut into segments
// of about four to six seconds, at sentence or clause ends where they fall
// in that range.
const (
	minSegment = 4.0
	maxSegment = 6.0
)

// transcribe makes up a plausible transcript of a clip of the given
// length. It is deterministic: the words depend on the model and the
// file's bytes only.
func transcribe(modelID string, c clip, seconds float64, p *api.TranscriptionParams) *api.Transcript {
	t := &api.Transcript{
		Language: p.Language,
		Duration: round3(seconds),
		Segments: []api.Segment{},
	}
	if t.Language == "" || p.Translate {
		t.Language = "en"
	}
	sd := newSeed(modelID, c.digest[:], nil)
	n := int(math.Round(seconds * (2.2 + 0.6*sd.unit("rate"))))
	if n == 0 && seconds > 0 {
		n = 1
	}
	if n == 0 {
		return t
	}
	ws := words(sd.rng("content"), n, n)
	for i, w := range ws {
		ws[i] = strings.TrimPrefix(w, " ")
	}

	// Lay the words out in time: each takes time for its letters and the
	// pause its punctuation asks for, scaled to fill the clip.
	slots := make([]float64, n+1) // slots[i] is when word i starts
	spoken := make([]float64, n)  // how long word i is said
	for i, w := range ws {
		spoken[i] = 1.5 + float64(len(strings.TrimRight(w, ".,")))
		slots[i+1] = slots[i] + spoken[i] + pauseAfter(w)
	}
	scale := seconds / slots[n]
	for i := range slots {
		slots[i] *= scale
	}

	r := sd.rng("segments")
	var text strings.Builder
	start, first := 0.0, 0
	for i, w := range ws {
		if p.Words {
			t.Words = append(t.Words, api.Word{
				Word:  strings.TrimRight(w, ".,"),
				Start: round2(slots[i]),
				End:   round2(slots[i] + spoken[i]*scale),
			})
		}
		last := i == n-1
		span := slots[i+1] - start
		if !last && (span < minSegment || pauseAfter(w) < 1) && slots[i+2]-start <= maxSegment {
			continue
		}
		end := round2(slots[i+1])
		if last {
			end = t.Duration
		}
		seg := " " + strings.Join(ws[first:i+1], " ")
		t.Segments = append(t.Segments, api.Segment{
			ID:           len(t.Segments),
			Start:        start,
			End:          end,
			Text:         seg,
			AvgLogprob:   -math.Round(2000+2000*r.Float64()) / 10000,
			NoSpeechProb: math.Round(10+300*r.Float64()) / 10000,
		})
		text.WriteString(seg)
		start, first = end, i+1
	}
	t.Text = strings.TrimSpace(text.String())
	return t
}

// pauseAfter is the pause after a word, in the units of its letters: a
// breath at a full stop, less at a comma, a short gap otherwise.
func pauseAfter(w string) float64 {
	switch {
	case strings.HasSuffix(w, "."):
		return 3
	case strings.HasSuffix(w, ","):
		return 1.5
	}
	return 0.3
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
