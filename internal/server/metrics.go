package server

import (
	"crypto/subtle"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/relay"
)

// metrics is the server's Prometheus registry. It is its own registry, not
// the library's global one, so tests and several servers in one process do
// not collide.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// storeRefused counts inference refused because the store's write
	// backlog was at its bound.
	storeRefused prometheus.Counter
	// rateLimited counts inference refused for its organisation's
	// requests_per_minute: a 429 that says nothing of the fleet's
	// capacity, which the capacity 429s in requests do.
	rateLimited prometheus.Counter
	stalls      prometheus.Counter
	// overCap counts the connections refused at --max-connections.
	overCap prometheus.Counter
	// forwards counts the requests this replica sent to the replica that
	// serves them, by outcome (forwarded, not_home, unreachable, lost).
	forwards *prometheus.CounterVec
	serve    func(*call) error
	// series holds each (route, method, status)'s two children of requests
	// and latency once looked up: finding them by their label values
	// hashes the values and takes the vectors' locks, every request.
	series sync.Map // seriesKey -> *series
	// outcomes counts inference requests by the status of their usage
	// row, which a stream that failed after it started carries where its
	// HTTP status says 200.
	outcomes *prometheus.CounterVec
	// served times the requests a worker served, by request type and
	// model: what an operator compares models and engines by.
	served servedTimes
}

// servedTimes are the histograms of served requests' timings.
type servedTimes struct {
	duration, firstToken, queueWait *prometheus.HistogramVec
}

type seriesKey struct {
	route, method string
	status        int
}

type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

func newMetrics(build buildinfo.Info) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_http_requests_total",
		Help: "HTTP requests answered, by route pattern, method and status code.",
	}, []string{"route", "method", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "svc_http_request_duration_seconds",
		Help: "Time from receiving a request to its handler returning, by route pattern and status code: a 429 that takes as long as an answer is overload handled too late.",
		// From sub-millisecond gateway answers to half-hour generations.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	}, []string{"route", "status"})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_requests_total",
		Help: "Inference requests, by request type and the status of their usage row: a capacity 429, a lost worker's 503 or a cut-off 502 inside a stream that had started counts with that status here, where svc_http_requests_total counts the 200 the stream began with.",
	}, []string{"request_type", "status"})
	m.storeRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_store_refused_requests_total",
		Help: "Inference requests refused with 503 because the store's write backlog was at its bound.",
	})
	m.rateLimited = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_rate_limited_requests_total",
		Help: "Inference requests refused with 429 because their organisation was over its requests_per_minute; the other 429s are the fleet's capacity.",
	})
	m.stalls = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_client_stalls_total",
		Help: "Connections cut off because their client took no byte of a response for the stall timeout.",
	})
	m.overCap = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_connections_refused_total",
		Help: "Public connections answered 503 and closed because the gateway held --max-connections already.",
	})
	m.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_forwarded_requests_total",
		Help: "API requests this replica sent to the replica that serves them (the organisation's home, or the leader for rentals), by outcome: forwarded, not_home (refused before running, tried again), unreachable (no link to it: answered 503, nothing sent), or lost (the link's session was lost before its answer began: answered 503, not sent again).",
	}, []string{"outcome"})
	// From a sub-second embedding to a half-hour generation.
	servedBuckets := []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
	m.served = servedTimes{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "svc_inference_duration_seconds",
			Help:    "Whole time of inference requests a worker served (its usage row's request_duration_ms, a stream's end included), by request type and model, whatever their status.",
			Buckets: servedBuckets,
		}, []string{"request_type", "model"}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "svc_inference_time_to_first_token_seconds",
			Help:    "Time to the first token of served requests that had one (time_to_first_token_ms), by request type and model.",
			Buckets: servedBuckets,
		}, []string{"request_type", "model"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "svc_inference_queue_wait_seconds",
			Help:    "Wait of served requests before generation started (queue_wait_ms: the gateway's queue and the worker's), by request type and model.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"request_type", "model"}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svc_build_info",
		Help: "The running build; always 1.",
	}, []string{"version", "commit", "goversion"})
	info.WithLabelValues(build.Version, build.Commit, build.Go).Set(1)
	m.reg.MustRegister(m.requests, m.latency, m.outcomes, m.served.duration, m.served.firstToken, m.served.queueWait, m.storeRefused, m.rateLimited, m.stalls, m.overCap, m.forwards, info,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	m.serve = func(c *call) error { h(c.ctx); return nil }
	return m
}

func (m *metrics) observe(route, method string, status int, d time.Duration) {
	k := seriesKey{route: route, method: metricMethod(method), status: status}
	v, ok := m.series.Load(k)
	if !ok {
		code := strconv.Itoa(status)
		v, _ = m.series.LoadOrStore(k, &series{
			requests: m.requests.WithLabelValues(k.route, k.method, code),
			latency:  m.latency.WithLabelValues(k.route, code),
		})
	}
	s := v.(*series)
	s.requests.Inc()
	s.latency.Observe(d.Seconds())
}

// countedUsage is the usage recorder that also counts each row's outcome
// in svc_requests_total (every inference request has one row, whatever
// became of it) and times the requests a worker served.
type countedUsage struct {
	relay.Recorder
	outcomes *prometheus.CounterVec
	served   servedTimes
	// counters caches each series' counter, and timers each (type,
	// model)'s histograms, as series does the HTTP ones: the vector's
	// lookup hashes its labels under a lock.
	counters *sync.Map // outcomeKey -> prometheus.Counter
	timers   *sync.Map // timerKey -> *timers
	// timed counts timers' entries but "other", held to maxTimedModels:
	// past it, a new model is timed as "other".
	timed *atomic.Int32
}

