package lambda

import (
	"regexp"
	"strconv"
	"strings"
)

// gpu is what the catalogue needs to know of one GPU model.
type gpu struct {
	id, label, model, generation string
	vramGB                       float64
	// arm64 marks GPUs that only come in ARM machines (Grace Hopper): the
	// boot script installs a linux/amd64 svc, which cannot run there.
	arm64 bool
}

// gpus is keyed by the model token of Lambda's instance type names
// (gpu_<count>x_<model>[_<variant>]). A model Lambda sells in more than
// one memory size has one entry per size, keyed "<model>/<GB>".
var gpus = map[string]gpu{
	"h100":    {"h100-80gb", "H100 80GB", "H100", "Hopper", 80, false},
	"h200":    {"h200-141gb", "H200 141GB", "H200", "Hopper", 141, false},
	"gh200":   {"gh200-96gb", "GH200 96GB", "GH200", "Hopper", 96, true},
	"b200":    {"b200-180gb", "B200 180GB", "B200", "Blackwell", 180, false},
	"a100/40": {"a100-40gb", "A100 40GB", "A100", "Ampere", 40, false},
	"a100/80": {"a100-80gb", "A100 80GB", "A100", "Ampere", 80, false},
	"a10":     {"a10-24gb", "A10 24GB", "A10", "Ampere", 24, false},
	"a6000":   {"rtx-a6000-48gb", "RTX A6000 48GB", "RTX A6000", "Ampere", 48, false},
	"rtx6000": {"rtx-6000-24gb", "RTX 6000 24GB", "Quadro RTX 6000", "Turing", 24, false},
	"v100":    {"v100-16gb", "V100 16GB", "Tesla V100", "Volta", 16, false},
}

// sizedModels are the model tokens whose memory size has to be read off
// the name ("gpu_8x_a100_80gb_sxm4") or the GPU description
// ("A100 (80 GB SXM4)"), with the size Lambda means when it says none.
var sizedModels = map[string]int{"a100": 40}

var (
	typeName = regexp.MustCompile(`^gpu_(\d+)x_([a-z0-9]+)((?:_[a-z0-9]+)*)$`)
	nameGB   = regexp.MustCompile(`^(\d+)gb$`)
	descGB   = regexp.MustCompile(`(\d+)\s*GB`)
)

// machine is an instance type as the catalogue sees it.
type machine struct {
	gpu
	count int
}

// machineFor maps a Lambda instance type to its GPU and count. The count
// is the API's specs.gpus when it gives one (the name's "8x" otherwise);
// ok is false for types that are not GPU machines or whose GPU the table
// does not know.
func machineFor(name, gpuDescription string, specGPUs int) (machine, bool) {
	m := typeName.FindStringSubmatch(name)
	if m == nil {
		return machine{}, false
	}
	count, err := strconv.Atoi(m[1])
	if err != nil || count <= 0 {
		return machine{}, false
	}
	if specGPUs > 0 {
		count = specGPUs
	}
	key := m[2]
	if def, sized := sizedModels[key]; sized {
		gb := def
		for _, part := range strings.Split(strings.TrimPrefix(m[3], "_"), "_") {
			if g := nameGB.FindStringSubmatch(part); g != nil {
				gb, _ = strconv.Atoi(g[1])
			}
		}
		if gb == def {
			if g := descGB.FindStringSubmatch(gpuDescription); g != nil {
				gb, _ = strconv.Atoi(g[1])
			}
		}
		key += "/" + strconv.Itoa(gb)
	}
	g, ok := gpus[key]
	if !ok {
		return machine{}, false
	}
	return machine{gpu: g, count: count}, true
}

// id is the catalogue id of a machine. The catalogue groups offers by id
// and reads the GPU count off the first, and a rental takes the cheapest
// offer of its id; so machines with more GPUs get ids of their own, or a
// request for one H100 could be placed on eight at eight times the price.
func (m machine) id() string {
	if m.count == 1 {
		return m.gpu.id
	}
	return m.gpu.id + "-x" + strconv.Itoa(m.count)
}

func (m machine) label() string {
	if m.count == 1 {
		return m.gpu.label
	}
	return strconv.Itoa(m.count) + "x " + m.gpu.label
}

// countries maps Lambda's regions outside the US to ISO 3166-1 alpha-2
// codes. Both asia-northeast regions are in Japan (Tokyo and Osaka).
var countries = map[string]string{
	"europe-central-1": "DE",
	"asia-south-1":     "IN",
	"asia-northeast-1": "JP",
	"asia-northeast-2": "JP",
	"me-west-1":        "IL",
	"australia-east-1": "AU",
}

// countryOf is the country of a Lambda region, "" when unknown: an
// unknown region gets the global tier, never a stricter one by guess.
func countryOf(region string) string {
	if c, ok := countries[region]; ok {
		return c
	}
	if strings.HasPrefix(region, "us-") {
		return "US"
	}
	return ""
}
