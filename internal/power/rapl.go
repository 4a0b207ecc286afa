package power

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

const powercapDir = "sys/class/powercap"

// raplZone is one package domain's energy counter, unwrapped.
type raplZone struct {
	dir      string
	name     string
	maxRange uint64 // the counter wraps to 0 after this, in µJ
	last     uint64
	seen     bool
	// joules counted since the zone was first read, across wraps.
	joules float64
}

// rapl reads the processor's energy from the RAPL package domains of the
// powercap framework, summed over packages into one cpu channel. The
// core and uncore domains lie inside their package, so they are never
// added; dram lies outside and is left out (see the package doc).
type rapl struct {
	fsys   fs.FS
	log    *slog.Logger
	zones  []*raplZone
	warned warnings
}

// raplTopZone reports whether a powercap entry is a top-level RAPL zone:
// intel-rapl:N, or amd-rapl:N should AMD's get a name of its own (today
// AMD's RAPL registers as intel-rapl). Subzones (intel-rapl:N:M) are
// parts of their package; intel-rapl-mmio:N repeats package N through
// another interface and would count it twice.
func raplTopZone(name string) bool {
	prefix, n, ok := strings.Cut(name, ":")
	if !ok || (prefix != "intel-rapl" && prefix != "amd-rapl") {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 32)
	return err == nil
}

func (r *rapl) discover(context.Context) []sensor {
	entries, err := fs.ReadDir(r.fsys, powercapDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.warned.warn(r.log, "power: cannot list RAPL zones", err)
		}
		r.zones = nil
		return nil
	}
	old := map[string]*raplZone{}
	for _, z := range r.zones {
		old[z.dir] = z
	}
	var zones []*raplZone
	var names []string
	for _, e := range entries {
		if !raplTopZone(e.Name()) {
			continue
		}
		dir := path.Join(powercapDir, e.Name())
		name, err := readText(r.fsys, path.Join(dir, "name"))
		if err != nil || !strings.HasPrefix(name, "package-") {
			continue
		}
		maxRange, err := readUint(r.fsys, path.Join(dir, "max_energy_range_uj"))
		if err != nil || maxRange == 0 {
			r.warned.warn(r.log, "power: RAPL "+name+" has no counter range; no cpu channel", err)
			r.zones = nil
			return nil
		}
		if _, err := readUint(r.fsys, path.Join(dir, "energy_uj")); err != nil {
			// Linux 5.10 and later let only root read energy_uj (a udev
			// rule can open it up). A sum without one package would
			// pass for the whole processor, so there is no cpu channel.
			msg := "power: cannot read RAPL " + name + "; no cpu channel"
			if errors.Is(err, fs.ErrPermission) {
				msg = "power: RAPL energy counters are readable only by root; no cpu channel"
			}
			r.warned.warn(r.log, msg, err)
			r.zones = nil
			return nil
		}
		z := old[dir]
		if z == nil {
			z = &raplZone{dir: dir}
		}
		z.name, z.maxRange = name, maxRange
		zones = append(zones, z)
		names = append(names, name)
	}
	r.zones = zones
	if len(zones) == 0 {
		return nil
	}
	return []sensor{{id: "rapl", ch: api.PowerChannel{
		Scope:  api.ScopeCPU,
		Name:   strings.Join(names, " + "),
		Source: "rapl",
		Method: api.MethodMeasured,
	}}}
}

func (r *rapl) read(context.Context, time.Time) map[string]reading {
	var total float64
	complete := true
	for _, z := range r.zones {
		raw, err := readUint(r.fsys, path.Join(z.dir, "energy_uj"))
		if err != nil {
			r.warned.warn(r.log, "power: cannot read RAPL "+z.name, err)
			complete = false
			continue
		}
		if z.seen {
			z.joules += float64(raplDelta(z.last, raw, z.maxRange)) / 1e6
		}
		z.last, z.seen = raw, true
		total += z.joules
	}
	if !complete || len(r.zones) == 0 {
		return nil
	}
	return map[string]reading{"rapl": counterReading(total)}
}

// raplDelta is how far a counter that wraps to 0 after maxRange went from
// last to now. Sampled every second it cannot wrap twice: the range is
// minutes at full power.
func raplDelta(last, now, maxRange uint64) uint64 {
	if now >= last {
		return now - last
	}
	if last > maxRange {
		return now
	}
	return maxRange - last + now
}
