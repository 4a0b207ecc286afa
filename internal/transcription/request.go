// Package transcription is POST /v1/audio/transcriptions: reading and
// checking the multipart upload, and rendering the answer in the response
// format the client asked for.
package transcription

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
)

const (
	// MaxFileBytes is the largest audio file accepted: 25 MB.
	MaxFileBytes = 25 << 20
	// MaxBody bounds a whole upload: the file and the form around it.
	MaxBody = MaxFileBytes + maxFormBytes
	// maxFormBytes is room for the other fields and the multipart framing.
	maxFormBytes = 1 << 20
	// maxField bounds one text field (a prompt is a few hundred words).
	maxField = 64 << 10
)

// Response formats.
const (
	FormatJSON        = "json"
	FormatText        = "text"
	FormatSRT         = "srt"
	FormatVTT         = "vtt"
	FormatVerboseJSON = "verbose_json"
)

var formats = []string{FormatJSON, FormatText, FormatSRT, FormatVTT, FormatVerboseJSON}

// DefaultBeamSize is the beam width at temperature 0 when none is asked for.
const DefaultBeamSize = 5

// Request is a checked transcription request. Its audio is in the spool
// it was parsed into.
type Request struct {
	Model string
	// ResponseFormat is one of the Format constants.
	ResponseFormat string
	Params         api.TranscriptionParams
}

// ErrTooLarge is the 413 for a file over MaxFileBytes.
var ErrTooLarge = &api.Error{Kind: api.KindTooLarge, Code: "file_too_large", Param: "file",
	Message: "The audio file is larger than the 25 MB limit; split it into shorter files"}

// ErrBodyTooLarge is the 413 for an upload over MaxBody, from its
// Content-Length or found as it is read; the connection it came on cannot
// be used again. The megabyte past the file's limit is room for the form
// around it, not a limit of its own.
var ErrBodyTooLarge = &api.Error{Kind: api.KindTooLarge, Code: "file_too_large", Param: "file",
	Message: "The upload is larger than 26 MB, the limit for a 25 MB audio file and the form around it; split the audio into shorter files"}

// Parse reads a multipart/form-data upload from body as it arrives, at most
// MaxBody bytes of it, and writes the audio file to spool as it streams
// past; its format and duration come from its headers. The size of the
// body is judged before its content: a body over MaxBody is ErrBodyTooLarge
// whatever else is wrong with it, so a refusal reads the rest of the body,
// up to the limit. An invalid field or a file that cannot be read comes back
// as an error beside the request, its fields read; every other error with
// no request.
func Parse(contentType string, body io.Reader, spool io.Writer) (*Request, error) {
	return parseUpload(contentType, body, spool, false)
}

// ParseTranslation is Parse for POST /v1/audio/translations: the same
// form, but the speech comes out in English, so language and timestamp
// granularities are not taken.
func ParseTranslation(contentType string, body io.Reader, spool io.Writer) (*Request, error) {
	return parseUpload(contentType, body, spool, true)
}

func parseUpload(contentType string, body io.Reader, spool io.Writer, translate bool) (*Request, error) {
	lr := &limitReader{r: body, left: MaxBody}
	sw := &spoolWriter{w: spool}
	r, err := parse(contentType, lr, sw, translate)
	if err != nil && !lr.over && sw.err == nil {
		_, _ = io.Copy(io.Discard, lr)
	}
	switch {
	case lr.over:
		return nil, ErrBodyTooLarge
	case sw.err != nil:
		// The fields read name the model of the refusal's usage row.
		return r, spoolError(sw.err)
	}
	return r, err
}

// spoolError is the 503 of an upload the gateway could not hold: its disk
// is full, which a moment may mend (or another replica), and is no fault
// of the request's.
func spoolError(err error) *api.Error {
	cause := "its spool cannot be written"
	switch {
	case errors.Is(err, syscall.ENOSPC):
		cause = "its disk is full"
	case errors.Is(err, syscall.EDQUOT):
		cause = "its disk quota is used up"
	}
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: spoolRetryAfter,
		Message: "The gateway cannot hold the upload now: " + cause + "; retry shortly",
		Err:     fmt.Errorf("spool the upload: %w", err)}
}

// spoolRetryAfter is the wait a spool refusal asks for, the usage store's
// on a full disk.
const spoolRetryAfter = 5 * time.Second

// spoolWriter keeps the spool's failure apart from the upload's own.
type spoolWriter struct {
	w   io.Writer
	err error
}

