package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"sync"
	"time"

	"github.com/svc-dev/svc/internal/audio"
)

// upload is a transcription request body, built once and sent many times.
type upload struct {
	contentType string
	body        []byte
}

// newUpload is a multipart transcription request for sim-stt with a WAV
// file of the given length (16 kHz mono, 32 KB a second) holding a tone.
func newUpload(seconds float64) (upload, error) {
	pcm := audio.PCM{Rate: 16000, Samples: make([]float32, int(seconds*16000))}
	for i := range pcm.Samples {
		pcm.Samples[i] = 0.3 * float32(math.Sin(2*math.Pi*440*float64(i)/16000))
	}
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range [][2]string{{"model", "sim-stt"}, {"response_format", "verbose_json"}} {
		if err := w.WriteField(f[0], f[1]); err != nil {
			return upload{}, err
		}
	}
	fw, err := w.CreateFormFile("file", "clip.wav")
	if err != nil {
		return upload{}, err
	}
	if err := audio.EncodeWAV(fw, pcm); err != nil {
		return upload{}, err
	}
	if err := w.Close(); err != nil {
		return upload{}, err
	}
	return upload{contentType: w.FormDataContentType(), body: b.Bytes()}, nil
}

// postCall posts body to path on p and reads the whole answer.
func postCall(c *http.Client, p *path, route, contentType string, body []byte) call {
	return func(ctx context.Context, at time.Time) outcome {
		req, _ := http.NewRequestWithContext(ctx, "POST", p.base+route, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if p.key != "" {
			req.Header.Set("Authorization", "Bearer "+p.key)
		}
		resp, err := c.Do(req)
		if err != nil {
			return outcome{err: err, latency: time.Since(at)}
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return outcome{status: resp.StatusCode, err: err, latency: time.Since(at)}
	}
}

// transcribe uploads a 30 s clip (about 1 MB) over and over from a few
// clients at once: the cost of carrying an upload through the gateway,
// the link and the worker to the engine, on top of the engine's own.
func (h *rig) transcribe(ctx context.Context) *scenario {
	up, err := newUpload(30)
	if err != nil {
		return &scenario{Name: "transcribe-1mb", Note: "skipped: " + err.Error()}
	}
	sc := h.measure("transcribe-1mb", h.paths, func(p *path) stats {
		outs, el := closedLoop(ctx, 4, h.scale.duration+h.scale.warmup, postCall(h.client, p, "/v1/audio/transcriptions", up.contentType, up.body))
		return summarise(outs, el)
	})
	sc.Note = fmt.Sprintf("4 clients, each uploading a 30 s WAV (%d KB) and waiting for its verbose_json; the engine transcribes at once", len(up.body)>>10)
	return sc
}

// speech asks for about 15 s of speech (a 700 KB WAV) from a few clients
// at once.
func (h *rig) speech(ctx context.Context) *scenario {
	body := []byte(`{"model":"sim-tts","voice":"alloy","input":"` + sentence(230) + `"}`)
	sc := h.measure("speech-700kb", h.paths, func(p *path) stats {
		outs, el := closedLoop(ctx, 4, h.scale.duration+h.scale.warmup, postCall(h.client, p, "/v1/audio/speech", "application/json", body))
		return summarise(outs, el)
	})
	sc.Note = "4 clients, each asking for 230 characters of speech (about 15 s of 24 kHz WAV); the engine speaks at once"
	return sc
}

// sentence is n characters of plain words.
func sentence(n int) string {
	const words = "the quick brown fox jumps over the lazy dog and "
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words)
	}
	return string(b.Bytes()[:n])
}

// uploads sends ten 25 MB files at once through a fresh gateway and worker
// and reports the most memory each process held: the gateway keeps each
// upload once, the worker only a link window of each.
func (h *rig) uploads(ctx context.Context) *scenario {
	n, seconds := 10, float64(25<<20-512)/32000 // files of just under 25 MiB
	if h.scale.short {
		n, seconds = 2, 60
	}
	sc := &scenario{Name: fmt.Sprintf("upload-25mb-x%d", n), Paths: map[string]stats{}, Extra: map[string]any{}}
	up, err := newUpload(seconds)
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	p, err := svcPath(h.scale.place, h.dir, h.bin, h.engine.url, svcOptions{})
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	defer p.stop()
	do := postCall(h.client, p, "/v1/audio/transcriptions", up.contentType, up.body)
	var rec recorder
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Go(func() { rec.add(do(ctx, time.Now())) })
	}
	wg.Wait()
	sc.Paths["svc"] = summarise(rec.outs, time.Since(start))
	for i, role := range []string{"gateway", "worker"} {
		sc.Extra[role+"_peak_rss_bytes"] = procUsage(p.procs[i]).hwm
	}
	sc.Note = fmt.Sprintf("%d uploads of %d KB at once; peak RSS: gateway %.0f MiB, worker %.0f MiB", n, len(up.body)>>10,
		float64(sc.Extra["gateway_peak_rss_bytes"].(int64))/(1<<20), float64(sc.Extra["worker_peak_rss_bytes"].(int64))/(1<<20))
	h.log("%s done: %s", sc.Name, sc.Note)
	return sc
}
