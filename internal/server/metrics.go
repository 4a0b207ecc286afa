package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/svc-dev/svc/internal/buildinfo"
)

// metrics is the server's Prometheus registry. It is its own registry, not
// the library's global one, so tests and several servers in one process do
// not collide.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	serve    func(*call) error
}

func newMetrics(build buildinfo.Info) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_http_requests_total",
		Help: "HTTP requests answered, by route pattern, method and status code.",
	}, []string{"route", "method", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "svc_http_request_duration_seconds",
		Help: "Time from receiving a request to its handler returning, by route pattern.",
		// From sub-millisecond gateway answers to half-hour generations.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	}, []string{"route"})
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svc_build_info",
		Help: "The running build; always 1.",
	}, []string{"version", "commit", "goversion"})
	info.WithLabelValues(build.Version, build.Commit, build.Go).Set(1)
	m.reg.MustRegister(m.requests, m.latency, info,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	m.serve = func(c *call) error { h(c.ctx); return nil }
	return m
}

func (m *metrics) observe(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

func (s *Server) serveMetrics(c *call) error { return s.metrics.serve(c) }
