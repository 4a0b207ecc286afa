package api

import "encoding/json"

// Request kinds of the audio endpoints on the link.
const (
	// KindTranscription carries TranscriptionParams in LinkRequest.Params
	// and the uploaded audio file, as sent, as the stream's body. The
	// worker answers with one Transcript.
	KindTranscription = "transcription"
	// KindSpeech carries SpeechParams as the body. The worker answers with
	// the audio: a WAV file, 24 kHz, 16-bit, mono.
	KindSpeech = "speech"
	// KindTranscriptionLive carries LiveParams in LinkRequest.Params and
	// raw PCM (signed 16-bit little-endian, mono, at the sample rate) as
	// the stream's body, sent as the client speaks: the body ends when the
	// client ends its audio. The worker answers with LiveEvent messages as
	// it goes, a LiveFinal last, then its result.
	KindTranscriptionLive = "transcription_live"
)

// Request types of usage rows and in-flight requests for audio.
const (
	// RequestAudio is a transcription (speech to text).
	RequestAudio = "audio"
	// RequestSpeech is text to speech.
	RequestSpeech = "speech"
)

// Audio formats the gateway accepts, as sniffed from the content.
const (
	AudioWAV  = "wav"
	AudioMP3  = "mp3"
	AudioFLAC = "flac"
	// AudioPCMStream is the format of a live transcription's row: raw
	// PCM, streamed.
	AudioPCMStream = "audio/pcm;stream"
)

// Bounds of a live transcription's sample rate (Hz).
const (
	LiveMinRate     = 8000
	LiveMaxRate     = 48000
	LiveDefaultRate = 16000
)

// LiveParams are a live transcription's settings after the gateway
// validated them.
type LiveParams struct {
	SampleRate int `json:"sample_rate"`
	// Language is an ISO 639-1 code; empty lets the engine detect it.
	Language string `json:"language,omitempty"`
}

// Event types of a live transcription, as the client reads them.
const (
	LiveSessionStarted = "session.started"
	LivePartial        = "transcript.partial"
	LiveFinal          = "transcript.final"
	LiveError          = "error"
)

// LiveEvent is one event of a live transcription. A worker sends partial
// and final events on the link; the gateway adds the session's start and
// any error.
type LiveEvent struct {
	Type string `json:"type"`
	// Text of a partial is the whole transcript so far, replacing the
	// previous partial's; of a final, the whole transcript.
	Text *string `json:"text,omitempty"`
	// Start and End (seconds) of a partial are the audio this decode
	// covered: what lies before Start was settled by an earlier window
	// and is not decoded again.
	Start *float64 `json:"start,omitempty"`
	End   *float64 `json:"end,omitempty"`
	// Segments, Language and Duration come with the final.
	Segments []Segment `json:"segments,omitempty"`
	Language string    `json:"language,omitempty"`
	Duration *float64  `json:"duration,omitempty"`
	// RequestID and Worker come with session.started.
	RequestID string      `json:"request_id,omitempty"`
	Worker    *LiveWorker `json:"worker,omitempty"`
	// Error comes with an error event.
	Error *LiveErrorBody `json:"error,omitempty"`
}

// LiveWorker names the worker serving a live transcription.
type LiveWorker struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// LiveErrorBody is the error of an error event: the status the request
// would have had over HTTP, with its code and message.
type LiveErrorBody struct {
	Status  int    `json:"status"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// TranscriptionParams are a transcription's settings after the gateway
// validated them, with what it read from the file's headers.
type TranscriptionParams struct {
	// Language is an ISO 639-1 code; empty lets the engine detect it.
	Language string `json:"language,omitempty"`
	Prompt   string `json:"prompt,omitempty"`
	// Temperature above 0 samples; BeamSize is then 0 (switched off).
	Temperature float64 `json:"temperature"`
	BeamSize    int     `json:"beam_size,omitempty"`
	// Words asks for word-level timestamps.
	Words bool `json:"words,omitempty"`
	// Translate asks for the speech in English, whatever its language
	// (POST /v1/audio/translations).
	Translate bool `json:"translate,omitempty"`
	// Format (AudioWAV, AudioMP3 or AudioFLAC), Seconds and Bytes describe
	// the file that follows.
	Format  string  `json:"format"`
	Seconds float64 `json:"seconds"`
	Bytes   int64   `json:"bytes"`
}

// Transcript is a worker's answer to a transcription, whatever its engine
// returned; the gateway renders the client's response_format from it.
type Transcript struct {
	// Language is an ISO 639-1 code when the engine reported one.
	Language string `json:"language"`
	// Duration is the audio's length in seconds.
	Duration float64   `json:"duration"`
	Text     string    `json:"text"`
	Segments []Segment `json:"segments"`
	// Words are present when word timestamps were asked for.
	Words []Word `json:"words,omitempty"`
}

// Segment is one stretch of a transcript with its timing (seconds).
type Segment struct {
	ID           int     `json:"id"`
	Start        float64 `json:"start"`
	End          float64 `json:"end"`
	Text         string  `json:"text"`
	AvgLogprob   float64 `json:"avg_logprob"`
	NoSpeechProb float64 `json:"no_speech_prob"`
}

// Word is one word of a transcript with its timing (seconds).
type Word struct {
	Word  string  `json:"word"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// SpeechParams are a speech request's settings after the gateway
// validated them: the body of a KindSpeech request on the link.
type SpeechParams struct {
	Input string `json:"input"`
	// Voice is one of the model's voices (its default when the client
	// named none); for a model that lists no voices, whatever the client
	// sent, and the engine judges it.
	Voice string `json:"voice"`
	// Speed is 0.25 to 4; 0 means 1.
	Speed float64 `json:"speed,omitempty"`
	// Instructions are passed to engines that take them.
	Instructions string `json:"instructions,omitempty"`
}

// SpeechReply is the JSON form of a speech answer (Accept:
// application/json).
type SpeechReply struct {
	Audio      string          `json:"audio"` // base64 WAV
	Format     string          `json:"format"`
	DurationMs int64           `json:"duration_ms"`
	RequestID  string          `json:"request_id"`
	Svc        json.RawMessage `json:"svc"`
}
