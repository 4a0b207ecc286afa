package worker

import (
	"slices"
	"strings"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/moderation"
)

// knownGuards are the names engines give the guard models behind the
// moderation families, lower-cased: Ollama's tags, Hugging Face repository
// names as vLLM lists them, and llama-server's GGUF file names. A worker
// offers such a model under its family id without being told; any other
// model serves a family through --model-alias (guard-c always does: no
// small multimodal guard has a settled name).
func knownGuards() []struct{ name, id string } {
	return []struct{ name, id string }{
		{"llama-guard3:1b", "guard-a:1b"},
		{"llama-guard-3-1b", "guard-a:1b"},
		{"llama-guard3:8b", "guard-a:8b"},
		{"llama-guard3:latest", "guard-a:8b"},
		{"llama-guard-3-8b", "guard-a:8b"},
		{"qwen3guard-gen-0.6b", "guard-b:0.6b"},
		{"qwen3guard-gen:0.6b", "guard-b:0.6b"},
		{"qwen3guard-gen-4b", "guard-b:4b"},
		{"qwen3guard-gen:4b", "guard-b:4b"},
		{"qwen3guard-gen-8b", "guard-b:8b"},
		{"qwen3guard-gen:8b", "guard-b:8b"},
	}
}

// recogniseGuard names the moderation model an engine's model is, when
// its name says so: "meta-llama/Llama-Guard-3-1B" and
// "Llama-Guard-3-1B-Q8_0.gguf" are guard-a:1b.
func recogniseGuard(local string) (string, bool) {
	name := strings.ToLower(local)
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	for _, g := range knownGuards() {
		if strings.HasPrefix(name, g.name) {
			return g.id, true
		}
	}
	return "", false
}

// asGuard gives a model offered under a moderation family's id the
// capabilities the gateway routes checks by: moderation, and vision for a
// family that sees images.
func asGuard(m api.Model) api.Model {
	family, ok := moderation.Lookup(m.ID)
	if !ok {
		return m
	}
	caps := slices.Clone(m.Capabilities)
	if !slices.Contains(caps, api.CapModeration) {
		caps = append(caps, api.CapModeration)
	}
	if family.Images() && !slices.Contains(caps, api.CapVision) {
		caps = append(caps, api.CapVision)
	}
	m.Capabilities = caps
	return m
}
