package worker

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// listEngine lists fixed models, or fails.
type listEngine struct {
	stubEngine
	ids  []string
	fail bool
}

func (e *listEngine) Models(context.Context) ([]api.Model, error) {
	if e.fail {
		return nil, errors.New("down")
	}
	out := make([]api.Model, len(e.ids))
	for i, id := range e.ids {
		out[i] = api.Model{ID: id, Capabilities: []string{api.CapTranscription}}
	}
	return out, nil
}

func TestModelAliases(t *testing.T) {
	whisper := &listEngine{ids: []string{"whisper-large-v3-turbo", "whisper-large-v3"}}
	other := &listEngine{ids: []string{"whisper-large-v3", "tts-1"}}
	tests := []struct {
		name    string
		aliases map[string]string
		listed  []string          // ids offered, in order
		local   map[string]string // id -> the engine's name it is served under
		meta    map[string]api.Model
	}{
		{"no aliases", nil,
			[]string{"whisper-large-v3-turbo", "whisper-large-v3", "tts-1"},
			map[string]string{"whisper-large-v3": "whisper-large-v3", "tts-1": "tts-1"}, nil},
		{"spec ids for local models", map[string]string{"stt-large-v3-turbo": "whisper-large-v3-turbo", "stt-large-v3": "whisper-large-v3"},
			// An aliased model is offered under its aliases only, and the
			// first engine with it serves it.
			[]string{"stt-large-v3-turbo", "stt-large-v3", "tts-1"},
			map[string]string{"stt-large-v3-turbo": "whisper-large-v3-turbo", "stt-large-v3": "whisper-large-v3"}, nil},
		{"two ids for one model", map[string]string{"b": "whisper-large-v3", "a": "whisper-large-v3"},
			[]string{"whisper-large-v3-turbo", "a", "b", "tts-1"},
			map[string]string{"a": "whisper-large-v3", "b": "whisper-large-v3"}, nil},
		{"an alias nobody has", map[string]string{"stt-large-v3": "missing"},
			[]string{"whisper-large-v3-turbo", "whisper-large-v3", "tts-1"}, nil, nil},
		{"metadata by the listed id", map[string]string{"stt-large-v3": "whisper-large-v3"},
			[]string{"whisper-large-v3-turbo", "stt-large-v3", "tts-1"}, nil,
			map[string]api.Model{"stt-large-v3": {ContextWindow: 448}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{whisper, other},
				Aliases: tt.aliases, ModelMeta: tt.meta})
			if err != nil {
				t.Fatal(err)
			}
			a.refreshModels(context.Background())
			var ids []string
			for _, m := range a.models {
				ids = append(ids, m.ID)
				if local := tt.aliases[m.ID]; local != "" && m.Local != local || local == "" && m.Local != "" {
					t.Errorf("%s lists local model %q", m.ID, m.Local)
				}
				if meta, ok := tt.meta[m.ID]; ok && m.ContextWindow != meta.ContextWindow {
					t.Errorf("%s did not get its metadata: %+v", m.ID, m)
				}
			}
			if !slices.Equal(ids, tt.listed) {
				t.Fatalf("listed %v, want %v", ids, tt.listed)
			}
			for id, local := range tt.local {
				eng, name := a.engineFor(id)
				if eng != whisper && eng != other || name != local {
					t.Errorf("%s is served as %q by %v, want %q", id, name, eng, local)
				}
			}
			if eng, _ := a.engineFor("missing"); eng != nil {
				t.Error("an unlisted id is served")
			}
		})
	}
}

// An engine that fails to list keeps serving what it listed before, under
// the same ids.
func TestModelsKeptWhenAnEngineFails(t *testing.T) {
	e := &listEngine{ids: []string{"whisper-large-v3"}}
	a, err := New(Config{Gateway: "http://gw", Token: "t", Name: "w", Engines: []engine.Engine{e},
		Aliases: map[string]string{"stt-large-v3": "whisper-large-v3"}})
	if err != nil {
		t.Fatal(err)
	}
	a.refreshModels(context.Background())
	e.fail = true
	a.refreshModels(context.Background())
	if eng, local := a.engineFor("stt-large-v3"); eng != e || local != "whisper-large-v3" || len(a.models) != 1 {
		t.Fatalf("after a failed listing: %v %q %v", eng, local, a.models)
	}
}
