package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// durationBuckets is one series of svc_http_request_duration_seconds as
// /metrics gives it: cumulative counts by upper bound, in seconds.
type durationBuckets map[float64]float64

// scrapeDurations reads the gateway's request-duration histogram for one
// route and status.
func scrapeDurations(ctx context.Context, c *http.Client, base, route, status string) (durationBuckets, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseDurations(resp.Body, route, status)
}

func parseDurations(r io.Reader, route, status string) (durationBuckets, error) {
	prefix := `svc_http_request_duration_seconds_bucket{`
	want := []string{`route="` + route + `"`, `status="` + status + `"`}
	b := durationBuckets{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		var le string
		match := 0
		for l := range strings.SplitSeq(labels, ",") {
			if v, ok := strings.CutPrefix(l, `le="`); ok {
				le = strings.TrimSuffix(v, `"`)
			}
			for _, w := range want {
				if l == w {
					match++
				}
			}
		}
		if match != len(want) || le == "" {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as infinity
		if err != nil {
			return nil, fmt.Errorf("metrics: bucket %q: %w", le, err)
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: count %q: %w", value, err)
		}
		b[bound] = n
	}
	return b, sc.Err()
}

// since is what was counted between before and b.
func (b durationBuckets) since(before durationBuckets) durationBuckets {
	d := durationBuckets{}
	for le, n := range b {
		d[le] = n - before[le]
	}
	return d
}

// within is the share counted at or under bound seconds, and the count.
func (b durationBuckets) within(bound float64) (share, total float64) {
	total = b[math.Inf(1)]
	if total == 0 {
		return 0, 0
	}
	return b[bound] / total, total
}

// quantileBound is the upper bound of the bucket that holds the q
// quantile: the quantile is at most this.
func (b durationBuckets) quantileBound(q float64) float64 {
	total := b[math.Inf(1)]
	bounds := make([]float64, 0, len(b))
	for le := range b {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	for _, le := range bounds {
		if b[le] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}
