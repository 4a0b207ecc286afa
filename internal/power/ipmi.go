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

const ipmiID = "ipmi"

// ipmi reads the whole machine's input power from the BMC through
// `ipmitool dcmi power reading`.
type ipmi struct {
	prog   program
	log    *slog.Logger
	warned warnings
}

func (p *ipmi) discover(ctx context.Context) []sensor {
	if _, err := p.reading(ctx); err != nil {
		// Most machines without a BMC land here: not worth more than a
		// debug line once a minute.
		p.log.Debug("power: no IPMI DCMI power reading", "err", err)
		return nil
	}
	return []sensor{{id: ipmiID, ch: api.PowerChannel{
		Scope:  api.ScopeSystem,
		Name:   "IPMI DCMI power reading",
		Source: "ipmi",
		Method: api.MethodMeasured,
	}}}
}

func (p *ipmi) read(ctx context.Context, _ time.Time) map[string]reading {
	w, err := p.reading(ctx)
	if err != nil {
		p.warned.warn(p.log, "power: IPMI power reading failed", err)
		return nil
	}
	return map[string]reading{ipmiID: powerReading(w)}
}

func (p *ipmi) reading(ctx context.Context) (float64, error) {
	out, err := p.prog.output(ctx, "dcmi", "power", "reading")
	if err != nil {
		return 0, err
	}
	return parseDCMI(out)
}

// parseDCMI finds the instantaneous power in the output of `ipmitool dcmi
// power reading`:
//
//	Instantaneous power reading:                   245 Watts
//	...
//	Power reading state is:                   activated
//
// A deactivated reading, or one of 0 W, is refused: BMCs without a power
// meter report it so, and a machine that is running draws something.
func parseDCMI(out []byte) (float64, error) {
	var watts float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		switch key {
		case "instantaneous power reading":
			num, unit, _ := strings.Cut(val, " ")
			if !strings.EqualFold(strings.TrimSpace(unit), "watts") {
				return 0, fmt.Errorf("dcmi power reading: unit of %q", val)
			}
			w, err := strconv.ParseFloat(num, 64)
			if err != nil || math.IsNaN(w) || math.IsInf(w, 0) {
				return 0, fmt.Errorf("dcmi power reading: %q is not a number", num)
			}
			watts, found = w, true
		case "power reading state is":
			if strings.EqualFold(val, "deactivated") {
				return 0, errors.New("dcmi power reading is deactivated")
			}
		}
	}
	if !found {
		return 0, errors.New("dcmi power reading: no instantaneous reading")
	}
	if watts <= 0 {
		return 0, fmt.Errorf("dcmi power reading: %g W", watts)
	}
	return watts, nil
}
