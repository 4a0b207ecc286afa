package e2e

import (
	"bytes"
	"context"
	"encoding/json"
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

// A model offered under an alias is answered under the id the client
// asked for, in a whole reply and in every chunk of a stream, though the
// engine names its own model.
func TestAliasedModelRepliesNameTheAlias(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "aliased", "--engine", "sim=tps=0,ttft=0",
		"--model-alias", "my-chat=sim-chat", "--model-alias", "my-embed=sim-embed")

	r := s.do("POST", "/v1/chat/completions", `{"model":"my-chat","messages":[{"role":"user","content":"hi"}]}`, bearer(key))
	if r.Status != 200 || r.JSON(t)["model"] != "my-chat" {
		t.Fatalf("chat = %d %s", r.Status, r.Body)
	}
	r, events := rawStream(t, s, key, streamBody("my-chat", "hi\nsim: tokens=5", nil))
	if r.Status != 200 || len(events) < 5 {
		t.Fatalf("stream = %d %s", r.Status, r.Body)
	}
	for _, e := range events {
		if e == "[DONE]" {
			continue
		}
		var chunk map[string]any
		if err := json.Unmarshal([]byte(e), &chunk); err != nil || chunk["model"] != "my-chat" {
			t.Fatalf("chunk %s", e)
		}
	}
	r = s.do("POST", "/v1/embeddings", `{"model":"my-embed","input":"hi"}`, bearer(key))
	if r.Status != 200 || r.JSON(t)["model"] != "my-embed" {
		t.Fatalf("embeddings = %d %s", r.Status, r.Body)
	}
}
