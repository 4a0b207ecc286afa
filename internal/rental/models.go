package rental

import (
	"github.com/svc-dev/svc/internal/api"
)

// Variant is a rentable model variant with what installing it takes.
type Variant struct {
	api.Variant
	// ModelID is the rentable model the variant belongs to.
	ModelID string
	// Ollama is the name Ollama installs it under, for machines that
	// serve with Ollama.
	Ollama string
}

// Model is a rentable model and its variants.
type Model struct {
	api.RentableModel
	variants []Variant
}

func gb(v float64) *float64 { return &v }

// Models is the rentable model list: open-weight models at their usual
// quantisations, with the memory each needs. min_ram_gb is set for the
// variants too large for one GPU's memory that engines run with part of
// the weights in system memory.
func Models() []Model {
	type v struct {
		id, label, size, quant, ollama string
		vram, download                 float64
		ram                            *float64
	}
	def := func(id, name, publisher, size, defaultID string, vs ...v) Model {
		m := Model{RentableModel: api.RentableModel{ModelID: id, Name: name, Publisher: publisher, ParameterSize: size, DefaultVariantID: defaultID}}
		for _, x := range vs {
			av := api.Variant{VariantID: x.id, Label: x.label, ParameterSize: x.size, Quantization: x.quant,
				MinVRAMGB: x.vram, MinRAMGB: x.ram, DownloadGB: x.download}
			m.Variants = append(m.Variants, av)
			m.variants = append(m.variants, Variant{Variant: av, ModelID: id, Ollama: x.ollama})
		}
		return m
	}
	return []Model{
		def("qwen3-8b", "Qwen3 8B", "Alibaba Qwen", "8B", "qwen3-8b-q4",
			v{"qwen3-8b-q4", "Qwen3 8B Q4_K_M", "8B", "Q4_K_M", "qwen3:8b-q4_K_M", 8, 5.2, nil},
			v{"qwen3-8b-q8", "Qwen3 8B Q8_0", "8B", "Q8_0", "qwen3:8b-q8_0", 12, 8.9, nil},
			v{"qwen3-8b-fp16", "Qwen3 8B FP16", "8B", "FP16", "qwen3:8b-fp16", 20, 16.4, nil}),
		def("qwen3-32b", "Qwen3 32B", "Alibaba Qwen", "32B", "qwen3-32b-q4",
			v{"qwen3-32b-q4", "Qwen3 32B Q4_K_M", "32B", "Q4_K_M", "qwen3:32b-q4_K_M", 24, 20, nil},
			v{"qwen3-32b-q8", "Qwen3 32B Q8_0", "32B", "Q8_0", "qwen3:32b-q8_0", 40, 35, nil}),
		def("llama-3.3-70b", "Llama 3.3 70B Instruct", "Meta", "70B", "llama-3.3-70b-q4",
			v{"llama-3.3-70b-q4", "Llama 3.3 70B Q4_K_M", "70B", "Q4_K_M", "llama3.3:70b-instruct-q4_K_M", 48, 43, nil},
			v{"llama-3.3-70b-q8", "Llama 3.3 70B Q8_0", "70B", "Q8_0", "llama3.3:70b-instruct-q8_0", 80, 75, gb(96)}),
		def("gpt-oss-120b", "gpt-oss 120B", "OpenAI", "120B", "gpt-oss-120b-mxfp4",
			v{"gpt-oss-120b-mxfp4", "gpt-oss 120B MXFP4", "120B", "MXFP4", "gpt-oss:120b", 80, 65, gb(128)}),
		def("deepseek-r1-671b", "DeepSeek R1 671B", "DeepSeek", "671B", "deepseek-r1-671b-q4",
			v{"deepseek-r1-671b-q4", "DeepSeek R1 671B Q4_K_M", "671B", "Q4_K_M", "deepseek-r1:671b-q4_K_M", 80, 404, gb(512)}),
	}
}

// variantByID finds a variant in the rentable model list.
func variantByID(models []Model, id string) (Variant, bool) {
	for _, m := range models {
		for _, v := range m.variants {
			if v.VariantID == id {
				return v, true
			}
		}
	}
	return Variant{}, false
}
