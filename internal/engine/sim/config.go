package sim

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Config sets the simulator's speed and the models it serves. Zero
// durations and a zero rate mean "no delay", so a zero Config is fast; use
// DefaultConfig for the realistic defaults.
type Config struct {
	// TokensPerSecond is the decode rate; 0 emits as fast as possible.
	TokensPerSecond float64
	// TTFT is the time to first token, standing for prompt processing.
	TTFT time.Duration
	// Latency is a fixed delay added to every request before any output.
	Latency time.Duration
	// LoadTime is how long a cold model takes to load.
	LoadTime time.Duration
	// AudioRTF is the real-time factor of audio work: transcribing or
	// synthesising a clip takes AudioRTF times its duration (0.02 turns a
	// minute of audio around in 1.2 s); 0 is no delay.
	AudioRTF float64
	// PullTime is how long Engine.Pull takes to install a model; 0 is
	// at once.
	PullTime time.Duration
	// Models are the models served; DefaultModels when empty.
	Models []ModelSpec
	// LlamaTimings adds a llama.cpp-style timings object to HTTP replies.
	LlamaTimings bool
	// ReasoningField names the reasoning field of HTTP replies; default
	// "reasoning_content" (llama.cpp), "reasoning" imitates vLLM.
	ReasoningField string
	// Incomplete names models listed as not fully installed (a file
	// missing): image generation on them fails with a 409, and the
	// gateway, told by the listing, sends them none.
	Incomplete []string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// ID makes a completion's id; when nil, a fresh random one for each
	// request, as an engine's is, though a prompt's text is the same each
	// time: clients key logs and caches by it.
	ID func() string
	// Sleep waits d or until ctx is done; a context-aware timer when nil.
	// Tests inject a no-op so that nothing sleeps.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Defaults used by DefaultConfig and ParseOptions.
const (
	DefaultTokensPerSecond = 100
	DefaultTTFT            = 30 * time.Millisecond
	DefaultLoadTime        = 1500 * time.Millisecond
	// DefaultAudioRTF is about what a whisper-large-v3-turbo or a Kokoro
	// on a datacenter GPU does.
	DefaultAudioRTF = 0.02
	// DefaultPullTime is long enough for an install's progress to show,
	// short enough not to hold up a demo.
	DefaultPullTime       = 3 * time.Second
	defaultReasoningField = "reasoning_content"
)

// DefaultConfig is the configuration of a plain `--engine sim`.
func DefaultConfig() Config {
	return Config{
		TokensPerSecond: DefaultTokensPerSecond,
		TTFT:            DefaultTTFT,
		LoadTime:        DefaultLoadTime,
		AudioRTF:        DefaultAudioRTF,
		PullTime:        DefaultPullTime,
	}
}

// withDefaults fills what must never be empty. Rates and durations are left
// alone: zero is a meaningful "as fast as possible".
func (c Config) withDefaults() Config {
	if len(c.Models) == 0 {
		c.Models = DefaultModels()
	}
	if c.ReasoningField == "" {
		c.ReasoningField = defaultReasoningField
	}
	if c.ID == nil {
		c.ID = completionID
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	return c
}

// sleep waits d, returning early with ctx's error when ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ParseOptions reads the options of `--engine sim=...`, a comma-separated
// list such as "tps=200,ttft=20ms,latency=0,load=1500ms,timings=1", on top
// of DefaultConfig. Keys: tps, ttft, latency, load, rtf (AudioRTF), pull
// (PullTime), timings, reasoning_field and incomplete (a model id, once
// for each model listed as not fully installed). Durations take Go
// syntax; a bare number is milliseconds.
func ParseOptions(s string) (Config, error) {
	cfg := DefaultConfig()
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return Config{}, fmt.Errorf("sim option %q: want key=value", item)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		var err error
		switch key {
		case "tps":
			cfg.TokensPerSecond, err = parseRate(val)
		case "ttft":
			cfg.TTFT, err = parseDuration(val)
		case "latency":
			cfg.Latency, err = parseDuration(val)
		case "load":
			cfg.LoadTime, err = parseDuration(val)
		case "rtf":
			cfg.AudioRTF, err = parseRate(val)
		case "pull":
			cfg.PullTime, err = parseDuration(val)
		case "timings":
			cfg.LlamaTimings, err = parseBool(val)
		case "reasoning_field":
			if val == "" {
				err = fmt.Errorf("empty field name")
			}
			cfg.ReasoningField = val
		case "incomplete":
			if val == "" {
				err = fmt.Errorf("empty model id")
			}
			cfg.Incomplete = append(cfg.Incomplete, val)
		default:
			return Config{}, fmt.Errorf("sim option %q: unknown key (want tps, ttft, latency, load, rtf, pull, timings, reasoning_field or incomplete)", key)
		}
		if err != nil {
			return Config{}, fmt.Errorf("sim option %s: %w", key, err)
		}
	}
	return cfg, nil
}

// parseRate reads a non-negative, finite rate: tokens per second, or a
// real-time factor.
func parseRate(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("rate %q out of range", s)
	}
	return f, nil
}