// maxTimedModels bounds the (request type, model) series of the served
// timings: workers name their models, and a fleet whose workers listed
// thousands over a gateway's life must not make /metrics as large.
const maxTimedModels = 500

type outcomeKey struct {
	requestType string
	status      int
}

type timerKey struct{ requestType, model string }

type timers struct{ duration, firstToken, queueWait prometheus.Observer }

func newCountedUsage(r relay.Recorder, m *metrics) countedUsage {
	return countedUsage{Recorder: r, outcomes: m.outcomes, served: m.served, counters: &sync.Map{}, timers: &sync.Map{}, timed: &atomic.Int32{}}
}

func (u countedUsage) Record(orgID string, row api.UsageRow) {
	k := outcomeKey{requestType: metricRequestType(row.RequestType), status: row.StatusCode}
	c, ok := u.counters.Load(k)
	if !ok {
		c, _ = u.counters.LoadOrStore(k, u.outcomes.WithLabelValues(k.requestType, strconv.Itoa(k.status)))
	}
	c.(prometheus.Counter).Inc()
	// Only a model a worker served is a label: one a client names is
	// any text, and would grow the series without bound.
	if row.WorkerID != "" && api.ValidModelID(row.Model) {
		u.time(k.requestType, &row)
	}
	u.Recorder.Record(orgID, row)
}

func (u countedUsage) time(requestType string, row *api.UsageRow) {
	k := timerKey{requestType: requestType, model: row.Model}
	v, ok := u.timers.Load(k)
	if !ok && u.timed.Add(1) > maxTimedModels {
		u.timed.Add(-1)
		k.model = "other"
		v, ok = u.timers.Load(k)
	}
	if !ok {
		var loaded bool
		v, loaded = u.timers.LoadOrStore(k, &timers{
			duration:   u.served.duration.WithLabelValues(k.requestType, k.model),
			firstToken: u.served.firstToken.WithLabelValues(k.requestType, k.model),
			queueWait:  u.served.queueWait.WithLabelValues(k.requestType, k.model),
		})
		if loaded && k.model != "other" {
			// Another record stored this model first, and counted it.
			u.timed.Add(-1)
		}
	}
	t := v.(*timers)
	t.duration.Observe(float64(row.RequestDurationMs) / 1000)
	if row.TimeToFirstTokenMs != nil {
		t.firstToken.Observe(float64(*row.TimeToFirstTokenMs) / 1000)
	}
	if row.QueueWaitMs != nil {
		t.queueWait.Observe(float64(*row.QueueWaitMs) / 1000)
	}
}

// metricRequestType bounds the request_type label to the kinds the gateway
// serves.
func metricRequestType(t string) string {
	if len(t) > 32 || strings.IndexFunc(t, func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' }) >= 0 {
		return "other"
	}
	return t
}

// metricMethod is the method label of a request: any method a client
// invents is "other", so that inventing them cannot grow the series
// without bound.
func metricMethod(method string) string {
	switch method {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodPost, fasthttp.MethodPut,
		fasthttp.MethodPatch, fasthttp.MethodDelete, fasthttp.MethodOptions:
		return method
	}
	return "other"
}

// serveMetrics serves the metrics, to the bearer of the metrics token
// when there is one: their labels name every organisation's workers and
// models, which an operator whose proxy cannot keep /metrics off the
// public address (workers must reach the same one) keeps to Prometheus.
func (s *Server) serveMetrics(c *call) error {
	if s.metricsToken != nil {
		switch token := apiKey(c.ctx); {
		case token == "":
			return errNoMetricsToken
		case subtle.ConstantTimeCompare([]byte(token), s.metricsToken) != 1:
			return errBadMetricsToken
		}
	}
	return s.metrics.serve(c)
}

var (
	errNoMetricsToken = &api.Error{Kind: api.KindUnauthenticated, Code: "missing_metrics_token",
		Message: "This gateway serves its metrics to the bearer of its metrics token (--metrics-token-file): send it as Authorization: Bearer <TOKEN>"}
	errBadMetricsToken = &api.Error{Kind: api.KindUnauthenticated, Code: "invalid_metrics_token",
		Message: "Invalid metrics token: send the token of the gateway's --metrics-token-file"}
)

// concurrencyLimits exports each connected worker's adaptive concurrency
// limit per model at scrape time, like liveWatts.
type concurrencyLimits struct {
	fleet *fleet.Fleet
	desc  *prometheus.Desc
}

func newConcurrencyLimits(f *fleet.Fleet) *concurrencyLimits {
	return &concurrencyLimits{fleet: f, desc: prometheus.NewDesc("svc_worker_concurrency_limit",
		"How many requests for a model each connected worker is given at once: its max_concurrent, or fewer while its latency shows requests queueing in its engine.",
		[]string{"worker_id", "worker_name", "model"}, nil)}
}

func (c *concurrencyLimits) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *concurrencyLimits) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.fleet.ConcurrencyLimits() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(l.Limit), l.WorkerID, l.WorkerName, l.Model)
	}
}

// newClockSteps exports how many steps of the system clock the gateway
// has seen.
func newClockSteps(steps func() uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "svc_clock_steps_total",
		Help: "Steps of the system clock (2 s or more) seen while the gateway ran; billing, deadlines and pruning keep to the monotonic clock through them.",
	}, func() float64 { return float64(steps()) })
}
