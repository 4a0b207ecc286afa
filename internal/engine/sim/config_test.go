package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Config
		wantErr bool
	}{
		{name: "empty is defaults", in: "", want: DefaultConfig()},
		{name: "full", in: "tps=200,ttft=20ms,latency=0,load=1500ms,pull=10s,timings=1", want: Config{
			TokensPerSecond: 200, TTFT: 20 * time.Millisecond, LoadTime: 1500 * time.Millisecond, LlamaTimings: true, AudioRTF: 0.02,
			PullTime: 10 * time.Second,
		}},
		{name: "bare numbers are milliseconds", in: "ttft=5, latency=2.5", want: Config{
			TokensPerSecond: 100, TTFT: 5 * time.Millisecond, Latency: 2500 * time.Microsecond, LoadTime: 1500 * time.Millisecond, AudioRTF: 0.02,
			PullTime: DefaultPullTime,
		}},
		{name: "fast", in: "tps=0,ttft=0,load=0,rtf=0,pull=0", want: Config{}},
		{name: "audio pace", in: "rtf=0.5", want: Config{
			TokensPerSecond: 100, TTFT: 30 * time.Millisecond, LoadTime: 1500 * time.Millisecond, AudioRTF: 0.5,
			PullTime: DefaultPullTime,
		}},
		{name: "reasoning field", in: "reasoning_field=reasoning,timings=off", want: Config{
			TokensPerSecond: 100, TTFT: 30 * time.Millisecond, LoadTime: 1500 * time.Millisecond, ReasoningField: "reasoning", AudioRTF: 0.02,
			PullTime: DefaultPullTime,
		}},
		{name: "trailing comma", in: "tps=5,", want: Config{TokensPerSecond: 5, TTFT: 30 * time.Millisecond, LoadTime: 1500 * time.Millisecond, AudioRTF: 0.02,
			PullTime: DefaultPullTime}},
		{name: "unknown key", in: "speed=3", wantErr: true},
		{name: "no value", in: "tps", wantErr: true},
		{name: "negative rate", in: "tps=-1", wantErr: true},
		{name: "negative rtf", in: "rtf=-0.1", wantErr: true},
		{name: "nan rate", in: "tps=NaN", wantErr: true},
		{name: "bad duration", in: "ttft=soon", wantErr: true},
		{name: "negative duration", in: "latency=-5ms", wantErr: true},
		{name: "bad pull time", in: "pull=later", wantErr: true},
		{name: "bad bool", in: "timings=maybe", wantErr: true},
		{name: "empty reasoning field", in: "reasoning_field=", wantErr: true},
		{name: "incomplete models", in: "tps=5,incomplete=sim-image,incomplete=sim-chat", want: Config{TokensPerSecond: 5, TTFT: 30 * time.Millisecond,
			LoadTime: 1500 * time.Millisecond, AudioRTF: 0.02, PullTime: DefaultPullTime, Incomplete: []string{"sim-image", "sim-chat"}}},
		{name: "empty incomplete", in: "incomplete=", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOptions(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseOptions(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.TokensPerSecond != tt.want.TokensPerSecond || got.TTFT != tt.want.TTFT || got.Latency != tt.want.Latency ||
				got.LoadTime != tt.want.LoadTime || got.LlamaTimings != tt.want.LlamaTimings || got.ReasoningField != tt.want.ReasoningField ||
				got.AudioRTF != tt.want.AudioRTF || got.PullTime != tt.want.PullTime || !slices.Equal(got.Incomplete, tt.want.Incomplete) {
				t.Fatalf("ParseOptions(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDefaultModels(t *testing.T) {
	e := New(Config{})
	models, err := e.Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		ctx      int
		caps     []string
		thinking *bool
	}{
		"sim-chat":     {8192, []string{"chat", "tools"}, nil},
		"sim-reasoner": {32768, []string{"chat", "reasoning", "thinking_budget", "tools"}, ptr(true)},
		"sim-small":    {4096, []string{"chat", "reasoning"}, ptr(false)},
		"sim-spec":     {8192, []string{"chat"}, nil},
		"sim-cold":     {8192, []string{"chat"}, nil},
		"sim-long":     {131072, []string{"chat"}, nil},
		"sim-embed":    {512, []string{"embeddings"}, nil},
		"sim-rerank":   {512, []string{"rerank"}, nil},
		"sim-image":    {0, []string{"image_generation"}, nil},
		"sim-stt":      {0, []string{"transcription"}, nil},
		"sim-tts":      {0, []string{"speech"}, nil},
		"guard-a:1b":   {8192, []string{"chat"}, nil},
		"guard-a:8b":   {8192, []string{"chat"}, nil},
		"guard-b:0.6b": {8192, []string{"chat"}, nil},
		"guard-b:4b":   {8192, []string{"chat"}, nil},
		"guard-b:8b":   {8192, []string{"chat"}, nil},
		"guard-c:4b":   {8192, []string{"chat", "vision"}, nil},
		"guard-c:0.8b": {8192, []string{"chat", "vision"}, nil},
	}
	if len(models) != len(want) {
		t.Fatalf("got %d models, want %d", len(models), len(want))
	}
	for _, m := range models {
		w, ok := want[m.ID]
		if !ok {
			t.Fatalf("unexpected model %q", m.ID)
		}
		if m.ContextWindow != w.ctx || !slices.Equal(m.Capabilities, w.caps) || m.Engine != "sim" || !m.Simulated || m.Loaded == nil {
			t.Errorf("%s = %+v", m.ID, m)
		}
		if (m.DefaultThinking == nil) != (w.thinking == nil) || (m.DefaultThinking != nil && *m.DefaultThinking != *w.thinking) {
			t.Errorf("%s default_thinking = %v, want %v", m.ID, m.DefaultThinking, w.thinking)
		}
	}
	if models[0].SamplingDefaults["temperature"] != 0.7 || models[0].SamplingDefaults["top_p"] != 0.9 {
		t.Errorf("sim-chat sampling defaults = %v", models[0].SamplingDefaults)
	}
	tts := models[slices.IndexFunc(models, func(m api.Model) bool { return m.ID == "sim-tts" })]
	if !slices.Equal(tts.Voices, []string{"alloy", "ash", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer"}) || tts.DefaultVoice != "alloy" {
		t.Errorf("sim-tts voices %v, default %q", tts.Voices, tts.DefaultVoice)
	}
	// The listing is a copy: changing it must not change the engine.
	models[0].Capabilities[0] = "changed"
	tts.Voices[0] = "changed"
	again, _ := e.Models(t.Context())
	if again[0].Capabilities[0] != "chat" || e.sim.models.byID["sim-tts"].spec.Voices[0] != "alloy" {
		t.Fatal("Models returned the engine's own slice")
	}
	if e.Kind() != "sim" || e.Info().Kind != "sim" || !e.Info().Simulated {
		t.Fatalf("Kind/Info = %q %+v", e.Kind(), e.Info())
	}
}

func ptr[T any](v T) *T { return &v }