func (s *spoolWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func parse(contentType string, body io.Reader, spool io.Writer, translate bool) (*Request, error) {
	boundary, err := formBoundary(contentType)
	if err != nil {
		return nil, err
	}
	r := &Request{Params: api.TranscriptionParams{Translate: translate}}
	var v api.Validator
	fields := map[string]string{}
	// tooLong are the fields refused for their length: sent, if not read.
	tooLong := map[string]bool{}
	var granularities []string
	var info audio.Info
	var fileErr error
	sawFile := false
	mr := multipart.NewReader(body, boundary)
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			// The fields read so far name the model of the refusal's
			// usage row.
			r.Model = fields["model"]
			return r, malformed(err)
		}
		name := part.FormName()
		switch {
		case name == "file":
			if sawFile {
				v.Add("file", api.FieldDuplicate, "send one file")
				continue
			}
			sawFile = true
			info, fileErr = probe(io.TeeReader(part, spool))
			if errors.Is(fileErr, ErrTooLarge) {
				return nil, ErrTooLarge
			}
			if ae, ok := errors.AsType[*api.Error](fileErr); ok {
				// The body's own failure (it stopped coming, or its
				// client left), not the file's.
				r.Model = fields["model"]
				return r, ae
			}
		case name == "timestamp_granularities[]" || name == "timestamp_granularities":
			val, ok, err := fieldValue(part, &v)
			if err != nil {
				return nil, err
			}
			if ok {
				granularities = append(granularities, val)
			}
		case !formFields[name]:
			// Ignored, whatever its size: the body's own limit bounds it.
			if _, err := io.Copy(io.Discard, part); err != nil {
				return nil, malformed(err)
			}
		default:
			val, ok, err := fieldValue(part, &v)
			if err != nil {
				return nil, err
			}
			if !ok {
				tooLong[name] = true
				continue
			}
			if _, dup := fields[name]; dup {
				v.Add(name, api.FieldDuplicate, "send %s once", name)
				continue
			}
			fields[name] = val
		}
	}
	if !sawFile {
		v.Add("file", api.FieldMissing, "required: the audio file (wav, mp3 or flac)")
	}
	// The fields were read: the request comes back with any error from
	// here on, so that the refusal's usage row names its model.
	r.check(&v, fields, tooLong, granularities)
	if err := v.Err(); err != nil {
		return r, err
	}
	if fileErr != nil {
		return r, fileError(fileErr)
	}
	r.Params.Format, r.Params.Seconds, r.Params.Bytes = info.Format, info.Seconds, info.Bytes
	return r, nil
}

// formFields are the text fields a transcription reads; any other is
// passed over unread.
var formFields = map[string]bool{"model": true, "response_format": true, "language": true, "prompt": true,
	"temperature": true, "beam_size": true, "stream": true}

// formBoundary checks the content type and returns its boundary.
func formBoundary(contentType string) (string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" {
		return "", api.BadRequest("Send the audio as multipart/form-data with the file in a field named file")
	}
	if params["boundary"] == "" {
		return "", api.BadRequest("Malformed multipart/form-data: the Content-Type has no boundary")
	}
	return params["boundary"], nil
}

// fieldValue reads a text field, bounded: one too long is reported to v,
// and not ok, and the rest of it is read past.
func fieldValue(part *multipart.Part, v *api.Validator) (val string, ok bool, err error) {
	b, err := io.ReadAll(io.LimitReader(part, maxField+1))
	if err != nil {
		return "", false, malformed(err)
	}
	if len(b) > maxField {
		v.Add(part.FormName(), api.FieldTooLong, "longer than %d KB", maxField>>10)
		return "", false, nil
	}
	return string(b), true, nil
}

// probe reads the file's headers as it streams past, refusing it once it
// is larger than the limit.
func probe(part io.Reader) (audio.Info, error) {
	lr := &limitReader{r: part, left: MaxFileBytes}
	info, err := audio.Probe(lr)
	// The size is judged before the content (413 before 400): Probe stops
	// early at a file that is not audio or is damaged, and the rest is
	// read, up to the limit, before its verdict counts.
	_, rest := io.Copy(io.Discard, lr)
	switch {
	case lr.over:
		return info, ErrTooLarge
	case errors.Is(rest, errOverLimit):
		return info, ErrTooLarge
	case rest != nil:
		// The body failed under the file (it stopped coming).
		return info, rest
	case err != nil:
		return info, err
	}
	return info, nil
}

// limitReader fails once more than left bytes were asked of it.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

var errOverLimit = errors.New("over the limit")

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		l.over = true
		return 0, errOverLimit
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		l.over = true
		return n, errOverLimit
	}
	return n, err
}

