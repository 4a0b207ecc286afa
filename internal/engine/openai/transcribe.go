package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

const transcriptionsPath = "/v1/audio/transcriptions"

// errRequestEnded stops the upload of a request that ended before its
// body was sent whole.
var errRequestEnded = errors.New("the transcription request ended")

// transcribe serves a transcription: the uploaded audio is streamed to
// the engine as a multipart form, built while it is sent, so the file is
// never held in memory; the answer is read as verbose_json whatever the
// server made of that (see parseTranscript).
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
	up := startUpload(req.Model, &p, req.Audio)
	defer up.stop()
	resp, res := e.postStream(ctx, transcriptionsPath, up.pr, up.contentType, "application/json")
	if res != nil {
		// A broken upload is why the request failed, whatever the
		// transport made of it.
		if err := up.stop(); err != nil && ctx.Err() == nil {
			return engine.Failure(http.StatusBadGateway, api.TypeUpstream, "read the uploaded audio: "+err.Error())
		}
		return res
	}
	defer resp.Body.Close()
	b, res := e.readBody(ctx, resp.Body)
	if res != nil {
		return res
	}
	t, res := parseTranscript(b, resp.Header.Get("Content-Type"), &p)
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

// upload writes a transcription's multipart form into a pipe while the
// HTTP request reads it from the other end. Its goroutine belongs to the
// request: stop ends and waits for it, so it never outlives Serve.
type upload struct {
	pr          *io.PipeReader
	contentType string
	done        chan struct{} // closed when the writer has returned
	readErr     error         // reading the audio failed; set before done closes
}

func startUpload(model string, p *api.TranscriptionParams, audio io.Reader) *upload {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	u := &upload{pr: pr, contentType: mw.FormDataContentType(), done: make(chan struct{})}
	go func() {
		defer close(u.done)
		src := &readRecorder{r: audio}
		err := writeForm(mw, model, p, src)
		u.readErr = src.err
		// A nil error ends the body; any other fails the request.
		pw.CloseWithError(err)
	}()
	return u
}

// stop closes the pipe, so that the writer gives up at its next write, and
// waits for it to return. It returns the error reading the audio, if any.
// Once the transport has the whole body, stop returns at once; before
// that it waits for the writer's current read of the audio, which the
// worker's request body ends when the request is cancelled.
func (u *upload) stop() error {
	u.pr.CloseWithError(errRequestEnded)
	<-u.done
	return u.readErr
}

// readRecorder remembers the first error of r other than EOF: a broken
// upload must be told from an engine that stopped reading.
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

// writeForm writes the form, the text fields first so that a server
// parsing it as it arrives knows the model before the file.
func writeForm(mw *multipart.Writer, model string, p *api.TranscriptionParams, audio io.Reader) error {
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
	fields = append(fields,
		[2]string{"response_format", "verbose_json"},
		[2]string{"timestamp_granularities[]", "segment"})
	if p.Words {
		fields = append(fields, [2]string{"timestamp_granularities[]", "word"})
	}
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return fmt.Errorf("write form field %s: %w", f[0], err)
		}
	}
	name, contentType := audioFile(p.Format)
	h := make(textproto.MIMEHeader)
	h.Set("Content-Disposition", multipart.FileContentDisposition("file", name))
	h.Set("Content-Type", contentType)
	part, err := mw.CreatePart(h)
	if err != nil {
		return fmt.Errorf("write form file: %w", err)
	}
	if _, err := io.Copy(part, audio); err != nil {
		return fmt.Errorf("upload audio: %w", err)
	}
	return mw.Close()
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
