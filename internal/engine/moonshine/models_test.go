package moonshine

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

func TestModels(t *testing.T) {
	t.Parallel()
	for _, size := range []string{"", "base", "tiny"} {
		t.Run("size "+size, func(t *testing.T) {
			t.Parallel()
			e, dir := fakeEngine(t, startOK, size)
			want := "moonshine-base"
			if size == "tiny" {
				want = "moonshine-tiny"
			}
			check := func(loaded bool) {
				t.Helper()
				ms, err := e.Models(context.Background())
				if err != nil {
					t.Fatalf("Models: %v", err)
				}
				if len(ms) != 1 {
					t.Fatalf("Models = %+v, want one", ms)
				}
				m := ms[0]
				if m.ID != want || m.Engine != "moonshine" || !slices.Equal(m.Capabilities, []string{api.CapTranscription}) ||
					m.Loaded == nil || *m.Loaded != loaded || m.Simulated {
					t.Errorf("model = %+v, want %s loaded %v", m, want, loaded)
				}
			}
			check(false)
			req := transcription(t, api.TranscriptionParams{}, clip(t, 16000, 1, doAnswer))
			req.Model = want
			if res, _ := serve(t, context.Background(), e, req); res.Status != http.StatusOK {
				t.Fatalf("%d %+v", res.Status, res.Error)
			}
			check(true)
			args, _ := os.ReadFile(filepath.Join(dir, "starts"))
			if !strings.Contains(string(args), "--size "+strings.TrimPrefix(want, "moonshine-")) {
				t.Errorf("runner arguments %q", args)
			}
			if info := e.Info(); info.Kind != "moonshine" || info.Simulated {
				t.Errorf("Info = %+v", info)
			}
		})
	}
}

func TestModelsBrokenInstall(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		node   string
		break_ func(dir string) error
		errHas string
	}{{
		name:   "no such directory",
		node:   self,
		break_: os.RemoveAll,
		errHas: "runner.mjs: no such file",
	}, {
		name: "model missing",
		node: self,
		break_: func(dir string) error {
			return os.Remove(filepath.Join(dir, "models/base/quantized/decoder_model_merged.onnx"))
		},
		errHas: "decoder_model_merged.onnx: no such file",
	}, {
		name: "model empty",
		node: self,
		break_: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "models/silero_vad_v5.onnx"), nil, 0o644)
		},
		errHas: "models/silero_vad_v5.onnx is empty",
	}, {
		name:   "no node",
		node:   filepath.Join(t.TempDir(), "node"),
		break_: func(string) error { return nil },
		errHas: "moonshine needs node",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := fakeInstall(t, startOK)
			if err := tt.break_(dir); err != nil {
				t.Fatal(err)
			}
			e, err := New(Config{Dir: dir, Node: tt.node})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			if ms, err := e.Models(context.Background()); err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("Models = %+v, %v; want an error with %q", ms, err, tt.errHas)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{},
		{Dir: "/opt/moonshine", Size: "large"},
		{Dir: "/opt/moonshine", Threads: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
