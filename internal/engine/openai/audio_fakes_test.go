package openai

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// Recorded-style transcriptions of the same 4.4 s clip ("And so, my fellow
// Americans, ask not.") as each server answers response_format=verbose_json
// with word timestamps.
const (
	// OpenAI whisper-1: words at the top level, without punctuation; the
	// language named in full.
	openaiVerbose = `{"task":"transcribe","language":"english","duration":4.420000076293945,"text":"And so, my fellow Americans, ask not.","words":[{"word":"And","start":0.0,"end":0.30000001192092896},{"word":"so","start":0.30000001192092896,"end":0.6000000238418579},{"word":"my","start":0.8799999952316284,"end":1.0},{"word":"fellow","start":1.0,"end":1.340000033378601},{"word":"Americans","start":1.340000033378601,"end":2.0},{"word":"ask","start":3.0,"end":3.380000114440918},{"word":"not","start":3.380000114440918,"end":3.880000114440918}],"segments":[{"id":0,"seek":0,"start":0.0,"end":2.0,"text":" And so, my fellow Americans,","tokens":[50364,400,370,11,452,7177,6280,11,50464],"temperature":0.0,"avg_logprob":-0.2860647439956665,"compression_ratio":1.0,"no_speech_prob":0.006462599150836468},{"id":1,"seek":0,"start":3.0,"end":4.42,"text":" ask not.","tokens":[50514,1029,406,13,50614],"temperature":0.0,"avg_logprob":-0.3125,"compression_ratio":1.0,"no_speech_prob":0.00125}],"usage":{"type":"duration","seconds":5}}`

	// whisper.cpp whisper-server: "words" are each segment's tokens, with a
	// leading space where a word starts, punctuation as tokens of its own,
	// t_dtw and probability; no seek or compression_ratio; NaN written as
	// null.
	whisperCppVerbose = `{"task":"transcribe","language":"english","duration":4.4199996,"text":" And so, my fellow Americans, ask not.","segments":[{"id":0,"text":" And so, my fellow Americans,","start":0.0,"end":2.0,"tokens":[400,370,11,452,7177,6280,599,11],"words":[{"word":" And","start":0.0,"end":0.32,"t_dtw":-1,"probability":0.91},{"word":" so","start":0.32,"end":0.6,"t_dtw":-1,"probability":0.98},{"word":",","start":0.6,"end":0.62,"t_dtw":-1,"probability":0.71},{"word":" my","start":0.88,"end":1.0,"t_dtw":-1,"probability":0.99},{"word":" fellow","start":1.0,"end":1.34,"t_dtw":-1,"probability":0.99},{"word":" Americ","start":1.34,"end":1.7,"t_dtw":-1,"probability":0.97},{"word":"ans","start":1.7,"end":2.0,"t_dtw":-1,"probability":0.99},{"word":",","start":2.0,"end":2.0,"t_dtw":-1,"probability":0.6}],"temperature":0.0,"avg_logprob":-0.25,"no_speech_prob":0.0012},{"id":1,"text":" ask not.","start":3.0,"end":4.42,"tokens":[1029,406,13],"words":[{"word":" ask","start":3.0,"end":3.38,"t_dtw":-1,"probability":0.95},{"word":" not","start":3.38,"end":3.88,"t_dtw":-1,"probability":0.97},{"word":".","start":3.88,"end":3.9,"t_dtw":-1,"probability":0.8}],"temperature":0.0,"avg_logprob":null,"no_speech_prob":0.0008}],"detected_language":"english","detected_language_probability":0.97,"language_probabilities":{"en":0.97,"de":0.01}}`

	// speaches (faster-whisper): the code for the language; words at the
	// top level with their leading space and punctuation; segment ids from
	// 1.
	speachesVerbose = `{"task":"transcribe","language":"en","duration":4.42,"text":"And so, my fellow Americans, ask not.","words":[{"start":0.0,"end":0.3,"word":" And","probability":0.93},{"start":0.3,"end":0.6,"word":" so,","probability":0.98},{"start":0.88,"end":1.0,"word":" my","probability":0.99},{"start":1.0,"end":1.34,"word":" fellow","probability":0.99},{"start":1.34,"end":2.0,"word":" Americans,","probability":0.97},{"start":3.0,"end":3.38,"word":" ask","probability":0.95},{"start":3.38,"end":3.88,"word":" not.","probability":0.97}],"segments":[{"id":1,"seek":0,"start":0.0,"end":2.0,"text":" And so, my fellow Americans,","tokens":[50364,400,370,11,452,7177,6280,11],"temperature":0.0,"avg_logprob":-0.28,"compression_ratio":1.06,"no_speech_prob":0.006,"words":null},{"id":2,"seek":0,"start":3.0,"end":4.42,"text":" ask not.","tokens":[1029,406,13],"temperature":0.0,"avg_logprob":-0.31,"compression_ratio":1.06,"no_speech_prob":0.001,"words":null}]}`

	clipText = "And so, my fellow Americans, ask not."
)

