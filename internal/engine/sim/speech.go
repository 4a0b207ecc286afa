package sim

import (
	"math"
	"math/rand/v2"
	"unicode"

	"github.com/svc-dev/svc/internal/audio"
)

// The synthesiser is no vocoder: it only has to sound like someone
// talking, so that a listener (or a test) can tell it from silence and
// noise and hear the text's rhythm. Each letter is a short sound with an
// envelope, voiced with a few harmonics shaped by rough vowel formants,
// or hissed for fricatives; the pitch glides between letters along a
// falling phrase contour around the voice's own pitch; spaces and
// punctuation are pauses.

// Durations in seconds at speed 1. Letters average about 65 ms.
const (
	vowelTime     = 0.080
	consonantTime = 0.055
	spaceTime     = 0.050
	clauseTime    = 0.200 // , ; :
	sentenceTime  = 0.380 // . ! ?
	lineTime      = 0.300
	leadTime      = 0.050 // silence before the first sound
	tailTime      = 0.150 // and after the last
)

// Harmonics of the voiced sounds: enough to reach the second formant
// whatever the pitch.
const (
	maxHarmonics = 40
	voiceBand    = 3500.0 // Hz
)

// sound is how one letter is said.
type sound struct {
	dur      float64 // seconds at speed 1
	voiced   float64 // loudness of the harmonic part
	noise    float64 // loudness of the hiss
	f1, f2   float64 // formants shaping the harmonics, Hz
	plosive  bool    // a closure (silence) and then a burst
	isLetter bool
	pause    bool // a pause ends the phrase: the pitch resets
}

// soundOf is how r is said.
func soundOf(r rune) sound {
	vowel := func(f1, f2 float64) sound {
		return sound{dur: vowelTime, voiced: 1, f1: f1, f2: f2, isLetter: true}
	}
	switch unicode.ToLower(r) {
	case 'a':
		return vowel(730, 1090)
	case 'e':
		return vowel(530, 1840)
	case 'i', 'y':
		return vowel(270, 2290)
	case 'o':
		return vowel(570, 840)
	case 'u':
		return vowel(300, 870)
	case 'l', 'm', 'n', 'r', 'w', 'j':
		return sound{dur: consonantTime, voiced: 0.55, f1: 300, f2: 1200, isLetter: true}
	case 'v', 'z':
		return sound{dur: consonantTime, voiced: 0.3, noise: 0.08, f1: 300, f2: 1500, isLetter: true}
	case 'f', 's', 'x', 'c':
		return sound{dur: consonantTime, noise: 0.12, isLetter: true}
	case 'h':
		return sound{dur: consonantTime, noise: 0.05, isLetter: true}
	case 'b', 'd', 'g':
		return sound{dur: consonantTime, voiced: 0.3, noise: 0.12, f1: 300, f2: 1500, plosive: true, isLetter: true}
	case 'p', 't', 'k', 'q':
		return sound{dur: consonantTime, noise: 0.16, plosive: true, isLetter: true}
	case ' ', '\t':
		return sound{dur: spaceTime}
	case ',', ';', ':':
		return sound{dur: clauseTime, pause: true}
	case '.', '!', '?':
		return sound{dur: sentenceTime, pause: true}
	case '\n':
		return sound{dur: lineTime, pause: true}
	}
	if unicode.IsLetter(r) || unicode.IsDigit(r) {
		return vowel(500, 1500) // any other letter: a neutral vowel
	}
	return sound{dur: spaceTime / 2}
}

// synthesize says text in voice at speed (0.25 to 4) as 24 kHz mono PCM.
// The same text and voice always give the same samples.
func synthesize(text, voice string, speed float64) audio.PCM {
	s := &synth{
		rate:  audio.SpeechRate,
		pitch: voicePitch(voice),
		rng:   newSeed(voice, []byte(text), nil).rng("speech"),
	}
	s.out = make([]float32, 0, int(float64(len(text))*0.07/speed*float64(s.rate)))
	s.f0 = s.pitch * 1.1
	s.silence(leadTime / speed)
	phrase := 0            // letters into the phrase
	loud, lift := 1.0, 1.0 // the word's stress: louder and higher
	wordStart := true
	for _, r := range text {
		snd := soundOf(r)
		switch {
		case snd.isLetter:
			if wordStart {
				loud, lift = 0.8+0.35*s.rng.Float64(), 0.96+0.1*s.rng.Float64()
				wordStart = false
			}
			// Declination: the pitch falls through a phrase, with a
			// little jitter per letter.
			decline := max(1.12-0.01*float64(phrase), 0.85)
			jitter := 1 + 0.03*(s.rng.Float64()-0.5)
			s.say(snd, snd.dur/speed, s.pitch*decline*lift*jitter, loud)
			phrase++
		default:
			s.silence(snd.dur / speed)
			wordStart = true
			if snd.pause {
				phrase = 0
			}
		}
	}
	s.silence(tailTime / speed)
	s.normalise(0.7)
	return audio.PCM{Rate: s.rate, Samples: s.out}
}

