package openai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/sim"
)

// A recorded-style answer of stable-diffusion.cpp's sd-server.
const sdImages = `{"created":1736000000,"data":[{"b64_json":"iVBORw0KGgo="}],"output_format":"png"}`

func TestImages(t *testing.T) {
	const req = `{"model":"flux","prompt":"a fox","n":1,"response_format":"b64_json","seed":7}`
	tests := []struct {
		name   string
		status int
		answer string
		want   int
	}{
		{"b64_json", 200, sdImages, 200},
		{"urls", 200, `{"created":1,"data":[{"url":"https://engine/1.png"}]}`, 502},
		{"no data", 200, `{"created":1}`, 502},
		{"an error as 200", 200, `{"error":{"message":"the safety checker refused","type":"invalid_request_error","code":400}}`, 400},
		{"no route", 404, `{"detail":"Not Found"}`, 501},
		{"llama-server without the route", 404, `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`, 501},
		{"no model", 404, vllmNotFound, 404},
		{"out of memory", 500, vllmOOM, 507},
		{"refused", 400, `{"error":{"message":"size must be a multiple of 64","type":"invalid_request_error"}}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"/v1/images/generations": jsonHandler(tt.status, tt.answer)})
			var s sink
			r := newEngine(t, f.URL).Serve(context.Background(), &engine.Request{Kind: api.KindImages, Model: "flux-local", Body: []byte(req)}, &s)
			wantStatus(t, r, tt.want)
			var sent map[string]any
			if err := json.Unmarshal(f.last(t, "/v1/images/generations").Body, &sent); err != nil || sent["model"] != "flux-local" ||
				sent["seed"] != 7.0 || sent["response_format"] != "b64_json" || sent["prompt"] != "a fox" {
				t.Fatalf("sent %v, %v", sent, err)
			}
			if tt.want != 200 {
				if s.body != nil {
					t.Fatal("error body forwarded")
				}
				if tt.want == 501 && r.Error.Type != api.TypeNotSupported {
					t.Fatalf("error %+v", r.Error)
				}
				return
			}
			if string(s.body) != tt.answer || r.Usage != nil {
				t.Fatalf("answer %s, usage %+v", s.body, r.Usage)
			}
		})
	}
}

func TestSimulatorImages(t *testing.T) {
	srv := httptest.NewServer(sim.NewHandler(simConfig()))
	t.Cleanup(srv.Close)
	req := &engine.Request{Kind: api.KindImages, Model: "sim-image",
		Body: []byte(`{"model":"sim-image","prompt":"a fox","n":2,"size":"128x64","response_format":"b64_json"}`)}
	var s sink
	wantStatus(t, newEngine(t, srv.URL).Serve(t.Context(), req, &s), 200)
	var got api.ImagesResponse
	if err := json.Unmarshal(s.body, &got); err != nil || len(got.Data) != 2 {
		t.Fatalf("%.200s: %v", s.body, err)
	}
	b, _ := base64.StdEncoding.DecodeString(got.Data[1].B64JSON)
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 128 || img.Bounds().Dy() != 64 {
		t.Fatalf("image %v, %v", img, err)
	}
	var inProcess api.ImagesResponse
	if json.Unmarshal(direct(t, req), &inProcess) != nil || inProcess.Data[1].B64JSON != got.Data[1].B64JSON {
		t.Fatal("the HTTP face draws other images than the simulator in process")
	}
}
