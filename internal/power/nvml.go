package power

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// NVML is what the sampler needs of NVIDIA's management library, device
// by index, in the library's own units. The production implementation
// calls libnvidia-ml.so.1; NVMLRecording stands in for it in tests.
type NVML interface {
	DeviceCount() (int, error)
	// DeviceName is the device's own name ("NVIDIA H100 80GB HBM3").
	DeviceName(i int) (string, error)
	// TotalEnergy is the energy the device used since the driver loaded,
	// in millijoules (nvmlDeviceGetTotalEnergyConsumption, Volta and
	// later); an error where the device has no counter.
	TotalEnergy(i int) (uint64, error)
	// PowerUsage is the device's current draw in milliwatts.
	PowerUsage(i int) (uint32, error)
	// PowerLimit is the power limit the device enforces, in milliwatts.
	PowerLimit(i int) (uint32, error)
}

// NVMLDetails is what an NVML tells of its devices beyond power, for the
// worker list: an NVML without it (a recording) describes no memory.
type NVMLDetails interface {
	// MemoryInfo is the device's memory, total and used, in bytes.
	MemoryInfo(i int) (total, used uint64, err error)
	// DriverVersion is the driver's release ("550.54.15").
	DriverVersion() (string, error)
}

// nvmlDevice is a device as discovery found it.
type nvmlDevice struct {
	index  int
	name   string
	id     string
	energy bool // has the energy counter
}

// nvmlSource reads NVIDIA GPUs through NVML, preferring the energy
// counter, which counts the spikes that one power sample a second misses.
type nvmlSource struct {
	lib    NVML
	log    *slog.Logger
	devs   []nvmlDevice
	warned warnings
}

func newNVMLSource(lib NVML, log *slog.Logger) *nvmlSource {
	return &nvmlSource{lib: lib, log: log}
}

func (n *nvmlSource) discover(context.Context) []sensor {
	n.devs = nil
	count, err := n.lib.DeviceCount()
	if err != nil {
		n.warned.warn(n.log, "power: NVML device count", err)
		return nil
	}
	var found []sensor
	for i := range count {
		name, err := n.lib.DeviceName(i)
		if err != nil {
			n.warned.warn(n.log, fmt.Sprintf("power: NVML device %d has no name", i), err)
			continue
		}
		_, err = n.lib.TotalEnergy(i)
		energy := err == nil
		if !energy {
			if _, err := n.lib.PowerUsage(i); err != nil {
				n.warned.warn(n.log, fmt.Sprintf("power: NVML device %d reports no power", i), err)
				continue
			}
		}
		idx := i
		ch := api.PowerChannel{Scope: api.ScopeGPU, Index: &idx, Name: name, Source: "nvml", Method: api.MethodMeasured}
		if mw, err := n.lib.PowerLimit(i); err == nil && mw > 0 {
			w := float64(mw) / 1000
			ch.PowerLimitW = &w
		}
		// The name is part of the identity: another card at the same
		// index after a hot-plug starts afresh.
		d := nvmlDevice{index: i, name: name, id: fmt.Sprintf("nvml:%d:%s", i, name), energy: energy}
		n.devs = append(n.devs, d)
		found = append(found, sensor{id: d.id, ch: ch})
	}
	return found
}

// gpus describes the devices discovery found, with their memory now
// where the library tells it.
func (n *nvmlSource) gpus(context.Context) ([]api.GPU, string) {
	det, _ := n.lib.(NVMLDetails)
	out := make([]api.GPU, 0, len(n.devs))
	for _, d := range n.devs {
		g := api.GPU{Index: d.index, Name: d.name}
		if det != nil {
			if total, used, err := det.MemoryInfo(d.index); err == nil {
				g.MemoryTotalMiB, g.MemoryUsedMiB = int64(total>>20), int64(used>>20)
			}
		}
		out = append(out, g)
	}
	driver := ""
	if det != nil {
		driver, _ = det.DriverVersion()
	}
	return out, driver
}

func (n *nvmlSource) read(context.Context, time.Time) map[string]reading {
	out := make(map[string]reading, len(n.devs))
	for _, d := range n.devs {
		if d.energy {
			if mj, err := n.lib.TotalEnergy(d.index); err == nil {
				out[d.id] = counterReading(float64(mj) / 1000)
				continue
			}
		}
		mw, err := n.lib.PowerUsage(d.index)
		if err != nil {
			n.warned.warn(n.log, fmt.Sprintf("power: NVML device %d", d.index), err)
			continue
		}
		out[d.id] = powerReading(float64(mw) / 1000)
	}
	return out
}