// clipWords are the words every shape above comes down to.
var clipWords = []string{"And", "so", "my", "fellow", "Americans", "ask", "not"}

// formGot is what a fake transcription server received.
type formGot struct {
	path     string
	header   http.Header
	fields   map[string][]string
	fileName string
	fileType string
	fileLen  int64
	fileSum  [sha256.Size]byte
}

// readForm reads a transcription form as it arrives, hashing the file.
// onFile, when set, runs after each piece of the file with the bytes had
// so far.
func readForm(r *http.Request, onFile func(n int64)) (formGot, error) {
	got := formGot{path: r.URL.Path, header: r.Header.Clone(), fields: map[string][]string{}}
	mr, err := r.MultipartReader()
	if err != nil {
		return got, err
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		if part.FormName() != "file" {
			b, err := io.ReadAll(part)
			if err != nil {
				return got, err
			}
			got.fields[part.FormName()] = append(got.fields[part.FormName()], string(b))
			continue
		}
		got.fileName, got.fileType = part.FileName(), part.Header.Get("Content-Type")
		h := sha256.New()
		buf := make([]byte, 32<<10)
		for {
			n, err := part.Read(buf)
			h.Write(buf[:n])
			got.fileLen += int64(n)
			if onFile != nil && n > 0 {
				onFile(got.fileLen)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return got, err
			}
		}
		h.Sum(got.fileSum[:0])
	}
}

// transcriptionServer reads the form as it arrives, records it and
// answers with body. Serve it with newStreamServer: fake reads bodies
// whole before its handlers run.
type transcriptionServer struct {
	mu  sync.Mutex
	got []formGot
}

func (s *transcriptionServer) handler(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got, err := readForm(r, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.got = append(s.got, got)
		s.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func (s *transcriptionServer) last(t *testing.T) formGot {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		t.Fatal("no transcription request arrived")
	}
	return s.got[len(s.got)-1]
}

// source is an upload of n bytes made up as it is read: a WAV header,
// then a byte pattern. It hashes what it produced, and fails the test if
// it is read once the request it belongs to has ended.
type source struct {
	t     *testing.T
	n     int64
	read  atomic.Int64
	ended atomic.Bool
	err   error // returned once everything was read, instead of EOF

	mu sync.Mutex
	h  hash.Hash
}

func newSource(t *testing.T, n int64) *source {
	return &source{t: t, n: n, h: sha256.New()}
}

func (s *source) Read(p []byte) (int, error) {
	if s.ended.Load() {
		s.t.Error("the audio was read after Serve returned")
		return 0, errors.New("read after the end")
	}
	off := s.read.Load()
	if off >= s.n {
		if s.err != nil {
			return 0, s.err
		}
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.n-off)]
	for i := range p {
		p[i] = byte((off + int64(i)) % 251)
	}
	if off == 0 && len(p) >= 12 {
		copy(p, "RIFF\x00\x00\x00\x00WAVE")
		binary.LittleEndian.PutUint32(p[4:], uint32(s.n-8))
	}
	s.mu.Lock()
	s.h.Write(p)
	s.mu.Unlock()
	s.read.Add(int64(len(p)))
	return len(p), nil
}

func (s *source) sum() (out [sha256.Size]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.Sum(out[:0])
	return out
}

// transcriptionReq is a transcription of a wav file, as the gateway sends
// it.
func transcriptionReq(t *testing.T, p api.TranscriptionParams, file io.Reader) *engine.Request {
	t.Helper()
	if p.Format == "" {
		p.Format = api.AudioWAV
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Request{Kind: api.KindTranscription, Model: "whisper-large-v3", Body: b, Audio: file}
}

// transcriptOf decodes what the adapter delivered.
func transcriptOf(t *testing.T, s *sink) api.Transcript {
	t.Helper()
	var tr api.Transcript
	if err := json.Unmarshal(s.body, &tr); err != nil {
		t.Fatalf("not a transcript: %v: %s", err, s.body)
	}
	return tr
}
