package chart

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/svc-dev/svc/internal/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/<name>.golden; -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; run go test ./internal/chart -update", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from %s; run go test ./internal/chart -update and review the diff\ngot:\n%s", name, path, got)
	}
}

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// requireSize checks every line is exactly w cells once colour is removed:
// callers frame and join the lines by position.
func requireSize(t *testing.T, lines []string, w, h int) {
	t.Helper()
	if len(lines) != h {
		t.Fatalf("%d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(sgr.ReplaceAllString(l, "")); n != w {
			t.Fatalf("line %d is %d cells, want %d: %q", i, n, w, l)
		}
	}
}

// end is the end of every test range.
var end = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// history is a range of a two-GPU machine: the GPUs ramp up and down
// under load twice, the machine goes quiet for a while (from a third of
// the range for seven sixtieths of it: a gap in every channel), and gpu1
// alone drops out for a twelfth of the range two thirds in.
func history(rng string) api.PowerHistory {
	res, span, _ := api.RangeResolution(rng)
	h := api.PowerHistory{WorkerID: "wk_1", Range: rng, ResolutionSeconds: int(res / time.Second), Machine: ptr(api.MethodMeasured),
		Channels: []api.PowerChannel{
			{Key: "gpu0", Scope: api.ScopeGPU, Index: ptr(0), Name: "NVIDIA RTX 4090", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(450.0)},
			{Key: "gpu1", Scope: api.ScopeGPU, Index: ptr(1), Name: "NVIDIA RTX 4090", Source: "nvml", Method: api.MethodMeasured, PowerLimitW: ptr(450.0)},
			{Key: "cpu", Scope: api.ScopeCPU, Name: "AMD Ryzen 9 7950X", Source: "rapl", Method: api.MethodMeasured},
			{Key: "system", Scope: api.ScopeSystem, Source: "ipmi", Method: api.MethodMeasured},
		}}
	n := int(span / res)
	for i := range n {
		at := float64(i) / float64(n) * 60 // minutes of an hour
		if at >= 20 && at < 27 {
			continue
		}
		load := 0.5 + 0.5*math.Sin(at/6)
		v := map[string]float64{
			"gpu0": math.Round(60 + 330*load),
			"gpu1": math.Round(45 + 250*load*load),
			"cpu":  math.Round(40 + 60*load),
		}
		v["system"] = 85 + v["gpu0"] + v["gpu1"] + v["cpu"]
		if at >= 40 && at < 45 {
			delete(v, "gpu1")
		}
		h.Points = append(h.Points, api.PowerPoint{T: end.Add(-span + time.Duration(i)*res), Values: v})
	}
	return h
}

func ptr[T any](v T) *T { return &v }

func colour(n int) func(string) string {
	return func(s string) string { return fmt.Sprintf("\x1b[%dm%s\x1b[0m", 30+n, s) }
}

func coloured(c Chart) Chart {
	c.Color = true
	c.Axis = func(s string) string { return "\x1b[90m" + s + "\x1b[0m" }
	for i := range c.Series {
		c.Series[i].Style = colour(ANSIColor(i) % 8)
	}
	return c
}

func TestRenderGolden(t *testing.T) {
	hour := Power(history(api.Range1h), end)
	oneSeries := hour
	oneSeries.Series = hour.Series[:1]
	for _, tc := range []struct {
		name string
		c    Chart
		w, h int
	}{
		{"power-80x14-marks", hour, 80, 14},
		{"power-80x14-colour", coloured(hour), 80, 14},
		{"one-series-60x8", oneSeries, 60, 8},
		{"day-100x10", Power(history(api.Range24h), end), 100, 10},
		{"month-100x10-colour", coloured(Power(history(api.Range30d), end)), 100, 10},
		{"small-30x4", coloured(hour), 30, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := tc.c.Render(tc.w, tc.h)
			requireSize(t, lines, tc.w, tc.h)
			golden(t, tc.name, strings.Join(append([]string{tc.c.Legend()}, lines...), "\n")+"\n")
		})
	}
}

// TestGapsAreGaps checks that missing windows draw nothing, while a
// reading of zero draws on the bottom line.
func TestGapsAreGaps(t *testing.T) {
	from := end.Add(-10 * time.Minute)
	c := Chart{From: from, To: end, Step: time.Minute, Unit: "W", Series: []Series{{Label: "x", Points: []Point{
		{from, 0}, {from.Add(time.Minute), 0}, // zero: drawn
		// minutes 2-7 missing
		{from.Add(8 * time.Minute), 100}, {from.Add(9 * time.Minute), 100},
	}}}}
	lines := c.Render(30, 6)
	requireSize(t, lines, 30, 6)
	plot := func(r int) []rune { return []rune(lines[r])[utf8.RuneCountInString("100 W ┤"):] }
	// Minutes 2-7 are dot columns 10-35 of 46, cells 5-17: blank on
	// every line.
	for r := range 4 {
		if gap := string(plot(r)[5:18]); strings.TrimSpace(gap) != "" {
			t.Errorf("line %d draws in the gap: %q", r, string(plot(r)))
		}
	}
	if zero := string(plot(3)[:5]); !strings.ContainsAny(zero, "⣀⡀⢀") {
		t.Errorf("zero readings not drawn on the bottom line:\n%s", strings.Join(lines, "\n"))
	}
	vals := sample(c.Series[0].Points, from, end, time.Minute, 20)
	for i, v := range vals {
		inGap := i >= 4 && i < 16
		if inGap != math.IsNaN(v) {
			t.Errorf("column %d = %v; want NaN only in the gap (columns 4-15)", i, v)
		}
	}
}

