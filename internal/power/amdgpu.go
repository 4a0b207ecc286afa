package power

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

const drmDir = "sys/class/drm"

// amdCard is one amdgpu card and the hwmon file its readings come from.
type amdCard struct {
	id     string
	file   string
	energy bool // file is a counter in µJ, else a power in µW
}

// amdgpu reads AMD GPUs from the hwmon directory of each card the amdgpu
// driver drives: the energy counter where the card has one, else its
// average power, else its current power.
type amdgpu struct {
	fsys   fs.FS
	log    *slog.Logger
	cards  []amdCard
	warned warnings
}

func (a *amdgpu) discover(context.Context) []sensor {
	a.cards = nil
	cards, err := numbered(a.fsys, drmDir, "card")
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.warned.warn(a.log, "power: cannot list DRM cards", err)
		}
		return nil
	}
	var found []sensor
	for _, card := range cards {
		hw := a.hwmonOf(card)
		if hw == "" {
			continue
		}
		c := amdCard{id: "amdgpu:" + a.deviceID(card)}
		for _, f := range []string{"energy1_input", "power1_average", "power1_input"} {
			if _, err := readUint(a.fsys, path.Join(hw, f)); err == nil {
				c.file, c.energy = path.Join(hw, f), f == "energy1_input"
				break
			}
		}
		if c.file == "" {
			a.warned.warn(a.log, "power: "+path.Base(card)+" has no readable power or energy file", nil)
			continue
		}
		ch := api.PowerChannel{Scope: api.ScopeGPU, Name: a.name(card), Source: "amdgpu", Method: api.MethodMeasured}
		if uw, err := readUint(a.fsys, path.Join(hw, "power1_cap")); err == nil && uw > 0 {
			w := float64(uw) / 1e6
			ch.PowerLimitW = &w
		}
		a.cards = append(a.cards, c)
		found = append(found, sensor{id: c.id, ch: ch})
	}
	return found
}

// hwmonOf is the card's amdgpu hwmon directory, "" for other drivers.
func (a *amdgpu) hwmonOf(card string) string {
	hws, err := numbered(a.fsys, path.Join(card, "device", "hwmon"), "hwmon")
	if err != nil {
		return ""
	}
	for _, hw := range hws {
		if name, _ := readText(a.fsys, path.Join(hw, "name")); name == "amdgpu" {
			return hw
		}
	}
	return ""
}

// deviceID names the card's PCI device where sysfs links to it, so that a
// card renumbered on hot-plug keeps its identity; else the card's name.
func (a *amdgpu) deviceID(card string) string {
	if target, err := fs.ReadLink(a.fsys, path.Join(card, "device")); err == nil {
		return path.Base(target)
	}
	return path.Base(card)
}

// name is the board's product name where its FRU provides one (server and
// workstation cards), else its PCI device id: the driver exposes no
// marketing name.
func (a *amdgpu) name(card string) string {
	if s, err := readText(a.fsys, path.Join(card, "device", "product_name")); err == nil && s != "" {
		return s
	}
	if id, err := readText(a.fsys, path.Join(card, "device", "device")); err == nil && id != "" {
		return fmt.Sprintf("AMD GPU %s", id)
	}
	return "AMD GPU"
}

func (a *amdgpu) read(context.Context, time.Time) map[string]reading {
	out := make(map[string]reading, len(a.cards))
	for _, c := range a.cards {
		v, err := readUint(a.fsys, c.file)
		if err != nil {
			a.warned.warn(a.log, "power: cannot read "+c.file, err)
			continue
		}
		if c.energy {
			out[c.id] = counterReading(float64(v) / 1e6)
		} else {
			out[c.id] = powerReading(float64(v) / 1e6)
		}
	}
	return out
}
