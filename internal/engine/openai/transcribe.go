package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

const (
	transcriptionsPath = "/v1/audio/transcriptions"
	translationsPath   = "/v1/audio/translations"
)

// transcribe serves a transcription: the uploaded audio is streamed to
// the engine inside a multipart form, so the file is never held in
// memory; the answer is read as verbose_json whatever the server made of
// that (see parseTranscript).
//
// The form is OpenAI's, with beam_size added: whisper.cpp's whisper-server
// reads it, and servers that do not know it (OpenAI, speaches, vLLM)
// ignore unknown fields. whisper-server must be started with
// --inference-path /v1/audio/transcriptions, its default being /inference.
func (e *Engine) transcribe(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	var p api.TranscriptionParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "invalid transcription parameters: "+err.Error())
	}
	if req.Audio == nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "file: no audio came with the request")
	}
	f, err := newForm(req.Model, &p)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, err.Error())
	}
	audio := &uploadReader{r: req.Audio}
	// The client may still be sending when the engine has answered;
	// closing the exchange stops it, and closing the upload as well, which
	// waits for a read in progress, makes sure it is never read after
	// Serve returns.
	defer audio.Close()
	size := int64(-1)
	if p.Bytes > 0 {
		size = int64(len(f.head)) + p.Bytes + int64(len(f.tail))
	}
	body := io.MultiReader(bytes.NewReader(f.head), audio, bytes.NewReader(f.tail))
	path := transcriptionsPath
	if p.Translate {
		path = translationsPath
	}
	resp, res := e.postStream(ctx, path, body, size, f.contentType, "application/json")
	if res != nil {
		// A broken upload is why the request failed, whatever the
		// client made of it.
		if err := audio.Close(); err != nil && ctx.Err() == nil {
			return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "read the uploaded audio: "+err.Error())
		}
		return res
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	t, res := parseTranscript(b, string(resp.contentType()), &p)
	if res != nil {
		return res
	}
	out, err := json.Marshal(t)
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode transcript: "+err.Error())
	}
	if err := sink.Body(ctx, out); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// form is a transcription's multipart body around its audio: the text
// fields and the file's part header before it, the closing boundary after.
// With the audio's length from the gateway, the whole length is known, so
// the request goes out with a Content-Length and the audio is read
// straight into the connection.
type form struct {
	head, tail  []byte
	contentType string
}

// newForm lays the form out, the text fields first so that a server
// parsing it as it arrives knows the model before the file.
func newForm(model string, p *api.TranscriptionParams) (*form, error) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fields := [][2]string{{"model", model}}
	if p.Language != "" {
		fields = append(fields, [2]string{"language", p.Language})
	}
	if p.Prompt != "" {
		fields = append(fields, [2]string{"prompt", p.Prompt})
	}
	fields = append(fields, [2]string{"temperature", strconv.FormatFloat(p.Temperature, 'f', -1, 64)})
	if p.BeamSize > 0 {
		fields = append(fields, [2]string{"beam_size", strconv.Itoa(p.BeamSize)})
	}
	fields = append(fields, [2]string{"response_format", "verbose_json"})
	// Translations take no granularities: their segments come unasked.
	if !p.Translate {
		fields = append(fields, [2]string{"timestamp_granularities[]", "segment"})
	}
	if p.Words && !p.Translate {
		fields = append(fields, [2]string{"timestamp_granularities[]", "word"})
	}
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return nil, fmt.Errorf("write form field %s: %w", f[0], err)
		}
	}
	name, contentType := audioFile(p.Format)
	h := make(textproto.MIMEHeader)
	h.Set("Content-Disposition", multipart.FileContentDisposition("file", name))
	h.Set("Content-Type", contentType)
	if _, err := mw.CreatePart(h); err != nil {
		return nil, fmt.Errorf("write form file: %w", err)
	}
	headLen := b.Len()
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("close form: %w", err)
	}
	out := b.Bytes()
	return &form{head: out[:headLen:headLen], tail: out[headLen:], contentType: mw.FormDataContentType()}, nil
}

// uploadReader hands the audio to the transport until closed, and
// remembers the first error reading it: a broken upload must be told from
// an engine that stopped reading.
type uploadReader struct {
	mu     sync.Mutex // held while reading, so Close waits for a read
	r      io.Reader
	err    error
	closed bool
}

var errRequestEnded = errors.New("the transcription request ended")

func (u *uploadReader) Read(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return 0, errRequestEnded
	}
	n, err := u.r.Read(p)
	if err != nil && err != io.EOF && u.err == nil {
		u.err = err
	}
	return n, err
}

// Close stops further reads, waiting for one in progress (the worker's
// request body ends it when the request is cancelled), and returns the
// error reading the audio, if any.
func (u *uploadReader) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	return u.err
}

// audioFile is the file name and type an upload of format goes under:
// OpenAI goes by the name's extension, others by the content.
func audioFile(format string) (name, contentType string) {
	switch format {
	case api.AudioWAV:
		return "audio.wav", "audio/wav"
	case api.AudioMP3:
		return "audio.mp3", "audio/mpeg"
	case api.AudioFLAC:
		return "audio.flac", "audio/flac"
	}
	return "audio", "application/octet-stream"
}