// parseDuration reads a non-negative Go duration, or a bare number of
// milliseconds (so "latency=0" and "ttft=20" work).
func parseDuration(s string) (time.Duration, error) {
	if ms, err := strconv.ParseFloat(s, 64); err == nil {
		if ms < 0 || math.IsNaN(ms) || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration: %q", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// parseBool reads 1/0/true/false/yes/no/on/off.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %q", s)
}

// ModelSpec is one simulated model: its listing plus how it behaves.
type ModelSpec struct {
	// Model is what the models list shows. Engine and Simulated are set
	// by the simulator, Loaded from the model's state.
	api.Model
	// ReasoningTokens is the thinking length at medium effort (low is half,
	// high double); only for models with api.CapReasoning.
	ReasoningTokens int
	// Speculative models report a draft acceptance rate.
	Speculative bool
	// Cold models must be loaded (LoadTime) on first use and again after
	// ColdIdle without requests.
	Cold bool
	// Dimensions is the embedding size of embedding models.
	Dimensions int
	// Guard makes the model a safety classifier: it answers every chat or
	// completion with a verdict in this format instead of generated text
	// (guard.go).
	Guard GuardFormat
	// GuardLacks are labels of the guard's format that this model does
	// not know, as the 1B Llama Guard 3 has no S14: the keyword table
	// never gives them, though a labels directive still can.
	GuardLacks []string
}

// speechVoices are the voices of sim-tts: OpenAI's names, so that clients
// written for OpenAI's API work against the simulator unchanged.
func speechVoices() []string {
	return []string{"alloy", "ash", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer"}
}

// ColdIdle is how long a cold model stays loaded without requests.
const ColdIdle = 5 * time.Minute

// DefaultModels is the model set served when Config.Models is empty.
func DefaultModels() []ModelSpec {
	on, off := true, false
	return []ModelSpec{
		{Model: api.Model{
			ID:               "sim-chat",
			Capabilities:     []string{api.CapChat, api.CapTools},
			ContextWindow:    8192,
			SamplingDefaults: map[string]float64{"temperature": 0.7, "top_p": 0.9},
		}},
		{Model: api.Model{
			ID:              "sim-reasoner",
			Capabilities:    []string{api.CapChat, api.CapReasoning, api.CapThinkingBudget, api.CapTools},
			ContextWindow:   32768,
			DefaultThinking: &on,
		}, ReasoningTokens: 24},
		{Model: api.Model{
			ID:              "sim-small",
			Capabilities:    []string{api.CapChat, api.CapReasoning},
			ContextWindow:   4096,
			DefaultThinking: &off,
		}, ReasoningTokens: 24},
		{Model: api.Model{
			ID:            "sim-spec",
			Capabilities:  []string{api.CapChat},
			ContextWindow: 8192,
		}, Speculative: true},
		{Model: api.Model{
			ID:            "sim-cold",
			Capabilities:  []string{api.CapChat},
			ContextWindow: 8192,
		}, Cold: true},
		{Model: api.Model{
			// A long-context model: its window is wider than the default
			// output cap, so that cap is what stops an unbounded reply.
			ID:            "sim-long",
			Capabilities:  []string{api.CapChat},
			ContextWindow: 131072,
		}},
		// Guards are chat models to an engine; the worker adds the
		// moderation capability when it recognises one (guard.go).
		guardSpec("guard-a:1b", LlamaGuard, "S14"),
		guardSpec("guard-a:8b", LlamaGuard),
		guardSpec("guard-b:0.6b", QwenGuard),
		guardSpec("guard-b:4b", QwenGuard),
		guardSpec("guard-b:8b", QwenGuard),
		guardSpec("guard-c:4b", LlavaGuard),
		guardSpec("guard-c:0.8b", LlavaGuard),
		{Model: api.Model{
			ID:           "sim-stt",
			Capabilities: []string{api.CapTranscription},
		}},
		{Model: api.Model{
			ID:           "sim-tts",
			Capabilities: []string{api.CapSpeech},
			Voices:       speechVoices(),
			DefaultVoice: "alloy",
		}},
		{Model: api.Model{
			ID:            "sim-embed",
			Capabilities:  []string{api.CapEmbeddings},
			ContextWindow: 512,
		}, Dimensions: 256},
		{Model: api.Model{
			ID:            "sim-rerank",
			Capabilities:  []string{api.CapRerank},
			ContextWindow: 512,
		}},
		{Model: api.Model{
			ID:           "sim-image",
			Capabilities: []string{api.CapImageGeneration},
		}},
	}
}
