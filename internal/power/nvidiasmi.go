package power

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// smiGPU is one line of nvidia-smi's answer. A value the GPU cannot give
// ("[N/A]", "[Not Supported]") is NaN.
type smiGPU struct {
	index         int
	name          string
	drawW, limitW float64
}

// nvidiaSMI polls nvidia-smi for NVIDIA GPUs where NVML cannot be loaded
// directly. Its power.draw is sampled, not a counter.
type nvidiaSMI struct {
	prog   program
	log    *slog.Logger
	warned warnings
}

func smiID(index int) string { return fmt.Sprintf("nvidia-smi:%d", index) }

func (n *nvidiaSMI) discover(ctx context.Context) []sensor {
	gpus, err := n.query(ctx)
	if err != nil {
		n.warned.warn(n.log, "power: nvidia-smi failed", err)
		return nil
	}
	var found []sensor
	seen := map[int]bool{}
	for _, g := range gpus {
		if math.IsNaN(g.drawW) || seen[g.index] {
			continue // a GPU that reports no power has no channel
		}
		seen[g.index] = true
		idx := g.index
		ch := api.PowerChannel{Scope: api.ScopeGPU, Index: &idx, Name: g.name, Source: "nvidia-smi", Method: api.MethodMeasured}
		if !math.IsNaN(g.limitW) && g.limitW > 0 {
			limit := g.limitW
			ch.PowerLimitW = &limit
		}
		found = append(found, sensor{id: smiID(g.index), ch: ch})
	}
	return found
}

func (n *nvidiaSMI) read(ctx context.Context, _ time.Time) map[string]reading {
	gpus, err := n.query(ctx)
	if err != nil {
		n.warned.warn(n.log, "power: nvidia-smi failed", err)
		return nil
	}
	out := make(map[string]reading, len(gpus))
	for _, g := range gpus {
		if !math.IsNaN(g.drawW) {
			out[smiID(g.index)] = powerReading(g.drawW)
		}
	}
	return out
}

// gpus asks nvidia-smi for the GPUs' names, memory and driver.
func (n *nvidiaSMI) gpus(ctx context.Context) ([]api.GPU, string) {
	out, err := n.prog.output(ctx, "--query-gpu=index,memory.total,memory.used,driver_version,name", "--format=csv,noheader,nounits")
	if err != nil {
		n.warned.warn(n.log, "power: nvidia-smi failed", err)
		return nil, ""
	}
	return parseSMIDetails(out)
}

// parseSMIDetails reads the answer of gpus' query. The name is last, so
// that a comma in it does no harm; a memory figure the GPU does not give
// is 0.
func parseSMIDetails(out []byte) ([]api.GPU, string) {
	var gpus []api.GPU
	driver := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if len(f) < 5 {
			continue
		}
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil || idx < 0 {
			continue
		}
		mib := func(s string) int64 {
			n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			return max(n, 0)
		}
		gpus = append(gpus, api.GPU{Index: idx, Name: strings.TrimSpace(strings.Join(f[4:], ",")),
			MemoryTotalMiB: mib(f[1]), MemoryUsedMiB: mib(f[2])})
		if v := strings.TrimSpace(f[3]); driver == "" && v != "" && !strings.HasPrefix(v, "[") {
			driver = v
		}
	}
	return gpus, driver
}

func (n *nvidiaSMI) query(ctx context.Context) ([]smiGPU, error) {
	out, err := n.prog.output(ctx, "--query-gpu=index,name,power.draw,power.limit", "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	return parseSMI(out)
}

// parseSMI parses nvidia-smi's CSV lines, "0, NVIDIA A100-SXM4-80GB,
// 63.45, 400.00". The name sits between the index and the two powers, so
// a comma in it does no harm. Lines that do not parse are skipped: one
// GPU in a bad state should not hide the others.
func parseSMI(out []byte) ([]smiGPU, error) {
	var gpus []smiGPU
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		lines++
		f := strings.Split(line, ",")
		if len(f) < 4 {
			continue
		}
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil || idx < 0 {
			continue
		}
		gpus = append(gpus, smiGPU{
			index:  idx,
			name:   strings.TrimSpace(strings.Join(f[1:len(f)-2], ",")),
			drawW:  smiWatts(f[len(f)-2]),
			limitW: smiWatts(f[len(f)-1]),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("nvidia-smi output: %w", err)
	}
	if lines > 0 && len(gpus) == 0 {
		return nil, errors.New("nvidia-smi output has no GPU line")
	}
	return gpus, nil
}

// smiWatts is a power field in watts, NaN when the GPU gave none.
func smiWatts(s string) float64 {
	w, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(w, 0) || w < 0 {
		return math.NaN()
	}
	return w
}
