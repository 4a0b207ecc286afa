package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"unicode"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// verboseReply is a verbose_json transcription as OpenAI, speaches and
// whisper.cpp's whisper-server send it. They differ in where word timings
// go: OpenAI puts real words at the top level; whisper-server nests them
// per segment, and they are its tokens (" trans", "cribed", ","); speaches
// (faster-whisper) has both.
type verboseReply struct {
	Language string          `json:"language"`
	Duration flexFloat       `json:"duration"`
	Text     string          `json:"text"`
	Segments []replySegment  `json:"segments"`
	Words    []replyWord     `json:"words"`
	Error    json.RawMessage `json:"error"`
}

type replySegment struct {
	Start        flexFloat   `json:"start"`
	End          flexFloat   `json:"end"`
	Text         string      `json:"text"`
	AvgLogprob   flexFloat   `json:"avg_logprob"`
	NoSpeechProb flexFloat   `json:"no_speech_prob"`
	Words        []replyWord `json:"words"`
}

// replyWord is a timed word; whisper-server's t_dtw and probability, and
// faster-whisper's probability, are not kept.
type replyWord struct {
	Word  string    `json:"word"`
	Start flexFloat `json:"start"`
	End   flexFloat `json:"end"`
}

// parseTranscript turns a transcription answer into an api.Transcript.
// A server that ignored response_format=verbose_json and sent
// {"text": ...} or plain text gets one segment spanning the clip; the
// duration is the server's, else the one the gateway read from the file.
func parseTranscript(b []byte, contentType string, p *api.TranscriptionParams) (*api.Transcript, *api.Result) {
	var r verboseReply
	// Whatever the type says, an object is read as JSON: servers label
	// their answers loosely.
	switch err := json.Unmarshal(b, &r); {
	case err == nil:
		if !isNull(r.Error) && r.Text == "" && len(r.Segments) == 0 {
			// An error reported with status 200.
			return nil, engine.ErrorResult(errorStatus(b), b)
		}
	case isJSONType(contentType):
		return nil, invalidResponse(fmt.Errorf("decode transcription: %w", err))
	default:
		r = verboseReply{Text: string(b)}
	}

	t := &api.Transcript{
		Language: normaliseLanguage(r.Language),
		Duration: float64(r.Duration),
		Text:     strings.TrimSpace(r.Text),
		Segments: make([]api.Segment, 0, len(r.Segments)),
	}
	if t.Language == "" {
		t.Language = p.Language
	}
	if t.Duration <= 0 {
		t.Duration = p.Seconds
	}
	for i, s := range r.Segments {
		t.Segments = append(t.Segments, api.Segment{
			ID:           i,
			Start:        float64(s.Start),
			End:          float64(s.End),
			Text:         s.Text,
			AvgLogprob:   float64(s.AvgLogprob),
			NoSpeechProb: float64(s.NoSpeechProb),
		})
	}
	if t.Text == "" {
		var all strings.Builder
		for _, s := range t.Segments {
			all.WriteString(s.Text)
		}
		t.Text = strings.TrimSpace(all.String())
	}
	if len(t.Segments) == 0 && t.Text != "" {
		t.Segments = append(t.Segments, api.Segment{End: t.Duration, Text: t.Text})
	}
	if p.Words {
		t.Words = replyWords(&r)
	}
	return t, nil
}

func isJSONType(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// replyWords are the word timings of a reply, top-level ones if any, else
// the segments' put together.
func replyWords(r *verboseReply) []api.Word {
	out := []api.Word{}
	if len(r.Words) > 0 {
		for _, w := range r.Words {
			out = appendWord(out, w)
		}
		return out
	}
	for _, s := range r.Segments {
		// Nested entries may be tokens: one that does not start with a
		// space continues the word before it in its segment.
		first := len(out)
		for _, w := range s.Words {
			if len(out) > first && w.Word != "" && !unicode.IsSpace(rune(w.Word[0])) {
				// Trailing punctuation goes; an apostrophe that starts
				// a piece ("'s") stays.
				if piece := strings.TrimRightFunc(w.Word, spaceOrPunct); piece != "" {
					last := &out[len(out)-1]
					last.Word += piece
					last.End = max(last.End, float64(w.End))
				}
				continue
			}
			out = appendWord(out, w)
		}
	}
	return out
}

// appendWord appends w without its spaces and punctuation, as OpenAI
// gives words; an entry that is only punctuation adds nothing.
func appendWord(out []api.Word, w replyWord) []api.Word {
	text := trimWord(w.Word)
	if text == "" {
		return out
	}
	return append(out, api.Word{Word: text, Start: float64(w.Start), End: float64(w.End)})
}

func trimWord(s string) string { return strings.TrimFunc(s, spaceOrPunct) }

func spaceOrPunct(r rune) bool { return unicode.IsSpace(r) || unicode.IsPunct(r) }

// normaliseLanguage turns what servers report as a transcript's language
// into an ISO 639-1 code: OpenAI and whisper-server name it in English
// ("english"), speaches gives the code. A name outside the common whisper
// languages gives "": the contract wants a code or nothing.
func normaliseLanguage(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) == 2 {
		return s
	}
	switch s {
	case "english":
		return "en"
	case "german":
		return "de"
	case "spanish", "castilian":
		return "es"
	case "french":
		return "fr"
	case "italian":
		return "it"
	case "portuguese":
		return "pt"
	case "dutch", "flemish":
		return "nl"
	case "polish":
		return "pl"
	case "russian":
		return "ru"
	case "ukrainian":
		return "uk"
	case "turkish":
		return "tr"
	case "arabic":
		return "ar"
	case "hindi":
		return "hi"
	case "japanese":
		return "ja"
	case "korean":
		return "ko"
	case "chinese", "mandarin":
		return "zh"
	case "swedish":
		return "sv"
	case "danish":
		return "da"
	case "norwegian":
		return "no"
	case "finnish":
		return "fi"
	case "czech":
		return "cs"
	case "greek":
		return "el"
	case "hebrew":
		return "he"
	case "indonesian":
		return "id"
	case "vietnamese":
		return "vi"
	case "thai":
		return "th"
	case "romanian", "moldavian", "moldovan":
		return "ro"
	case "hungarian":
		return "hu"
	case "catalan", "valencian":
		return "ca"
	}
	return ""
}

// flexFloat is a number that tolerates quotes, null and NaN (which
// whisper-server's JSON library writes as null).
type flexFloat float64

func (f *flexFloat) UnmarshalJSON(b []byte) error {
	var v float64
	if json.Unmarshal(bytes.Trim(bytes.TrimSpace(b), `"`), &v) != nil {
		v = 0
	}
	*f = flexFloat(v)
	return nil
}
