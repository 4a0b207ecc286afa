package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/transcription"
)

// Transcription is a file to transcribe and how.
type Transcription struct {
	Model string
	// File is read once, as it is uploaded; Size is its length, or -1 when
	// unknown (stdin), which sends the upload chunked.
	File     io.Reader
	FileName string
	Size     int64

	ResponseFormat string // json, text, srt, vtt or verbose_json; "" for json
	Language       string
	Prompt         string
	Temperature    *float64
	BeamSize       int
	Granularities  []string
}

// Transcribe uploads a file for transcription and returns the answer as
// the gateway sent it, with its content type. The file is streamed, never
// held whole.
//
// A file over the gateway's limit is refused here, with the gateway's 413,
// before anything is sent: the gateway refuses it from its length and
// closes the connection, and a client still sending would see the
// connection reset rather than the answer.
func (c *Client) Transcribe(ctx context.Context, t Transcription) ([]byte, string, error) {
	if t.Size > transcription.MaxFileBytes {
		return nil, "", fileTooLarge()
	}
	var counted *cappedReader
	if t.Size < 0 {
		counted = &cappedReader{r: t.File, left: transcription.MaxFileBytes}
		t.File = counted
	}
	up, err := t.form()
	if err != nil {
		return nil, "", err
	}
	// A transcription's answer starts when it is done, which for a long
	// recording on a slow engine takes minutes: no bound but the caller's.
	resp, err := c.sendBody(ctx, http.MethodPost, "/v1/audio/transcriptions", up, "*/*", 0)
	if counted != nil && counted.over.Load() {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, "", fileTooLarge()
	}
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("read the transcript: %w", err)
	}
	ctype := resp.Header.Get("Content-Type")
	// A JSON reply kept alive that failed late is a 200 holding the error.
	if strings.HasPrefix(ctype, "application/json") {
		if e := streamError(b, resp.Header.Get("X-Request-Id")); e != nil {
			return nil, "", e
		}
	}
	return b, ctype, nil
}

// fileTooLarge is the gateway's 413 for a file over its limit.
func fileTooLarge() *Error {
	e := transcription.ErrTooLarge
	return &Error{Status: http.StatusRequestEntityTooLarge, Message: e.Message, Type: api.TypeInvalidRequest, Code: e.Code}
}

// cappedReader reads a file of unknown length (stdin) until it passes the
// gateway's limit, and then fails the upload.
type cappedReader struct {
	r    io.Reader
	left int64
	// over is read by the caller while the transport may still be
	// sending: the answer can come before the body is out.
	over atomic.Bool
}

var errFileTooLarge = errors.New("the audio file is over the limit")

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.over.Load() {
		return 0, errFileTooLarge
	}
	n, err := c.r.Read(p)
	if c.left -= int64(n); c.left < 0 {
		c.over.Store(true)
		return 0, errFileTooLarge
	}
	return n, err
}

// form lays out the multipart body: the fields and the file's part header
// are written ahead, the file streams after them, and the closing
// boundary follows, so the length is known whenever the file's is.
func (t *Transcription) form() (*upload, error) {
	var head bytes.Buffer
	w := multipart.NewWriter(&head)
	fields := [][2]string{{"model", t.Model}, {"response_format", t.ResponseFormat}, {"language", t.Language}, {"prompt", t.Prompt}}
	if t.Temperature != nil {
		fields = append(fields, [2]string{"temperature", strconv.FormatFloat(*t.Temperature, 'f', -1, 64)})
	}
	if t.BeamSize > 0 {
		fields = append(fields, [2]string{"beam_size", strconv.Itoa(t.BeamSize)})
	}
	for _, g := range t.Granularities {
		fields = append(fields, [2]string{"timestamp_granularities[]", g})
	}
	for _, f := range fields {
		if f[1] == "" {
			continue
		}
		if err := w.WriteField(f[0], f[1]); err != nil {
			return nil, fmt.Errorf("build the upload: %w", err)
		}
	}
	name := t.FileName
	if name == "" {
		name = "audio"
	}
	if _, err := w.CreateFormFile("file", name); err != nil {
		return nil, fmt.Errorf("build the upload: %w", err)
	}
	headLen := head.Len()
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("build the upload: %w", err)
	}
	// Close wrote the closing boundary after the file's part header.
	tail := append([]byte(nil), head.Bytes()[headLen:]...)
	head.Truncate(headLen)
	size := int64(-1)
	if t.Size >= 0 {
		size = int64(head.Len()) + t.Size + int64(len(tail))
	}
	return &upload{
		contentType: w.FormDataContentType(),
		body:        io.MultiReader(&head, t.File, bytes.NewReader(tail)),
		size:        size,
	}, nil
}

// Speech is the answer to a speech request: the WAV file and what the
// gateway said about it.
type Speech struct {
	Audio      []byte
	DurationMs int64
	RequestID  string
	WorkerID   string
	WorkerName string
}

// Speak turns text into speech. req is the JSON body (model, input,
// voice, ...). It asks for the JSON form of the answer, which names the
// worker even on generations long enough to be kept alive.
func (c *Client) Speak(ctx context.Context, req any) (*Speech, error) {
	resp, err := c.send(ctx, http.MethodPost, "/v1/audio/speech", req, "application/json", 0)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the speech reply: %w", err)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "audio/wav") {
		// The WAV itself: what an end-to-end encrypted reply opens to,
		// the worker named in the headers.
		info, err := audio.Probe(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("read the speech reply: %w", err)
		}
		return &Speech{Audio: raw, DurationMs: int64(info.Seconds * 1000), RequestID: resp.Header.Get("X-Request-Id"),
			WorkerID: resp.Header.Get("X-Worker-Id"), WorkerName: resp.Header.Get("X-Worker-Name")}, nil
	}
	var reply api.SpeechReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		return nil, fmt.Errorf("decode the speech reply: %w", err)
	}
	// A reply kept alive that failed late is a 200 holding the error.
	if e := streamError(raw, reply.RequestID); e != nil {
		return nil, e
	}
	audio, err := base64.StdEncoding.DecodeString(reply.Audio)
	if err != nil {
		return nil, fmt.Errorf("decode the audio: %w", err)
	}
	out := &Speech{Audio: audio, DurationMs: reply.DurationMs, RequestID: reply.RequestID}
	var svc struct {
		Worker struct {
			ID   string  `json:"id"`
			Name *string `json:"name"`
		} `json:"worker"`
	}
	if json.Unmarshal(reply.Svc, &svc) == nil {
		out.WorkerID = svc.Worker.ID
		if svc.Worker.Name != nil {
			out.WorkerName = *svc.Worker.Name
		}
	}
	return out, nil
}
