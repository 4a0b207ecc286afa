package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	b := durationBuckets{}
	for _, m := range families["svc_http_request_duration_seconds"].GetMetric() {
		if label(m, "route") != route || label(m, "status") != status {
			continue
		}
		h := m.GetHistogram()
		for _, bk := range h.GetBucket() {
			b[bk.GetUpperBound()] = float64(bk.GetCumulativeCount())
		}
		b[math.Inf(1)] = float64(h.GetSampleCount())
	}
	return b, nil
}

// label is the value of m's label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
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
