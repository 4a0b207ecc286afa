package server

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/powerlog"
)

// PowerBook keeps the power windows workers report: in the history, and
// as the energy counters /metrics exports. It is the fleet's power sink.
type PowerBook struct {
	history *powerlog.Log
	energy  *prometheus.CounterVec

	mu sync.Mutex
	// channels are each worker's channels with an energy series: at most
	// api.MaxPowerChannels, however its windows' keys change, so that no
	// worker can grow the scrape without bound.
	channels map[string]map[string]struct{}
}

// NewPowerBook keeps the history in store.
func NewPowerBook(store powerlog.Store, log *slog.Logger) *PowerBook {
	return &PowerBook{history: powerlog.New(store, log), energy: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_worker_energy_joules_total",
		Help: "Energy each worker's power channels used, as its windows reached the gateway, by worker and channel.",
	}, []string{"worker_id", "channel"}), channels: map[string]map[string]struct{}{}}
}

// RecordPower records a report; the counters count what the history
// recorded, so a window sent again is not counted twice.
func (p *PowerBook) RecordPower(workerID string, rep api.PowerReport) {
	p.record(workerID, rep, time.Now())
}

func (p *PowerBook) record(workerID string, rep api.PowerReport, now time.Time) {
	for _, w := range p.history.Record(workerID, rep, now) {
		for _, s := range w.Sums {
			if p.exported(workerID, string(s.Key)) {
				p.energy.WithLabelValues(workerID, string(s.Key)).Add(s.Joules)
			}
		}
	}
}

// exported reports whether the worker's channel has, or may have, an
// energy series.
func (p *PowerBook) exported(workerID, key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.channels[workerID]
	if _, ok := set[key]; ok {
		return true
	}
	if len(set) >= api.MaxPowerChannels {
		return false
	}
	if set == nil {
		set = map[string]struct{}{}
		p.channels[workerID] = set
	}
	set[key] = struct{}{}
	return true
}

func (p *PowerBook) PowerThrough(workerID string) time.Time { return p.history.Through(workerID) }

// Forget drops the energy counters of a worker the fleet no longer lists:
// rentals come and go under new ids, and their series would otherwise
// stay in every scrape for the process's life. One that comes back starts
// its counters again from zero, a reset rate() reads as one. Its history
// stays in the store.
func (p *PowerBook) Forget(workerID string) {
	p.mu.Lock()
	delete(p.channels, workerID)
	p.mu.Unlock()
	p.energy.DeletePartialMatch(prometheus.Labels{"worker_id": workerID})
}

// liveWatts exports every connected worker's latest reading at scrape
// time, so a worker gone quiet drops out instead of holding its last value.
type liveWatts struct {
	fleet *fleet.Fleet
	desc  *prometheus.Desc
}

func newLiveWatts(f *fleet.Fleet) *liveWatts {
	return &liveWatts{fleet: f, desc: prometheus.NewDesc("svc_worker_power_watts",
		"Each connected worker's latest power reading, by channel (gpu0..., cpu or soc, system).",
		[]string{"worker_id", "worker_name", "channel", "method"}, nil)}
}

func (l *liveWatts) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *liveWatts) Collect(ch chan<- prometheus.Metric) {
	for _, w := range l.fleet.LivePower() {
		methods := map[string]string{}
		for _, c := range w.Power.Channels {
			methods[c.Key] = c.Method
		}
		for key, watts := range w.Power.Watts {
			ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, watts, w.WorkerID, w.WorkerName, key, methods[key])
		}
	}
}

// workerPower is GET /api/v1/workers/{worker_id}/power.
func (s *Server) workerPower(c *call) error {
	id := c.params.get("worker_id")
	if !s.ownsWorker(c, id) {
		return api.NotFound("No worker %s in this organisation", id)
	}
	rng := string(c.ctx.QueryArgs().Peek("range"))
	if rng == "" {
		rng = api.Range1h
	}
	h, err := s.power.history.History(id, rng, time.Now())
	if err != nil {
		return err
	}
	writeJSON(c.ctx, 200, h)
	return nil
}

// ownsWorker reports whether the worker is one of the caller's
// organisation's, connected or recently gone.
func (s *Server) ownsWorker(c *call, id string) bool {
	for _, w := range s.fleet.Workers(c.principal.OrgID) {
		if w.WorkerID == id {
			return true
		}
	}
	return false
}

// withEnergyToday adds to each worker's live reading what its machine used
// today, from the history. The reading is copied: the fleet's is shared.
func (s *Server) withEnergyToday(ws []api.Worker) {
	now := time.Now()
	for i := range ws {
		if ws[i].Power == nil {
			continue
		}
		if kwh, ok := s.power.history.TodayKWh(ws[i].WorkerID, now); ok {
			p := *ws[i].Power
			p.EnergyTodayKWh = &kwh
			ws[i].Power = &p
		}
	}
}
