package sim

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

// maxFieldBytes bounds a transcription form's text fields; only the file
// may be large.
const maxFieldBytes = 64 << 10

// transcriptionForm is a transcription request as it came over HTTP.
type transcriptionForm struct {
	model, language, prompt string
	format                  string // response_format
	temperature             float64
	granularities           []string
	clip                    *clip
}

// segments and words report which timestamps verbose_json carries:
// segments unless only words were asked for, as OpenAI does.
func (f *transcriptionForm) segments() bool {
	return len(f.granularities) == 0 || slices.Contains(f.granularities, "segment")
}

func (f *transcriptionForm) words() bool { return slices.Contains(f.granularities, "word") }

// readTranscriptionForm reads a multipart/form-data transcription request
// as it streams in: the file goes through readClip as its part arrives,
// whatever the order of the fields, and is never held whole.
func readTranscriptionForm(w http.ResponseWriter, r *http.Request) (*transcriptionForm, *api.Result) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, badRequest("want a multipart/form-data body: " + err.Error())
	}
	f := &transcriptionForm{format: "json"}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, formFailure(err)
		}
		name := part.FormName()
		if name == "file" {
			if f.clip != nil {
				return nil, badRequest("file: send one file")
			}
			c, err := readClip(part)
			if err != nil {
				return nil, formFailure(err)
			}
			f.clip = &c
			continue
		}
		val, err := readField(part)
		if err != nil {
			return nil, formFailure(err)
		}
		switch name {
		case "model":
			f.model = val
		case "language":
			f.language = strings.ToLower(val)
		case "prompt":
			f.prompt = val
		case "response_format":
			if val != "" {
				f.format = val
			}
		case "temperature":
			t, err := strconv.ParseFloat(val, 64)
			if err != nil || !(t >= 0 && t <= 1) {
				return nil, badRequest(fmt.Sprintf("temperature: want a number from 0 to 1, got %q", val))
			}
			f.temperature = t
		case "timestamp_granularities[]", "timestamp_granularities":
			if val != "segment" && val != "word" {
				return nil, badRequest(fmt.Sprintf("timestamp_granularities: want segment or word, got %q", val))
			}
			f.granularities = append(f.granularities, val)
		}
	}
	switch {
	case f.clip == nil:
		return nil, badRequest("file: an audio file is required")
	case !slices.Contains([]string{"json", "text", "srt", "vtt", "verbose_json"}, f.format):
		return nil, badRequest(fmt.Sprintf("response_format: want json, text, srt, vtt or verbose_json, got %q", f.format))
	case len(f.granularities) > 0 && f.format != "verbose_json":
		return nil, badRequest("timestamp_granularities: only with response_format verbose_json")
	}
	return f, nil
}

// readField reads a text field of the form, bounded.
func readField(part *multipart.Part) (string, error) {
	b, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("read form field %s: %w", part.FormName(), err)
	case len(b) > maxFieldBytes:
		return "", fmt.Errorf("%s: larger than %d bytes", part.FormName(), maxFieldBytes)
	}
	return strings.TrimSpace(string(b)), nil
}

// formFailure is the answer to a form that could not be read: too large,
// broken off, or with a file that is not audio.
func formFailure(err error) *api.Result {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return engine.Failure(http.StatusRequestEntityTooLarge, api.TypeInvalidRequest,
			fmt.Sprintf("request body larger than %d bytes", maxBodyBytes))
	}
	return badRequest(err.Error())
}

func (h *httpFace) transcriptions(w http.ResponseWriter, r *http.Request) {
	h.transcribe(w, r, false)
}

// translations is POST /v1/audio/translations: the simulator's made-up
// words are English already, so a translation is a transcript in "en".
func (h *httpFace) translations(w http.ResponseWriter, r *http.Request) {
	h.transcribe(w, r, true)
}

