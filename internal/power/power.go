package power

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os/exec"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// Defaults of Config.
const (
	DefaultInterval = time.Second
	// DefaultWindow keeps the newest point of a graph seconds old, for a
	// frame of a few hundred bytes per worker every ten seconds.
	DefaultWindow    = 10 * time.Second
	DefaultBaselineW = 50.0
	DefaultKeep      = 24 * time.Hour
)

// Config says where the readings come from and how they are kept. Zero
// values take the defaults.
type Config struct {
	// Root is the filesystem root holding sys/ (a recorded tree in tests);
	// "" is "/".
	Root string
	// NVML reads NVIDIA GPUs; nil loads libnvidia-ml.so.1, else polls
	// nvidia-smi when it is on PATH, else reads no NVIDIA GPU.
	NVML NVML
	// IPMITool is the ipmitool program; "" looks it up on PATH and "-"
	// disables IPMI.
	IPMITool string
	// Interval is how often readings are taken. Readings further apart
	// than five intervals are a gap, not a stretch of energy.
	Interval time.Duration
	// Window is the length of the energy windows, aligned to the wall
	// clock so that they line up with the gateway's buckets.
	Window time.Duration
	// BaselineW is added to the GPUs and cpu for an estimated system
	// figure: what the rest of the machine draws. 0 takes the default.
	BaselineW float64
	// Simulated, when set, replaces every sensor with a made-up profile
	// that follows the load: it returns the requests active now.
	Simulated func() int
	// Keep bounds the closed windows kept until the gateway has them.
	Keep   time.Duration
	Now    func() time.Time
	Logger *slog.Logger
	// OnWindow is called, not under a lock, each time windows close.
	OnWindow func()
}

func (c *Config) setDefaults() {
	if c.Root == "" {
		c.Root = "/"
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.BaselineW == 0 {
		c.BaselineW = DefaultBaselineW
	}
	if c.Keep <= 0 {
		c.Keep = DefaultKeep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// reading is one channel's value at a sample: a cumulative energy
// counter or an instantaneous power.
type reading struct {
	joules  float64 // cumulative; valid when counter is set
	watts   float64 // valid when instant is set
	counter bool
	instant bool
}

func counterReading(joules float64) reading { return reading{joules: joules, counter: true} }
func powerReading(watts float64) reading    { return reading{watts: watts, instant: true} }

// sensor is a channel as a source found it. The id is stable for one
// device and unique across sources; the sampler assigns the key (and a
// GPU's index when the source has none).
type sensor struct {
	id string
	ch api.PowerChannel
}

// source is one kind of sensor. discover finds its sensors (again on
// every rediscovery); read reads them, by sensor id, leaving out those it
// could not read. Neither is called concurrently with the other.
type source interface {
	discover(ctx context.Context) []sensor
	read(ctx context.Context, now time.Time) map[string]reading
}

// gpuDescriber is a GPU source that can describe its GPUs for the worker
// list: names, memory and the driver's release.
type gpuDescriber interface {
	gpus(ctx context.Context) ([]api.GPU, string)
}

// deps are what New takes from the machine, replaced in tests.
type deps struct {
	fsys     fs.FS
	openNVML func() (NVML, error)
	lookPath func(string) (string, error)
}

// New returns a sampler for cfg. It loads NVML (when cfg.NVML is nil) and
// looks up programs, but reads nothing until the first sample.
func New(cfg Config) (*Sampler, error) {
	return newSampler(cfg, deps{openNVML: openNVML, lookPath: exec.LookPath})
}

func (c *Config) validate() error {
	switch {
	case c.Interval > c.Window:
		return fmt.Errorf("power window %v is shorter than the sampling interval %v", c.Window, c.Interval)
	case c.BaselineW < 0 || math.IsNaN(c.BaselineW) || math.IsInf(c.BaselineW, 0):
		return fmt.Errorf("power baseline %g W is not 0 or more", c.BaselineW)
	}
	return nil
}

// pickSources picks the sources of each role, best first: every GPU source
// is read, but only the first cpu and system sources that find a sensor.
func pickSources(cfg Config, d deps) (gpus, cpus, systems []source) {
	log := cfg.Logger
	if cfg.Simulated != nil {
		return []source{&simulated{active: cfg.Simulated}}, nil, nil
	}
	lib := cfg.NVML
	if lib == nil {
		var err error
		if lib, err = d.openNVML(); err != nil {
			log.Debug("power: no NVML", "err", err)
		}
	}
	if lib != nil {
		gpus = append(gpus, newNVMLSource(lib, log))
	} else if prog, err := d.lookPath("nvidia-smi"); err == nil {
		gpus = append(gpus, &nvidiaSMI{prog: program{path: prog}, log: log})
	}
	gpus = append(gpus, &amdgpu{fsys: d.fsys, log: log})
	cpus = []source{&hwmonSoC{fsys: d.fsys, log: log}, &rapl{fsys: d.fsys, log: log}}
	systems = []source{&hwmonPSU{fsys: d.fsys, log: log}}
	if prog := ipmiProgram(cfg.IPMITool, d.lookPath); prog != "" {
		systems = append(systems, &ipmi{prog: program{path: prog}, log: log})
	}
	return gpus, cpus, systems
}

func ipmiProgram(configured string, lookPath func(string) (string, error)) string {
	switch configured {
	case "-":
		return ""
	case "":
		prog, err := lookPath("ipmitool")
		if err != nil {
			return ""
		}
		return prog
	}
	return configured
}
