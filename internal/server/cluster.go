package server

import (
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/cluster"
	"github.com/svc-dev/svc/internal/rental"
)

// Cluster is what the server knows of the cluster it is a replica of.
type Cluster struct {
	ReplicaID string
	// Lease is the replica's view of the leader lease (*cluster.Lease).
	Lease interface{ State() cluster.State }
	// Outbox tells what is recorded here and not yet in the database.
	Outbox func() (records int64, oldest time.Time)
	// Secret is the cluster's shared secret, which signs the request ids
	// of forwarded requests.
	Secret string
}

// standbyRetryAfter is the Retry-After of a standby's refusal: a load
// balancer's health checks move traffic to the leader within seconds.
const standbyRetryAfter = 2 * time.Second

// serveAt is where the call's API request is served: "" here, or the
// leader's URL when this replica stands by and forwards it there; err
// when it stands by and knows no leader to forward to.
func (s *Server) serveAt(c *call) (leader string, err error) {
	if s.cluster == nil {
		return "", nil
	}
	st := s.cluster.Lease.State()
	switch {
	case st.Leading:
		return "", nil
	case st.LeaderURL != "" && s.forwarder != nil:
		return st.LeaderURL, nil
	}
	return "", s.standby(c)
}

// standby is why this replica does not serve the API, nil when it does: it
// is a standby, or a leader that has stood down. Only a cluster has
// standbys.
func (s *Server) standby(c *call) error {
	if s.cluster == nil {
		return nil
	}
	st := s.cluster.Lease.State()
	if st.Leading {
		return nil
	}
	// The client's next request on this connection would come here
	// again: a load balancer places connections, not requests, so the
	// connection is closed for the next one to be placed afresh.
	c.ctx.SetConnectionClose()
	msg := "This gateway replica is a standby and does not serve the API; no replica leads the cluster yet"
	if st.LeaderURL != "" {
		c.ctx.Response.Header.Set("X-Svc-Leader", st.LeaderURL)
		msg = "This gateway replica is a standby and does not serve the API; the cluster's leader at " + st.LeaderURL + " does"
	}
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, Code: api.CodeStandby, CodeHeader: true,
		RetryAfter: standbyRetryAfter, Message: msg + ". Send requests through the cluster's load balancer."}
}

// leaderURL is where a standby sends workers; "" while it leads, is no
// cluster's, or knows no leader.
func (s *Server) leaderURL() (url string, standby bool) {
	if s.cluster == nil {
		return "", false
	}
	st := s.cluster.Lease.State()
	return st.LeaderURL, !st.Leading
}

// clusterHealth is the replica's part of /healthz.
func (s *Server) clusterHealth() *api.ClusterHealth {
	if s.cluster == nil {
		return nil
	}
	st := s.cluster.Lease.State()
	h := &api.ClusterHealth{ReplicaID: s.cluster.ReplicaID, Role: cluster.RoleStandby, Epoch: st.Epoch,
		Leader: st.LeaderID, LeaderURL: st.LeaderURL, DatabaseUnreachableS: st.Unconfirmed.Seconds()}
	if st.Leading {
		h.Role = cluster.RoleLeader
	}
	if s.cluster.Outbox != nil {
		n, oldest := s.cluster.Outbox()
		h.OutboxRecords = n
		if !oldest.IsZero() {
			h.OutboxOldest = &oldest
		}
	}
	return h
}

// ready answers /readyz: 200 while this server should be sent requests, 503
// while it drains or, in a cluster, stands by.
func (s *Server) ready(c *call) error {
	r := api.Readiness{Ready: true}
	switch url, standby := s.leaderURL(); {
	case s.draining.Load():
		r = api.Readiness{Reason: "draining"}
	case standby:
		// A standby forwards what reaches it, but a balancer should send
		// requests to the leader and spare them the extra hop.
		r = api.Readiness{Reason: "standby", LeaderURL: url}
	}
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(c.ctx, status, r)
	return nil
}

// SetRentals makes m the rental manager the API uses; nil while this
// replica stands by. A cluster's leader makes a new one for each term.
func (s *Server) SetRentals(m *rental.Manager) { s.rentals.Store(m) }

// rentalManager is the rental manager, or the answer owed while there is
// none.
func (s *Server) rentalManager(c *call) (*rental.Manager, error) {
	if m := s.rentals.Load(); m != nil {
		return m, nil
	}
	if err := s.standby(c); err != nil {
		return nil, err
	}
	return nil, &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: standbyRetryAfter,
		Message: "GPU rental is starting; retry in a moment"}
}

// StandDown closes every worker link: this replica no longer leads, and
// each worker reconnects through its gateway URL to be sent to the leader.
func (s *Server) StandDown() {
	for orgID, ids := range s.fleet.Connected() {
		for _, id := range ids {
			s.fleet.Disconnect(orgID, id, "this gateway replica no longer leads the cluster")
		}
	}
}

// clusterMetrics exports the replica's view of its cluster.
type clusterMetrics struct {
	c                                          *Cluster
	leader, epoch, unreachable, outbox, oldest *prometheus.Desc
}

func newClusterMetrics(c *Cluster) *clusterMetrics {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &clusterMetrics{c: c,
		leader:      d("svc_cluster_leader", "1 while this replica leads its cluster (holds the lease, or held it last and the database has not named another)."),
		epoch:       d("svc_cluster_epoch", "The epoch of the cluster's leader lease as this replica last read it; it grows by one at each change of leader."),
		unreachable: d("svc_cluster_database_unreachable_seconds", "How long the database has not answered this replica's lease renewals; 0 while it answers."),
		outbox:      d("svc_outbox_records", "Usage rows, events and power reports recorded on this replica and not yet shipped to the database."),
		oldest:      d("svc_outbox_oldest_age_seconds", "The age of the oldest record in the outbox; 0 when it is empty."),
	}
}

func (m *clusterMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.leader, m.epoch, m.unreachable, m.outbox, m.oldest} {
		ch <- d
	}
}

func (m *clusterMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.c.Lease.State()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	leading := 0.0
	if st.Leading {
		leading = 1
	}
	g(m.leader, leading)
	g(m.epoch, float64(st.Epoch))
	g(m.unreachable, st.Unconfirmed.Seconds())
	var n int64
	var oldest time.Time
	if m.c.Outbox != nil {
		n, oldest = m.c.Outbox()
	}
	g(m.outbox, float64(n))
	age := 0.0
	if !oldest.IsZero() {
		age = time.Since(oldest).Seconds()
	}
	g(m.oldest, age)
}

// reachProbe bounds the look a standby takes at its leader before sending
// a worker there.
const reachProbe = 300 * time.Millisecond

// reachable reports whether a TCP connection to the base URL's host opens.
func reachable(base string) bool {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return false
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	conn, err := net.DialTimeout("tcp", host, reachProbe)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
