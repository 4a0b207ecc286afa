package power

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"
)

// NVMLRecording is a test double for NVML: recorded devices whose draw is
// known in advance, so that end-to-end tests of a worker can work out the
// watts and joules it should report. Time starts at the first call; from
// then on each device's energy counter advances by its draw.
//
// As JSON (LoadNVMLRecording):
//
//	{"devices": [
//	  {"name": "NVIDIA H100 80GB HBM3", "limit_w": 700, "power_w": 300},
//	  {"name": "NVIDIA A10", "limit_w": 150, "no_energy_counter": true,
//	   "steps": [{"after_s": 0, "w": 60}, {"after_s": 30, "w": 140}]}
//	]}
//
// A device draws power_w throughout, or, with steps, each step's w from
// after_s seconds on until the next step (the first step at 0). A device
// with no_energy_counter has only sampled power, as before Volta, and
// limit_w 0 has no power limit.
type NVMLRecording struct {
	Devices []RecordedGPU `json:"devices"`
	// Now is the clock the draw follows; nil is time.Now. Tests give the
	// sampler's clock.
	Now func() time.Time `json:"-"`

	mu    sync.Mutex
	start time.Time
}

// RecordedGPU is one device of an NVMLRecording.
type RecordedGPU struct {
	Name            string      `json:"name"`
	LimitW          float64     `json:"limit_w,omitempty"`
	PowerW          float64     `json:"power_w,omitempty"`
	Steps           []PowerStep `json:"steps,omitempty"`
	NoEnergyCounter bool        `json:"no_energy_counter,omitempty"`
}

// PowerStep is a draw of W watts from AfterS seconds into the recording.
type PowerStep struct {
	AfterS float64 `json:"after_s"`
	W      float64 `json:"w"`
}

// LoadNVMLRecording reads an NVMLRecording from a JSON file.
func LoadNVMLRecording(path string) (NVML, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("NVML recording: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var rec NVMLRecording
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("NVML recording %s: %w", path, err)
	}
	if err := rec.validate(); err != nil {
		return nil, fmt.Errorf("NVML recording %s: %w", path, err)
	}
	return &rec, nil
}

func (r *NVMLRecording) validate() error {
	bad := func(w float64) bool { return math.IsNaN(w) || math.IsInf(w, 0) || w < 0 }
	for i, d := range r.Devices {
		if d.Name == "" {
			return fmt.Errorf("device %d has no name", i)
		}
		if bad(d.LimitW) || bad(d.PowerW) {
			return fmt.Errorf("device %d: watts must be 0 or more", i)
		}
		if d.PowerW != 0 && len(d.Steps) > 0 {
			return fmt.Errorf("device %d has both power_w and steps", i)
		}
		for j, s := range d.Steps {
			switch {
			case bad(s.W) || bad(s.AfterS):
				return fmt.Errorf("device %d step %d: numbers must be 0 or more", i, j)
			case j == 0 && s.AfterS != 0:
				return fmt.Errorf("device %d: the first step must be at after_s 0", i)
			case j > 0 && s.AfterS <= d.Steps[j-1].AfterS:
				return fmt.Errorf("device %d: steps must be in time order", i)
			}
		}
	}
	return nil
}

// elapsed is the seconds since the first call.
func (r *NVMLRecording) elapsed() float64 {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start.IsZero() {
		r.start = t
	}
	return max(0, t.Sub(r.start).Seconds())
}

func (r *NVMLRecording) device(i int) (RecordedGPU, error) {
	if i < 0 || i >= len(r.Devices) {
		return RecordedGPU{}, fmt.Errorf("no device %d", i)
	}
	return r.Devices[i], nil
}

// DeviceCount implements NVML.
func (r *NVMLRecording) DeviceCount() (int, error) {
	r.elapsed()
	return len(r.Devices), nil
}

// DeviceName implements NVML.
func (r *NVMLRecording) DeviceName(i int) (string, error) {
	d, err := r.device(i)
	return d.Name, err
}

// TotalEnergy implements NVML: the draw integrated since the first call.
func (r *NVMLRecording) TotalEnergy(i int) (uint64, error) {
	d, err := r.device(i)
	if err != nil {
		return 0, err
	}
	if d.NoEnergyCounter {
		return 0, errors.New("total energy: not supported")
	}
	return uint64(math.Round(d.joules(r.elapsed()) * 1000)), nil
}

// PowerUsage implements NVML.
func (r *NVMLRecording) PowerUsage(i int) (uint32, error) {
	d, err := r.device(i)
	if err != nil {
		return 0, err
	}
	return uint32(math.Round(d.watts(r.elapsed()) * 1000)), nil
}

// PowerLimit implements NVML.
func (r *NVMLRecording) PowerLimit(i int) (uint32, error) {
	d, err := r.device(i)
	if err != nil {
		return 0, err
	}
	if d.LimitW == 0 {
		return 0, errors.New("power limit: not supported")
	}
	return uint32(math.Round(d.LimitW * 1000)), nil
}

func (d RecordedGPU) watts(at float64) float64 {
	if len(d.Steps) == 0 {
		return d.PowerW
	}
	w := d.Steps[0].W
	for _, s := range d.Steps[1:] {
		if s.AfterS > at {
			break
		}
		w = s.W
	}
	return w
}

func (d RecordedGPU) joules(at float64) float64 {
	if len(d.Steps) == 0 {
		return d.PowerW * at
	}
	var j float64
	for k, s := range d.Steps {
		if s.AfterS >= at {
			break
		}
		end := at
		if k+1 < len(d.Steps) {
			end = min(end, d.Steps[k+1].AfterS)
		}
		j += s.W * (end - s.AfterS)
	}
	return j
}
