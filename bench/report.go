package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// printTable writes the results for people: one row per path and
// scenario, then each path's overhead over direct, then what does not fit
// a latency table (notes, memory, counts) and the usage store.
func printTable(w io.Writer, r *report) {
	fmt.Fprintf(w, "\nsvc benchmark: %d CPUs (%s), %s, kernel %s, pinned=%v, %d run(s) of %s per path\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.GoVersion, r.Machine.Kernel, r.Machine.Pinned, r.Repeat, r.Duration)
	if r.Machine.SUTCPU > 0 {
		fmt.Fprintf(w, "the system under test held to %.2f of a core (-sut-cpu)\n", r.Machine.SUTCPU)
	}
	for _, s := range r.Skipped {
		fmt.Fprintln(w, "skipped:", s)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpath\trps\tok\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tttft p50\tgap p99\tSUT cpu\tµs/req\tSUT MiB\tstatuses\t")
	for _, sc := range r.Scenarios {
		if len(sc.Paths) == 0 {
			continue
		}
		names := slices.SortedFunc(maps.Keys(sc.Paths), func(a, b string) int { return cmp.Or(order(a)-order(b), strings.Compare(a, b)) })
		for _, n := range names {
			s := sc.Paths[n]
			rps, ok := "-", "-"
			if s.Achieved > 0 {
				rps, ok = fmt.Sprintf("%.0f", s.Achieved), fmt.Sprintf("%.1f%%", s.Success*100)
			}
			ttft, gap := "-", "-"
			if s.TTFT != nil {
				ttft = fmt.Sprintf("%.3f", s.TTFT.P50)
			}
			if s.Gap != nil {
				gap = fmt.Sprintf("%.3f", s.Gap.P99)
			}
			cpu, perReq, rss := "-", "-", "-"
			if s.CPU > 0 {
				cpu = fmt.Sprintf("%.0f%%", s.CPU*100)
			}
			if s.CPUPerRequest > 0 {
				perReq = fmt.Sprintf("%.1f", s.CPUPerRequest)
			}
			if s.PeakRSS > 0 {
				rss = fmt.Sprintf("%.0f", float64(s.PeakRSS)/(1<<20))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", sc.Name, n, rps, ok,
				s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Latency.P999, s.Latency.Max, ttft, gap, cpu, perReq, rss, histogram(s.Statuses))
		}
		for _, n := range names {
			if o, ok := sc.Overhead[n]; ok {
				differenceRow(tw, sc.Name, n+" − direct", o)
			}
		}
		for _, n := range []string{"svc", pathLeader} {
			if o, ok := sc.Forwarding[n]; ok {
				differenceRow(tw, sc.Name, pathForwarded+" − "+n, o)
			}
		}
	}
	tw.Flush()

	fmt.Fprintln(w)
	for _, sc := range r.Scenarios {
		if sc.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", sc.Name, sc.Note)
		}
		if sc.Ratio != nil && sc.Overhead["nginx"].P50 >= minRatioBase {
			fmt.Fprintf(w, "%s: svc's p50 overhead is %.1f times nginx's\n", sc.Name, *sc.Ratio)
		}
		if o, ok := sc.Forwarding[pathLeader]; ok {
			fmt.Fprintf(w, "%s: forwarding to the organisation's home on another replica adds %+.3f ms at p50, %+.3f ms at p99", sc.Name, o.P50, o.P99)
			if o.TTFT != nil {
				fmt.Fprintf(w, ", %+.3f ms to the first token", *o.TTFT)
			}
			if o.CPU != nil {
				fmt.Fprintf(w, ", %+.1f µs of CPU a request", *o.CPU)
			}
			fmt.Fprintln(w)
		}
		for _, n := range slices.Sorted(maps.Keys(sc.Paths)) {
			if e := sc.Paths[n].FirstError; e != "" {
				fmt.Fprintf(w, "%s: %s: first error: %s\n", sc.Name, n, e)
			}
		}
		for _, n := range []string{pathLeader, pathForwarded} {
			if s, ok := sc.Paths[n]; ok && s.DBCPU > 0 {
				fmt.Fprintf(w, "%s: %s: PostgreSQL used %.0f%% of a core, not counted in SUT cpu\n", sc.Name, n, s.DBCPU*100)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(sc.Extra)) {
			label := k // the value carries its unit
			for _, unit := range []string{"_us", "_ms", "_rps"} {
				label = strings.TrimSuffix(label, unit)
			}
			fmt.Fprintf(w, "%s: %s %s\n", sc.Name, strings.ReplaceAll(label, "_", " "), extraValue(k, sc.Extra[k]))
		}
	}
	if u := r.Usage; u != nil {
		fmt.Fprintf(w, "usage store: %d rows written at %.0f rows/s through the group-commit writer, %.0f MiB on disk; query time:",
			u.Rows, u.RowsPerSec, float64(u.DBBytes)/(1<<20))
		for _, k := range slices.Sorted(maps.Keys(u.QueryMs)) {
			fmt.Fprintf(w, " %s %.3f ms", k, u.QueryMs[k])
		}
		fmt.Fprintln(w)
	}
}

// histogram is a compact status count: "200×9950 429×50".
func histogram(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		code, _, _ := strings.Cut(k, "_")
		if code == "" || code[0] < '0' || code[0] > '9' {
			code = k // seen_by_engine, logged_499, error
		}
		parts = append(parts, fmt.Sprintf("%s×%d", code, m[k]))
	}
	return strings.Join(parts, " ")
}

// extraValue formats a scenario's extra figure by what its name says it is.
func extraValue(key string, v any) string {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case int:
		f = float64(n)
	case int64:
		f = float64(n)
	default:
		return fmt.Sprint(v)
	}
	switch {
	case strings.HasSuffix(key, "_share"):
		return fmt.Sprintf("%.1f%%", f*100)
	case strings.HasSuffix(key, "_ms"):
		return fmt.Sprintf("%.3f ms", f)
	case strings.HasSuffix(key, "_rps"):
		return fmt.Sprintf("%.0f requests/s", f)
	case strings.HasSuffix(key, "_us"):
		return fmt.Sprintf("%.1f µs", f)
	case strings.HasSuffix(key, "_per_request"):
		return fmt.Sprintf("%.1f", f)
	case strings.HasSuffix(key, "_per_stream"):
		return fmt.Sprintf("%.1f KB", f/1000)
	case strings.HasSuffix(key, "_bytes"):
		return fmt.Sprintf("%.1f MiB", f/(1<<20))
	case f == float64(int64(f)):
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.3f", f)
}

// differenceRow is one path's figures minus another's, under theirs.
func differenceRow(tw io.Writer, scenario, label string, o overhead) {
	ttft, gap, cpu := "", "", ""
	if o.TTFT != nil {
		ttft = fmt.Sprintf("%+.3f", *o.TTFT)
	}
	if o.Gap != nil {
		gap = fmt.Sprintf("%+.3f", *o.Gap)
	}
	if o.CPU != nil {
		cpu = fmt.Sprintf("%+.1f", *o.CPU)
	}
	fmt.Fprintf(tw, "%s\t%s\t\t\t%+.3f\t%+.3f\t%+.3f\t%+.3f\t\t%s\t%s\t\t%s\t\t\t\n", scenario, label, o.P50, o.P90, o.P99, o.P999, ttft, gap, cpu)
}

// order is where a path's rows go: the shortest way to the engine first.
func order(name string) int {
	switch name {
	case "direct":
		return 0
	case "nginx":
		return 1
	case "svc":
		return 2
	case pathLeader:
		return 3
	case pathForwarded:
		return 4
	}
	return 5
}
