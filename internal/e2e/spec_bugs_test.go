package e2e

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// A sealed transcription's usage row has the audio's format and length,
// read by the worker from the content (not the file's name), though the
// gateway never sees the upload.
func TestPrivateTranscriptionRowHasItsAudio(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "vault", "--engine", "sim=tps=0,ttft=0,rtf=0")
	client := privateClient(s, key, http.DefaultTransport)
	var resp *http.Response
	_, err := client.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
		File: openai.File(bytes.NewReader(tone(t, 2, 16000)), "clip.mp3", "audio/mpeg"), Model: "sim-stt"},
		option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	row := waitRow(t, s, key, resp.Header.Get("X-Request-Id"))
	if row["status_code"] != 200.0 || row["audio_format"] != "wav" || row["audio_seconds"] != 2.0 || row["request_type"] != "audio" {
		t.Fatalf("sealed transcription row %v", row)
	}
}
