package api

import "time"

// Power channel scopes and methods.
const (
	ScopeGPU    = "gpu"
	ScopeCPU    = "cpu"
	ScopeSoC    = "soc"
	ScopeSystem = "system"

	MethodMeasured  = "measured"
	MethodEstimated = "estimated"
)

// A worker's power channels are bounded: each is a series of the
// gateway's metrics, and a machine has a channel per GPU and a few more.
// A channel key is 1 to MaxPowerKeyLen bytes of a-z, 0-9 and _.
const (
	MaxPowerChannels = 64
	MaxPowerKeyLen   = 32
)

// ValidPowerKey reports whether k can name a power channel.
func ValidPowerKey(k string) bool {
	if k == "" || len(k) > MaxPowerKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Power ranges of the history endpoint.
const (
	Range1h  = "1h"
	Range24h = "24h"
	Range7d  = "7d"
	Range30d = "30d"
)

// PowerChannel describes one channel of a worker's power readings: one
// per GPU, one cpu (or soc), one system.
type PowerChannel struct {
	// Key names the channel in points and windows: gpu0, gpu1, ..., cpu,
	// soc, system.
	Key   string `json:"key"`
	Scope string `json:"scope"`
	// Index is a GPU's index on its machine.
	Index *int `json:"index,omitempty"`
	// Name is the device's or sensor's own name.
	Name string `json:"name,omitempty"`
	// Source is where the readings come from: nvml, nvidia-smi, amdgpu,
	// rapl, hwmon, ipmi, estimate, or simulated.
	Source string `json:"source"`
	// Method is measured or estimated.
	Method      string   `json:"method"`
	PowerLimitW *float64 `json:"power_limit_w,omitempty"`
}

// PowerWindow is the energy each channel used over one stretch of time.
// A channel without readings in the window is absent from its maps.
type PowerWindow struct {
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	// Joules per channel, integrated from the readings.
	Joules map[string]float64 `json:"joules"`
	// Covered is, per channel, how many of the window's seconds had
	// readings; average watts are Joules over Covered.
	Covered map[string]float64 `json:"covered"`
	// PeakW is, per channel, the highest reading in the window.
	PeakW map[string]float64 `json:"peak_w"`
}

// PowerReport is what a worker sends over the link (link.TypePower): its
// channels and the windows it closed since its last report.
type PowerReport struct {
	Channels []PowerChannel `json:"channels"`
	// Machine is the method of the whole-machine (system) figure.
	Machine string        `json:"machine"`
	Windows []PowerWindow `json:"windows"`
}

// LivePower is a worker's latest reading: the power field of the workers
// list, sent in every heartbeat.
type LivePower struct {
	At       time.Time          `json:"at"`
	Watts    map[string]float64 `json:"watts"`
	Channels []PowerChannel     `json:"channels"`
	Machine  string             `json:"machine"`
	// EnergyTodayKWh is what the whole machine used since midnight UTC,
	// from the gateway's history (set by the gateway, not the worker).
	EnergyTodayKWh *float64 `json:"energy_today_kwh,omitempty"`
}

// PowerHistory is the body of GET /api/v1/workers/{worker_id}/power.
type PowerHistory struct {
	WorkerID          string `json:"worker_id"`
	Range             string `json:"range"`
	ResolutionSeconds int    `json:"resolution_seconds"`
	// Machine is the method of the whole-machine figure; null when there
	// are no readings.
	Machine  *string        `json:"machine"`
	Channels []PowerChannel `json:"channels"`
	Points   []PowerPoint   `json:"points"`
	Totals   PowerTotals    `json:"totals"`
}

// PowerPoint is one window of the history: average watts per channel that
// had readings then.
type PowerPoint struct {
	T      time.Time          `json:"t"`
	Values map[string]float64 `json:"values"`
}

// PowerTotals sum up the whole machine over the range.
type PowerTotals struct {
	EnergyKWh float64 `json:"energy_kwh"`
	AvgW      float64 `json:"avg_w"`
	PeakW     float64 `json:"peak_w"`
	// Coverage is the share of the range with readings, 0 to 1.
	Coverage float64 `json:"coverage"`
}

// RangeResolution is the window the history of a range is told in, and
// how long the range is; ok is false for an unknown range.
func RangeResolution(rng string) (resolution, span time.Duration, ok bool) {
	switch rng {
	case Range1h:
		return time.Minute, time.Hour, true
	case Range24h:
		return 5 * time.Minute, 24 * time.Hour, true
	case Range7d:
		return time.Hour, 7 * 24 * time.Hour, true
	case Range30d:
		return time.Hour, 30 * 24 * time.Hour, true
	}
	return 0, 0, false
}