func (h *httpFace) transcribe(w http.ResponseWriter, r *http.Request, translate bool) {
	f, fail := readTranscriptionForm(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	j, fail := h.sim.prepareAudio(f.model, api.CapTranscription, f.prompt)
	if fail != nil {
		writeError(w, fail)
		return
	}
	if res := j.scripted(r.Context()); res != nil {
		if r.Context().Err() == nil {
			writeError(w, res)
		}
		return
	}
	seconds := f.clip.seconds(0)
	if res := h.sim.process(r.Context(), j, seconds); res.Status != http.StatusOK {
		return // cancelled: the client is gone
	}
	p := api.TranscriptionParams{
		Language:    f.language,
		Prompt:      f.prompt,
		Temperature: f.temperature,
		Words:       f.words() && !translate,
		Translate:   translate,
		Format:      f.clip.info.Format,
		Seconds:     seconds,
		Bytes:       f.clip.info.Bytes,
	}
	t := transcribe(j.model.spec.ID, *f.clip, seconds, &p)
	contentType, body, err := renderTranscript(t, f)
	if err != nil {
		writeError(w, engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode transcript: "+err.Error()))
		return
	}
	writeAudioReply(w, contentType, body, j.dir.cut)
}

// renderTranscript is the body of a transcription in the form the client
// asked for, as OpenAI's API sends it.
func renderTranscript(t *api.Transcript, f *transcriptionForm) (contentType string, body []byte, err error) {
	// OpenAI bills whisper by the second and says so in JSON answers.
	usage := object{{"type", "duration"}, {"seconds", int(math.Ceil(t.Duration))}}
	var v object
	switch f.format {
	case "text":
		return "text/plain; charset=utf-8", []byte(t.Text + "\n"), nil
	case "srt":
		return "application/x-subrip", audio.SRT(t), nil
	case "vtt":
		return "text/vtt", audio.VTT(t), nil
	case "verbose_json":
		// OpenAI names the language in full ("english") here, unlike
		// the code the request takes.
		v = object{{"task", "transcribe"}, {"language", languageName(t.Language)}, {"duration", t.Duration}, {"text", t.Text}}
		if f.segments() {
			v = append(v, field{"segments", verboseSegments(t, f.temperature)})
		}
		if f.words() {
			words := t.Words
			if words == nil {
				words = []api.Word{}
			}
			v = append(v, field{"words", words})
		}
		v = append(v, field{"usage", usage})
	default:
		v = object{{"text", t.Text}, {"usage", usage}}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", nil, err
	}
	return "application/json", append(b, '\n'), nil
}

// verboseSegments are the segments with the decoder's details that
// OpenAI's verbose_json carries: seek, tokens, temperature and
// compression_ratio.
func verboseSegments(t *api.Transcript, temperature float64) []object {
	out := make([]object, len(t.Segments))
	for i, s := range t.Segments {
		ws := strings.Fields(s.Text)
		tokens := make([]int, len(ws))
		for k, w := range ws {
			h := fnv.New32a()
			h.Write([]byte(w))
			tokens[k] = 1000 + int(h.Sum32()%49000) // within whisper's text vocabulary
		}
		ratio := 1.2 + 0.4*newSeed("ratio", []byte(s.Text), nil).unit("ratio")
		out[i] = object{
			{"id", s.ID},
			{"seek", int(s.Start/30) * 3000}, // the 30 s window, in 10 ms frames
			{"start", s.Start},
			{"end", s.End},
			{"text", s.Text},
			{"tokens", tokens},
			{"temperature", temperature},
			{"avg_logprob", s.AvgLogprob},
			{"compression_ratio", round3(ratio)},
			{"no_speech_prob", s.NoSpeechProb},
		}
	}
	return out
}

// languageName is the English name whisper gives a language code, or the
// code itself when it is not one of the common ones.
func languageName(code string) string {
	switch code {
	case "en":
		return "english"
	case "de":
		return "german"
	case "es":
		return "spanish"
	case "fr":
		return "french"
	case "it":
		return "italian"
	case "pt":
		return "portuguese"
	case "nl":
		return "dutch"
	case "pl":
		return "polish"
	case "ru":
		return "russian"
	case "uk":
		return "ukrainian"
	case "tr":
		return "turkish"
	case "ar":
		return "arabic"
	case "hi":
		return "hindi"
	case "ja":
		return "japanese"
	case "ko":
		return "korean"
	case "zh":
		return "chinese"
	case "sv":
		return "swedish"
	}
	return code
}

// speechRequest is an OpenAI speech request.
type speechRequest struct {
	Model          string          `json:"model"`
	Input          string          `json:"input"`
	Voice          json.RawMessage `json:"voice"`
	ResponseFormat string          `json:"response_format"`
	Speed          float64         `json:"speed"`
	Instructions   string          `json:"instructions"`
	StreamFormat   string          `json:"stream_format"`
}

// voice reads voice as a name or, as OpenAI also takes it, {"id": name}.
func (r *speechRequest) voice() (string, error) {
	if len(r.Voice) == 0 || string(r.Voice) == "null" {
		return "", nil
	}
	var name string
	if json.Unmarshal(r.Voice, &name) == nil {
		return name, nil
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.Voice, &obj) == nil && obj.ID != "" {
		return obj.ID, nil
	}
	return "", errors.New(`voice: want a voice name or {"id": name}`)
}

func (h *httpFace) speech(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r)
	if fail != nil {
		writeError(w, fail)
		return
	}
	var req speechRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, badRequest("invalid JSON body: "+err.Error()))
		return
	}
	voice, err := req.voice()
	if err != nil {
		writeError(w, badRequest(err.Error()))
		return
	}
	// Unlike OpenAI's, the simulator's default is wav: it has no encoder
	// for the compressed formats.
	format := cmp.Or(req.ResponseFormat, "wav")
	if format != "wav" && format != "pcm" {
		writeError(w, badRequest(fmt.Sprintf("response_format: the simulated engine answers wav or pcm, not %q", format)))
		return
	}
	if req.StreamFormat != "" && req.StreamFormat != "audio" {
		writeError(w, badRequest(fmt.Sprintf("stream_format: the simulated engine answers audio, not %q", req.StreamFormat)))
		return
	}
	j, fail := h.sim.prepareSpeech(req.Model, &api.SpeechParams{
		Input: req.Input, Voice: voice, Speed: req.Speed, Instructions: req.Instructions,
	})
	if fail != nil {
		writeError(w, fail)
		return
	}
	if res := j.scripted(r.Context()); res != nil {
		if r.Context().Err() == nil {
			writeError(w, res)
		}
		return
	}
	pcm := synthesize(j.text, j.voice, j.speed)
	contentType, out := "audio/pcm", pcm16(pcm.Samples)
	if format == "wav" {
		var b bytes.Buffer
		if err := audio.EncodeWAV(&b, pcm); err != nil {
			writeError(w, engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode speech: "+err.Error()))
			return
		}
		contentType, out = "audio/wav", b.Bytes()
	}
	if res := h.sim.process(r.Context(), j.audioJob, pcmSeconds(pcm)); res.Status != http.StatusOK {
		return
	}
	writeAudioReply(w, contentType, out, j.dir.cut)
}

// writeAudioReply sends a finished audio answer; cut sends half of it and
// drops the connection, as fail=cut asks.
func writeAudioReply(w http.ResponseWriter, contentType string, body []byte, cut bool) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if cut {
		_, _ = w.Write(body[:len(body)/2])
		abort(http.NewResponseController(w)) // does not return
	}
	_, _ = w.Write(body)
}

// pcm16 is samples as OpenAI's "pcm" format: raw 16-bit little-endian.
func pcm16(samples []float32) []byte {
	b := make([]byte, 2*len(samples))
	for i, v := range samples {
		s := math.Round(float64(max(-1, min(1, v))) * math.MaxInt16)
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(s)))
	}
	return b
}