// fileError is the answer for a file that is not usable audio.
func fileError(err error) error {
	var fe *audio.FormatError
	switch {
	case errors.Is(err, audio.ErrUnsupported):
		return &api.Error{Kind: api.KindInvalidRequest, Code: "unsupported_audio_format", Param: "file",
			Message: "Unsupported audio format"}
	case errors.As(err, &fe):
		return &api.Error{Kind: api.KindInvalidRequest, Code: "unreadable_audio", Param: "file",
			Message: "The audio file cannot be read: " + fe.Error()}
	default:
		return malformed(err)
	}
}

// check validates the text fields into r.
func (r *Request) check(v *api.Validator, fields map[string]string, tooLong map[string]bool, granularities []string) {
	r.Model = fields["model"]
	_, sent := fields["model"]
	sent = sent || tooLong["model"] // refused for its length already
	if !sent {
		v.Add("model", api.FieldMissing, "required: stt-large-v3-turbo or stt-large-v3")
	} else if !tooLong["model"] && strings.TrimSpace(r.Model) == "" {
		v.Add("model", api.FieldInvalid, "must not be empty")
	}

	r.ResponseFormat = FormatJSON
	if f, ok := fields["response_format"]; ok {
		if !slices.Contains(formats, f) {
			v.Add("response_format", api.FieldEnum, "one of %s", strings.Join(formats, ", "))
		}
		r.ResponseFormat = f
	}

	p := &r.Params
	if p.Translate {
		if _, ok := fields["language"]; ok {
			v.Add("language", api.FieldNotAllowed, "a translation is always into English; leave language out")
		}
		if len(granularities) > 0 {
			v.Add("timestamp_granularities", api.FieldNotAllowed, "translations take no timestamp granularities")
		}
	} else if lang, ok := fields["language"]; ok && lang != "" {
		lang = strings.ToLower(strings.TrimSpace(lang))
		if !isLanguage(lang) {
			v.Add("language", api.FieldInvalid, "an ISO 639-1 code such as en, de or ja")
		}
		p.Language = lang
	}
	if prompt, ok := fields["prompt"]; ok {
		if !utf8.ValidString(prompt) {
			v.Add("prompt", api.FieldInvalid, "must be UTF-8 text")
		}
		p.Prompt = prompt
	}
	if t, ok := fields["temperature"]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
		switch {
		case err != nil:
			v.Add("temperature", api.FieldWrongType, "expected a number")
		case !(f >= 0 && f <= 1): // NaN too, which ParseFloat reads
			v.Add("temperature", api.FieldOutOfRange, "must be between 0 and 1")
		default:
			p.Temperature = f
		}
	}
	beam := DefaultBeamSize
	if b, ok := fields["beam_size"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(b))
		switch {
		case err != nil:
			v.Add("beam_size", api.FieldWrongType, "expected a whole number")
		case n < 1 || n > 8:
			v.Add("beam_size", api.FieldOutOfRange, "must be 1 to 8")
		default:
			beam = n
		}
	}
	// Sampling switches beam search off.
	if p.Temperature == 0 {
		p.BeamSize = beam
	}

	for i, g := range granularities {
		if p.Translate {
			break
		}
		field := "timestamp_granularities." + strconv.Itoa(i)
		switch g {
		case "word":
			p.Words = true
		case "segment":
		default:
			v.Add(field, api.FieldEnum, "one of segment, word")
		}
	}
	if len(granularities) > 0 && !p.Translate && r.ResponseFormat != FormatVerboseJSON {
		v.Add("timestamp_granularities", api.FieldNotAllowed, "only with response_format verbose_json")
	}
	if s, ok := fields["stream"]; ok && s != "false" {
		v.Add("stream", api.FieldNotSupported, "streamed transcription is not supported; leave stream out")
	}
}

// malformed answers a body that could not be read as multipart, but for
// an answer its reader gave itself (the body stopped coming in time).
func malformed(err error) error {
	if ae, ok := errors.AsType[*api.Error](err); ok {
		return ae
	}
	// The multipart reader's own words name its internals; say what the
	// sender can mend.
	why := err.Error()
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.HasSuffix(why, ": EOF"):
		why = "the body ended before the form did (a form is its parts, each after --BOUNDARY, then --BOUNDARY-- with the Content-Type's boundary)"
	case why == "multipart: message too large":
		why = "a part's headers are too large"
	case strings.HasPrefix(why, "malformed MIME header"):
		why = "a part's headers cannot be read (" + why + ")"
	}
	return api.BadRequest("Malformed multipart/form-data body: %s", why)
}
