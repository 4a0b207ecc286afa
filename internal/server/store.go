package server

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
)

// writeBacklog is the state of the store's writes: *bolt.Writer.
type writeBacklog interface {
	Backlog() bolt.Backlog
}

// storeRetryAfter is the Retry-After of a refusal for the store: a full
// disk is freed by a person, not in a second.
const storeRetryAfter = 5 * time.Second

// accounted refuses an inference request that could not be accounted
// for: while the store's write backlog is at its bound, its usage row
// would have nowhere to wait. Nothing is served, so nothing is recorded.
func (s *Server) accounted(next func(*call) error) func(*call) error {
	return func(c *call) error {
		if err := s.storeRefusal(); err != nil {
			s.metrics.storeRefused.Inc()
			c.rowed = true
			return err
		}
		return next(c)
	}
}

// storeRefusal is the 503 of a request refused for the store, or nil when
// the store takes rows.
func (s *Server) storeRefusal() error {
	if s.writes == nil {
		return nil
	}
	b := s.writes.Backlog()
	if !b.Refusing {
		return nil
	}
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: storeRetryAfter,
		Message: "Service temporarily unavailable, please retry: usage store unavailable: " + storeCause(b) +
			"; requests are refused rather than served unaccounted"}
}

// storeCause says why the store is behind: why its commits fail, or,
// when none failed, that they are slower than the traffic.
func storeCause(b bolt.Backlog) string {
	if c := b.Cause(); c != "" {
		return c
	}
	return "writes are behind"
}

// behindError is the answer to a usage read while the rows it should
// see wait to be written.
func (s *Server) behindError(err error) error {
	msg := "The usage log is behind on writing; retry in a moment"
	if errors.Is(err, bolt.ErrBehind) && s.writes != nil {
		msg = "The usage log is behind on writing (usage store unavailable: " + storeCause(s.writes.Backlog()) +
			"); rows are kept and written when it recovers; retry in a moment"
	}
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: time.Second, Message: msg, Err: err}
}

// storeHealth is what /healthz tells of b.
func storeHealth(b bolt.Backlog) *api.StoreHealth {
	h := &api.StoreHealth{State: api.StoreOK,
		PendingUsageRows: b.UsageRows, PendingEvents: b.Events, PendingPowerReports: b.PowerReports,
		BacklogBytes: b.Bytes, BacklogLimitBytes: b.Limit,
		FailedCommits: b.FailedCommits, DroppedEvents: b.DroppedEvents, DroppedPowerReports: b.DroppedPower}
	if b.Failing {
		h.State, h.Error = api.StoreRetrying, storeCause(b)
		since := b.Since.UTC()
		h.FailingSince = &since
	}
	if b.Refusing {
		h.State, h.Error = api.StoreRefusing, storeCause(b)
	}
	return h
}

// storeMetrics exports the store's write backlog at scrape time.
type storeMetrics struct {
	writes                                   writeBacklog
	pending, bytes, limit, failing, refusing *prometheus.Desc
	failed, dropped, rejected                *prometheus.Desc
}

func newStoreMetrics(w writeBacklog) *storeMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &storeMetrics{writes: w,
		pending:  d("svc_store_pending_records", "Records waiting to be written to the store, by kind (usage, event, power); above zero for long only while its writes fail.", "kind"),
		bytes:    d("svc_store_backlog_bytes", "Memory held by the records waiting to be written, estimated."),
		limit:    d("svc_store_backlog_limit_bytes", "The bound on svc_store_backlog_bytes, at which new inference is refused with 503."),
		failing:  d("svc_store_failing", "1 while the store's commits fail (a full disk): records are kept and retried."),
		refusing: d("svc_store_refusing", "1 while the write backlog is at its bound and new inference is refused."),
		failed:   d("svc_store_failed_commits_total", "Store commits that failed; their records were kept and retried."),
		dropped:  d("svc_store_dropped_records_total", "Records dropped because the write backlog was at its bound, by kind (event, power); usage rows never are.", "kind"),
		rejected: d("svc_store_rejected_records_total", "Records the store refused on their own (never retried)."),
	}
}

func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.pending, m.bytes, m.limit, m.failing, m.refusing, m.failed, m.dropped, m.rejected} {
		ch <- d
	}
}

func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	b := m.writes.Backlog()
	flag := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g(m.pending, float64(b.UsageRows), "usage")
	g(m.pending, float64(b.Events), "event")
	g(m.pending, float64(b.PowerReports), "power")
	g(m.bytes, float64(b.Bytes))
	g(m.limit, float64(b.Limit))
	g(m.failing, flag(b.Failing))
	g(m.refusing, flag(b.Refusing))
	c(m.failed, b.FailedCommits)
	c(m.dropped, b.DroppedEvents, "event")
	c(m.dropped, b.DroppedPower, "power")
	c(m.rejected, b.Rejected)
}
