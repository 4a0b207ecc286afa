package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
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
// engine names its own model; and the engine is asked for its own model,
// which an engine over HTTP (here svc sim behind the openai adapter) knows
// by that name only.
func TestAliasedModelRepliesNameTheAlias(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	startWorker(t, s.URL, s.tokenFile(), "aliased", "--engine", "sim=tps=0,ttft=0",
		"--model-alias", "my-chat=sim-chat", "--model-alias", "my-embed=sim-embed")
	startWorker(t, s.URL, s.tokenFile(), "aliased-http", "--engine", "openai="+startSim(t, "tps=0,ttft=0"),
		"--model-alias", "http-chat=sim-chat", "--model-alias", "http-embed=sim-embed")

	for _, names := range [][2]string{{"my-chat", "my-embed"}, {"http-chat", "http-embed"}} {
		chat, embed := names[0], names[1]
		r := s.do("POST", "/v1/chat/completions", `{"model":"`+chat+`","messages":[{"role":"user","content":"hi"}]}`, bearer(key))
		if r.Status != 200 || r.JSON(t)["model"] != chat {
			t.Fatalf("chat = %d %s", r.Status, r.Body)
		}
		r, events := rawStream(t, s, key, streamBody(chat, "hi\nsim: tokens=5", nil))
		if r.Status != 200 || len(events) < 5 {
			t.Fatalf("stream = %d %s", r.Status, r.Body)
		}
		for _, e := range events {
			if e == "[DONE]" {
				continue
			}
			var chunk map[string]any
			if err := json.Unmarshal([]byte(e), &chunk); err != nil || chunk["model"] != chat {
				t.Fatalf("chunk %s", e)
			}
		}
		r = s.do("POST", "/v1/embeddings", `{"model":"`+embed+`","input":"hi"}`, bearer(key))
		if r.Status != 200 || r.JSON(t)["model"] != embed {
			t.Fatalf("embeddings = %d %s", r.Status, r.Body)
		}
	}
}

// Requests the gateway refuses itself are in the usage log with their
// status and message, and null worker fields; a request with an unknown
// key writes nothing.
func TestRefusedRequestsHaveRows(t *testing.T) {
	s, key := gateway(t)
	cases := []struct {
		path, body, ctype string
		status            int
		model             string
	}{
		{"/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"robot","content":"hi"}]}`, "application/json", 422, "sim-chat"},
		{"/v1/embeddings", `{"model":"sim-embed"}`, "application/json", 422, "sim-embed"},
		{"/v1/chat/completions", `{"svc_e2e":"1","model":"sim-chat"}`, "application/vnd.svc.e2e+json", 400, "sim-chat"},
	}
	for _, c := range cases {
		r := s.do("POST", c.path, c.body, bearer(key), header{"Content-Type", c.ctype})
		if r.Status != c.status {
			t.Fatalf("%s %s = %d %s", c.path, c.body, r.Status, r.Body)
		}
		row := waitRow(t, s, key, r.Header.Get("X-Request-Id"))
		if row["status_code"] != float64(c.status) || row["error_message"] == nil || row["model"] != c.model ||
			row["worker_id"] != nil || row["worker_name"] != nil || row["attempts"] != 0.0 {
			t.Errorf("%s row %v", c.body, row)
		}
	}
	// Unsupported audio, read from the content: a row naming the model.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("model", "sim-stt")
	fw, _ := mw.CreateFormFile("file", "clip.wav")
	_, _ = fw.Write([]byte("this is not audio at all, just text pretending"))
	_ = mw.Close()
	r := s.do("POST", "/v1/audio/transcriptions", form.String(), bearer(key), header{"Content-Type", mw.FormDataContentType()})
	if r.Status != 400 {
		t.Fatalf("not audio = %d %s", r.Status, r.Body)
	}
	if row := waitRow(t, s, key, r.Header.Get("X-Request-Id")); row["model"] != "sim-stt" || row["request_type"] != "audio" ||
		row["status_code"] != 400.0 || row["audio_format"] != nil || row["worker_id"] != nil {
		t.Errorf("unsupported audio row %v", row)
	}
	// An organisation that requires encryption: the 403 has its row.
	if r := s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e": true}`); r.Status != 200 {
		t.Fatalf("settings = %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`, bearer(key))
	if r.Status != 403 {
		t.Fatalf("clear under require_e2e = %d %s", r.Status, r.Body)
	}
	if row := waitRow(t, s, key, r.Header.Get("X-Request-Id")); row["status_code"] != 403.0 || row["worker_id"] != nil {
		t.Errorf("e2e_required row %v", row)
	}
	// A key the gateway does not know writes nothing.
	r = s.do("POST", "/v1/chat/completions", `{"model":"sim-chat"}`, bearer("sk-unknown"))
	if r.Status != 401 {
		t.Fatalf("unknown key = %d", r.Status)
	}
	var rows []map[string]any
	_ = json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=1000", "", bearer(key)).Body, &rows)
	for _, row := range rows {
		if row["id"] == r.Header.Get("X-Request-Id") {
			t.Errorf("a row for an unknown key: %v", row)
		}
	}
}