func TestSample(t *testing.T) {
	from := end.Add(-4 * time.Minute)
	pts := []Point{{from, 10}, {from.Add(time.Minute), 30}, {from.Add(2 * time.Minute), 50}, {from.Add(3 * time.Minute), 70}}
	for _, tc := range []struct {
		name string
		cols int
		want string
	}{
		{"a column a window", 4, "[10 30 50 70]"},
		{"two windows a column: their mean", 2, "[20 60]"},
		// Columns of half a minute: middles interpolate between the
		// windows' middles, and the ends keep the end windows' values.
		{"finer columns", 8, "[10 15 25 35 45 55 65 70]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(sample(pts, from, end, time.Minute, tc.cols)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		peak   float64
		n      int
		labels string
	}{
		{655, 4, "0 W,200 W,400 W,600 W,800 W"},
		{655, 1, "0 kW,1 kW"},
		{412, 2, "0 W,250 W,500 W"},
		{1520, 4, "0 W,500 W,1000 W,1500 W,2000 W"},
		{5600, 3, "0 kW,2 kW,4 kW,6 kW"},
		{9000, 4, "0.0 kW,2.5 kW,5.0 kW,7.5 kW,10.0 kW"},
		{38, 3, "0 W,20 W,40 W"},
		{0.3, 1, "0.0 W,0.5 W"},
		{0, 2, "0.0 W,0.5 W,1.0 W"}, // no readings: an axis all the same
	} {
		s := newScale(tc.peak, tc.n, "W")
		var got []string
		for _, v := range s.ticks() {
			got = append(got, s.label(v))
		}
		if strings.Join(got, ",") != tc.labels {
			t.Errorf("scale(%v, %d) = %s, want %s", tc.peak, tc.n, strings.Join(got, ","), tc.labels)
		}
	}
}

func TestTimeAxis(t *testing.T) {
	for _, tc := range []struct {
		span time.Duration
		w    int
		want time.Duration
	}{
		{time.Hour, 70, 10 * time.Minute},
		{time.Hour, 40, 15 * time.Minute},
		{24 * time.Hour, 70, 4 * time.Hour},
		{7 * 24 * time.Hour, 70, 24 * time.Hour},
		{30 * 24 * time.Hour, 70, 7 * 24 * time.Hour},
	} {
		if got := timeStep(tc.span, tc.w); got != tc.want {
			t.Errorf("timeStep(%s, %d) = %s, want %s", tc.span, tc.w, got, tc.want)
		}
	}
	// Ticks fall on round local times, midnights show the date.
	loc := time.FixedZone("IST", 5*3600+1800)
	c := Chart{From: time.Date(2026, 11, 20, 23, 7, 0, 0, loc), To: time.Date(2026, 11, 21, 0, 7, 0, 0, loc)}
	rule, names := c.timeAxis(60)
	if got := strings.Fields(names); fmt.Sprint(got) != "[23:10 23:20 23:30 23:40 23:50 Nov 21]" {
		t.Errorf("labels %v\n%s\n%s", got, rule, names)
	}
}

func TestBraille(t *testing.T) {
	g := newGrid(1, 1, true)
	for x := range 2 {
		for y := range 4 {
			g.dot(0, x, y)
		}
	}
	if got := g.line(0, []Series{{}}); got != "⣿" {
		t.Errorf("all dots = %q", got)
	}
	g = newGrid(1, 1, true)
	g.dot(0, 0, 0) // bottom left: dot 7
	g.dot(0, 1, 3) // top right: dot 4
	if got := g.line(0, []Series{{}}); got != "⡈" {
		t.Errorf("dots 7 and 4 = %q (%U)", got, []rune(got)[0])
	}
}

func TestTooSmall(t *testing.T) {
	c := Power(history(api.Range1h), end)
	for _, size := range [][2]int{{12, 10}, {80, 3}, {0, 0}} {
		lines := c.Render(size[0], size[1])
		requireSize(t, lines, size[0], size[1])
		if strings.TrimSpace(strings.Join(lines, "")) != "" {
			t.Errorf("%v: drew in too little room: %q", size, lines)
		}
	}
}

// TestPowerSkew checks that a history whose newest window ends after the
// client's clock (a clock behind the gateway's) is not cut off.
func TestPowerSkew(t *testing.T) {
	c := Power(history(api.Range1h), end.Add(-5*time.Minute))
	if !c.To.Equal(end) || !c.From.Equal(end.Add(-time.Hour)) {
		t.Errorf("range %s to %s", c.From, c.To)
	}
	if len(c.Series) != 4 || len(c.Series[1].Points) != 48 || c.Series[1].Label != "gpu1" {
		t.Errorf("series %d, gpu1 has %d points", len(c.Series), len(c.Series[1].Points))
	}
}
