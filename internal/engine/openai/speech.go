package openai

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/audio"
	"github.com/svc-dev/svc/internal/engine"
)

const speechPath = "/v1/audio/speech"

// speechRequest is an OpenAI speech request.
type speechRequest struct {
	Model          string  `json:"model"`
	Input          string  `json:"input"`
	Voice          string  `json:"voice,omitempty"`
	ResponseFormat string  `json:"response_format"`
	Speed          float64 `json:"speed,omitempty"`
	Instructions   string  `json:"instructions,omitempty"`
}

// speak serves a speech request. It asks for WAV, but takes what servers
// send instead: MP3 or FLAC (servers that ignore response_format) are
// decoded and written out as WAV, raw PCM is wrapped in a WAV header.
func (e *Engine) speak(ctx context.Context, req *engine.Request, sink engine.Sink) *api.Result {
	var p api.SpeechParams
	if err := json.Unmarshal(req.Body, &p); err != nil {
		return engine.Failure(http.StatusBadRequest, api.TypeInvalidRequest, "invalid speech parameters: "+err.Error())
	}
	body, err := json.Marshal(speechRequest{
		Model:          req.Model,
		Input:          p.Input,
		Voice:          p.Voice,
		ResponseFormat: "wav",
		Speed:          p.Speed,
		Instructions:   p.Instructions,
	})
	if err != nil {
		return engine.Failure(http.StatusInternalServerError, api.TypeServer, "encode speech request: "+err.Error())
	}
	resp, res := e.post(ctx, speechPath, body, "audio/wav")
	if res != nil {
		return res
	}
	defer resp.Close()
	b, res := e.readBody(ctx, resp, sink)
	if res != nil {
		return res
	}
	wav, res := speechWAV(b, string(resp.contentType()))
	if res != nil {
		return res
	}
	if err := sink.Body(ctx, wav); err != nil {
		return engine.Cancelled()
	}
	return engine.OK()
}

// speechWAV is a speech answer as WAV, whatever form it came in.
func speechWAV(b []byte, contentType string) ([]byte, *api.Result) {
	if len(b) == 0 {
		return nil, engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the inference engine sent no audio")
	}
	mediaType, params, _ := mime.ParseMediaType(contentType)
	switch audio.Sniff(b) {
	case api.AudioWAV:
		return b, nil
	case api.AudioMP3, api.AudioFLAC:
		pcm, err := audio.Decode(bytes.NewReader(b))
		if err != nil {
			return nil, invalidResponse(fmt.Errorf("decode speech: %w", err))
		}
		return encodeWAV(pcm)
	}
	switch mediaType {
	case "audio/pcm", "audio/l16": // ParseMediaType lower-cases
		return encodeWAV(pcmFromS16(b, params))
	case "application/json":
		// An error reported with status 200.
		return nil, engine.ErrorResult(errorStatus(b), b)
	}
	return nil, invalidResponse(fmt.Errorf("speech in %q is not WAV, MP3, FLAC or PCM audio", contentType))
}

// pcmFromS16 reads raw 16-bit little-endian PCM, OpenAI's "pcm": 24 kHz
// mono unless the type's rate and channels parameters say otherwise.
// Servers label it audio/pcm or audio/L16; L16 is big-endian by RFC 2586,
// but the servers that use the label for OpenAI's format send it little-
// endian.
func pcmFromS16(b []byte, params map[string]string) audio.PCM {
	rate, channels := audio.SpeechRate, 1
	if n, err := strconv.Atoi(params["rate"]); err == nil && n > 0 {
		rate = n
	}
	if n, err := strconv.Atoi(params["channels"]); err == nil && n > 0 {
		channels = n
	}
	frames := len(b) / (2 * channels)
	samples := make([]float32, frames)
	for i := range samples {
		var sum float32
		for c := range channels {
			sum += float32(int16(binary.LittleEndian.Uint16(b[2*(i*channels+c):])))
		}
		samples[i] = sum / float32(channels) / 32768
	}
	return audio.PCM{Rate: rate, Samples: samples}
}

func encodeWAV(pcm audio.PCM) ([]byte, *api.Result) {
	if len(pcm.Samples) == 0 {
		return nil, engine.Failure(http.StatusBadGateway, api.TypeUpstream, "the inference engine sent no audio")
	}
	var b bytes.Buffer
	if err := audio.EncodeWAV(&b, pcm); err != nil {
		return nil, invalidResponse(fmt.Errorf("encode speech: %w", err))
	}
	return b.Bytes(), nil
}
