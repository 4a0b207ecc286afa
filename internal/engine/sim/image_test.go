package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// decodeImages reads an images answer into its PNGs, checking each is
// labelled simulated.
func decodeImages(t *testing.T, body []byte) ([][]byte, api.ImagesResponse) {
	t.Helper()
	var got api.ImagesResponse
	if err := json.Unmarshal(body, &got); err != nil || got.Created == 0 {
		t.Fatalf("%.200s: %v", body, err)
	}
	var out [][]byte
	for i, d := range got.Data {
		b, err := base64.StdEncoding.DecodeString(d.B64JSON)
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		if !bytes.Contains(b, []byte("tEXtSoftware\x00svc simulator: a simulated image")) {
			t.Fatalf("image %d is not labelled simulated", i)
		}
		out = append(out, b)
	}
	return out, got
}

func TestImages(t *testing.T) {
	cfg, _ := testConfig()
	e := New(cfg)
	tests := []struct {
		name    string
		body    string
		n, w, h int
		status  int
		message string
	}{
		{"default", `{"model":"sim-image","prompt":"a red fox"}`, 1, 1024, 1024, 200, ""},
		{"several small", `{"model":"sim-image","prompt":"a red fox","n":3,"size":"256x256"}`, 3, 256, 256, 200, ""},
		{"wide", `{"model":"sim-image","prompt":"a red fox","size":"512x128"}`, 1, 512, 128, 200, ""},
		{"capped, its shape kept", `{"model":"sim-image","prompt":"a red fox","size":"4096x2048"}`, 1, 1024, 512, 200, ""},
		{"url", `{"model":"sim-image","prompt":"a red fox","response_format":"url"}`, 0, 0, 0, 400, "b64_json"},
		{"no prompt", `{"model":"sim-image"}`, 0, 0, 0, 400, "prompt"},
		{"chat model", `{"model":"sim-chat","prompt":"a red fox"}`, 0, 0, 0, 400, "/v1/chat/completions"},
		{"fail directive", `{"model":"sim-image","prompt":"fox\nsim: fail=507"}`, 0, 0, 0, 507, "out of memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, s := serve(t, e, api.KindImages, false, []byte(tt.body))
			if res.Status != tt.status {
				t.Fatalf("status %d %+v", res.Status, res.Error)
			}
			if tt.status != 200 {
				if !strings.Contains(res.Error.Message, tt.message) {
					t.Fatalf("message %q", res.Error.Message)
				}
				return
			}
			pics, _ := decodeImages(t, s.body)
			if len(pics) != tt.n {
				t.Fatalf("%d images, want %d", len(pics), tt.n)
			}
			for i, p := range pics {
				img, err := png.Decode(bytes.NewReader(p))
				if err != nil {
					t.Fatalf("image %d: %v", i, err)
				}
				if b := img.Bounds(); b.Dx() != tt.w || b.Dy() != tt.h {
					t.Fatalf("image %d is %v, want %dx%d", i, b, tt.w, tt.h)
				}
				if i > 0 && bytes.Equal(p, pics[i-1]) {
					t.Fatalf("images %d and %d are the same", i-1, i)
				}
			}
		})
	}
	// The same request draws the same images; another prompt or seed
	// others.
	draw := func(body string) []byte {
		_, s := serve(t, e, api.KindImages, false, []byte(body))
		pics, _ := decodeImages(t, s.body)
		return pics[0]
	}
	a := draw(`{"model":"sim-image","prompt":"a red fox","size":"64x64"}`)
	if !bytes.Equal(a, draw(`{"model":"sim-image","prompt":"a red fox","size":"64x64"}`)) ||
		bytes.Equal(a, draw(`{"model":"sim-image","prompt":"a blue fox","size":"64x64"}`)) ||
		bytes.Equal(a, draw(`{"model":"sim-image","prompt":"a red fox","size":"64x64","seed":3}`)) {
		t.Fatal("images are not drawn from the request alone")
	}
}

// A model listed as not fully installed says so in its listing, and
// refuses to draw with the spec's 409.
func TestIncompleteImageModel(t *testing.T) {
	cfg, _ := testConfig()
	cfg.Incomplete = []string{"sim-image"}
	e := New(cfg)
	models, _ := e.Models(t.Context())
	for _, m := range models {
		if (m.Incomplete != nil) != (m.ID == "sim-image") {
			t.Fatalf("%s incomplete %+v", m.ID, m.Incomplete)
		}
		if m.ID == "sim-image" {
			m.Incomplete.Missing[0] = "changed"
		}
	}
	res, _ := serve(t, e, api.KindImages, false, []byte(`{"model":"sim-image","prompt":"a fox"}`))
	if res.Status != http.StatusConflict || res.Error.Type != api.TypeConflict ||
		res.Error.Message != "model sim-image is not fully installed: vae/diffusion_pytorch_model.safetensors missing" {
		t.Fatalf("%d %+v", res.Status, res.Error)
	}
}

// The HTTP face answers as an OpenAI images server does.
func TestHTTPImages(t *testing.T) {
	cfg, _ := testConfig()
	srv := httptest.NewServer(NewHandler(cfg))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/images/generations", "application/json",
		strings.NewReader(`{"model":"sim-image","prompt":"a fox","n":2,"size":"128x128"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body.Bytes())
	}
	if pics, _ := decodeImages(t, body.Bytes()); len(pics) != 2 {
		t.Fatalf("%d images", len(pics))
	}
}

func BenchmarkDrawImage(b *testing.B) {
	sd := newSeed("sim-image", []byte("a red fox"), nil)
	for i := 0; b.Loop(); i++ {
		if _, err := drawImage(sd, i, 1024, 1024); err != nil {
			b.Fatal(err)
		}
	}
}