// voicePitch is a voice's speaking pitch, 90 to 240 Hz: the voice's name
// decides it, so each voice keeps its pitch across requests.
func voicePitch(voice string) float64 {
	return 90 + 150*newSeed("voice", []byte(voice), nil).unit("pitch")
}

// synth is a synthesis in progress.
type synth struct {
	rate  int
	pitch float64 // the voice's mean pitch, Hz
	rng   *rand.Rand
	out   []float32
	// The fundamental's phase and pitch carry over from one sound to the
	// next so that they join without clicks.
	phase, f0 float64
	lastNoise float64
}

func (s *synth) silence(dur float64) {
	for range int(dur * float64(s.rate)) {
		s.out = append(s.out, 0)
	}
}

// say renders one letter of dur seconds, gliding the pitch to target.
func (s *synth) say(snd sound, dur, target, loud float64) {
	n := int(dur * float64(s.rate))
	if n == 0 {
		return
	}
	var w [maxHarmonics + 1]float64 // harmonic weights, by the formants at the target pitch
	harmonics := min(maxHarmonics, max(1, int(voiceBand/target)))
	total := 0.0
	for k := 1; k <= harmonics; k++ {
		f := float64(k) * target
		w[k] = (1 + 3*bump(f, snd.f1, 120) + 2*bump(f, snd.f2, 180)) / float64(k)
		total += w[k]
	}
	start := 0
	if snd.plosive {
		start = n * 11 / 20 // the closure is silent
	}
	from := s.f0
	rate := float64(s.rate)
	for i := range n {
		frac := float64(i) / float64(n)
		f := target
		if frac < 1.0/3 {
			f = from + (target-from)*frac*3
		}
		vibrato := 1 + 0.01*math.Sin(2*math.Pi*5.5*float64(len(s.out))/rate)
		s.phase = math.Mod(s.phase+2*math.Pi*f*vibrato/rate, 2*math.Pi)
		if i < start {
			s.out = append(s.out, 0)
			continue
		}
		// sin(kφ) by the Chebyshev recurrence: one sin and one cos a
		// sample whatever the number of harmonics.
		sin1, cos1 := math.Sincos(s.phase)
		prev, cur := 0.0, sin1
		voiced := w[1] * sin1
		for k := 2; k <= harmonics; k++ {
			prev, cur = cur, 2*cos1*cur-prev
			voiced += w[k] * cur
		}
		// Differenced white noise: a hiss without the rumble.
		white := 2*s.rng.Float64() - 1
		hiss := white - s.lastNoise
		s.lastNoise = white
		v := snd.voiced*voiced/total + snd.noise*hiss
		s.out = append(s.out, float32(loud*envelope(float64(i-start)/float64(n-start))*v))
	}
	s.f0 = target
}

// bump is a bell of width w around centre, 1 at its top.
func bump(f, centre, w float64) float64 {
	if centre == 0 {
		return 0
	}
	d := (f - centre) / w
	return math.Exp(-d * d)
}

// envelope rises and falls over a sound's first and last quarter
// (raised cosine), so letters start and end softly.
func envelope(frac float64) float64 {
	const edge = 0.25
	switch {
	case frac < edge:
		return 0.5 - 0.5*math.Cos(math.Pi*frac/edge)
	case frac > 1-edge:
		return 0.5 - 0.5*math.Cos(math.Pi*(1-frac)/edge)
	}
	return 1
}

// normalise scales the samples so that the loudest is at peak.
func (s *synth) normalise(peak float64) {
	var top float32
	for _, v := range s.out {
		top = max(top, v, -v)
	}
	if top == 0 {
		return
	}
	g := float32(peak) / top
	for i := range s.out {
		s.out[i] *= g
	}
}
