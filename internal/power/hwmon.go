package power

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

const hwmonDir = "sys/class/hwmon"

// hwmonInput is one power or energy input of a hwmon device.
type hwmonInput struct {
	file   string
	label  string
	energy bool // µJ counter, else µW power
}

type hwmonDevice struct {
	name   string
	inputs []hwmonInput
}

// scanHwmon lists the hwmon devices with their power and energy inputs.
// A channel with both a current and an average power gives the current.
func scanHwmon(fsys fs.FS) ([]hwmonDevice, error) {
	dirs, err := numbered(fsys, hwmonDir, "hwmon")
	if err != nil {
		return nil, err
	}
	var devs []hwmonDevice
	for _, dir := range dirs {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			continue
		}
		name, _ := readText(fsys, path.Join(dir, "name"))
		dev := hwmonDevice{name: name}
		seen := map[string]bool{}
		for _, suffix := range []string{"_input", "_average"} {
			for _, e := range entries {
				channel, ok := strings.CutSuffix(e.Name(), suffix)
				if !ok || seen[channel] || !(strings.HasPrefix(channel, "power") || strings.HasPrefix(channel, "energy")) {
					continue
				}
				seen[channel] = true
				label, _ := readText(fsys, path.Join(dir, channel+"_label"))
				dev.inputs = append(dev.inputs, hwmonInput{
					file:   path.Join(dir, e.Name()),
					label:  label,
					energy: strings.HasPrefix(channel, "energy"),
				})
			}
		}
		devs = append(devs, dev)
	}
	return devs, nil
}

func readHwmon(fsys fs.FS, in hwmonInput) (reading, error) {
	v, err := readUint(fsys, in.file)
	if err != nil {
		return reading{}, err
	}
	if in.energy {
		return counterReading(float64(v) / 1e6), nil
	}
	return powerReading(float64(v) / 1e6), nil
}

// socLabel reports whether a label names a sensor of the whole chip:
// "SoC" or "SoC ..." ("SoC Power"). Rails of the chip ("SVI2_P_SoC",
// "VDD_SOC") do not qualify.
func socLabel(label string) bool {
	l := strings.ToLower(strings.TrimSpace(label))
	return l == "soc" || strings.HasPrefix(l, "soc ")
}

// hwmonSoC reads a hwmon sensor that covers the whole processor chip.
type hwmonSoC struct {
	fsys   fs.FS
	log    *slog.Logger
	in     hwmonInput
	warned warnings
}

func (h *hwmonSoC) discover(context.Context) []sensor {
	h.in = hwmonInput{}
	devs, err := scanHwmon(h.fsys)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.warned.warn(h.log, "power: cannot list hwmon devices", err)
		}
		return nil
	}
	for _, dev := range devs {
		// A counter beats a power sampled once a second.
		for _, in := range dev.inputs {
			if socLabel(in.label) && (h.in.file == "" || (in.energy && !h.in.energy)) {
				h.in = in
			}
		}
		if h.in.file != "" {
			break
		}
	}
	if h.in.file == "" {
		return nil
	}
	return []sensor{{id: "hwmon:" + h.in.file, ch: api.PowerChannel{
		Scope:  api.ScopeSoC,
		Name:   h.in.label,
		Source: "hwmon",
		Method: api.MethodMeasured,
	}}}
}

func (h *hwmonSoC) read(context.Context, time.Time) map[string]reading {
	if h.in.file == "" {
		return nil
	}
	r, err := readHwmon(h.fsys, h.in)
	if err != nil {
		h.warned.warn(h.log, "power: cannot read "+h.in.file, err)
		return nil
	}
	return map[string]reading{"hwmon:" + h.in.file: r}
}

// acpiMeter is the hwmon name of the ACPI power meter, which measures
// the whole machine's input power on the servers that have one.
const acpiMeter = "power_meter"

// supplyName reports whether a hwmon device or label names a power
// supply or the whole machine.
func supplyName(s string) bool {
	l := strings.ToLower(s)
	return strings.Contains(l, "psu") || strings.Contains(l, "power supply") || strings.Contains(l, "system power")
}

// inputLabel reports whether a label names what a supply draws from the
// wall (PMBus "pin", "power total", "input power") rather than one of its
// outputs.
func inputLabel(label string) bool {
	l := strings.ToLower(label)
	return strings.HasPrefix(l, "pin") || strings.Contains(l, "input") ||
		strings.Contains(l, "total") || strings.Contains(l, "system")
}

// hwmonPSU reads the whole machine from hwmon: the ACPI power meters
// where there are any, else the power supplies, summed (redundant
// supplies share the load).
type hwmonPSU struct {
	fsys   fs.FS
	log    *slog.Logger
	inputs []hwmonInput
	warned warnings
}

func (h *hwmonPSU) discover(context.Context) []sensor {
	h.inputs = nil
	devs, err := scanHwmon(h.fsys)
	if err != nil {
		return nil
	}
	var meters, supplies []hwmonInput
	var meterNames, supplyNames []string
	for _, dev := range devs {
		in, ok := supplyInput(dev)
		switch {
		case !ok:
		case dev.name == acpiMeter:
			meters, meterNames = append(meters, in), append(meterNames, dev.name)
		default:
			supplies, supplyNames = append(supplies, in), append(supplyNames, dev.name)
		}
	}
	names := supplyNames
	h.inputs = supplies
	if len(meters) > 0 {
		// A meter and a supply on one machine would measure the same
		// power twice.
		h.inputs, names = meters, meterNames
	}
	if len(h.inputs) == 0 {
		return nil
	}
	return []sensor{{id: "hwmon-psu", ch: api.PowerChannel{
		Scope:  api.ScopeSystem,
		Name:   strings.Join(names, " + "),
		Source: "hwmon",
		Method: api.MethodMeasured,
	}}}
}

// supplyInput picks the input power of a supply or meter device: the
// input labelled as such, else its first power. ok is false for other
// devices.
func supplyInput(dev hwmonDevice) (in hwmonInput, ok bool) {
	supply := dev.name == acpiMeter || supplyName(dev.name)
	var first *hwmonInput
	for i, in := range dev.inputs {
		if in.energy {
			continue
		}
		supply = supply || supplyName(in.label)
		if first == nil {
			first = &dev.inputs[i]
		}
	}
	if !supply || first == nil {
		return hwmonInput{}, false
	}
	for _, in := range dev.inputs {
		if !in.energy && inputLabel(in.label) {
			return in, true
		}
	}
	return *first, true
}

func (h *hwmonPSU) read(context.Context, time.Time) map[string]reading {
	var sum float64
	for _, in := range h.inputs {
		r, err := readHwmon(h.fsys, in)
		if err != nil {
			h.warned.warn(h.log, "power: cannot read "+in.file, err)
			return nil
		}
		sum += r.watts
	}
	if len(h.inputs) == 0 {
		return nil
	}
	return map[string]reading{"hwmon-psu": powerReading(sum)}
}
