package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/cluster"
)

// Cluster is what the server knows of the cluster it is a replica of.
type Cluster struct {
	ReplicaID string
	// Lease is the replica's view of the leader lease (*cluster.Lease):
	// the leader runs the cluster's once-only duties (pruning, sweeping
	// the rental providers).
	Lease interface{ State() cluster.State }
	// Homes is the replica's view of the organisations' homes
	// (*cluster.Homes): an organisation's workers link to its home, which
	// alone serves its requests.
	Homes Homes
	// Outbox tells what is recorded here and not yet in the database.
	Outbox func() (records int64, oldest time.Time)
	// Secret is the cluster's shared secret, which the replicas' links
	// prove they hold.
	Secret string
}

// Homes is the replica's view of the organisations' homes.
type Homes interface {
	Where(ctx context.Context, orgID string) (cluster.Home, error)
	// Lookup is the home as known, without claiming one.
	Lookup(orgID string) (cluster.Home, bool)
	Forget(orgID string)
	// ForgetUnreachable is Forget for a home that could not be reached,
	// at most once in a short while; it reports whether it forgot.
	ForgetUnreachable(orgID string) bool
	Count() int
}

// homeRetryAfter is the Retry-After of a request whose organisation's home
// is being replaced: a dead home's registration lapses within the lease
// TTL, and the organisation's workers reconnect to the next.
const homeRetryAfter = 2 * time.Second

// serveAt is where the call's API request is served: the zero target
// here, or the replica that serves it, to forward it to. The
// organisation's requests, its rentals' too, are its home's to serve. A
// request forwarded here by a peer is served here or refused, never
// forwarded on.
func (s *Server) serveAt(c *call) (target, error) {
	if s.cluster == nil {
		return target{}, nil
	}
	h, err := s.cluster.Homes.Where(context.Background(), c.principal.OrgID)
	switch {
	case err == nil && h.ReplicaID == s.cluster.ReplicaID:
		return target{}, nil
	case err == nil && c.forwarded:
		// The peer thought this replica the home; it is told where the
		// home is, and asks again.
		return target{}, s.notHome(c, "This gateway replica is not the organisation's home")
	case err == nil:
		return target{id: h.ReplicaID, url: h.AdvertiseURL}, nil
	case errors.Is(err, cluster.ErrReleased):
		return target{}, s.notHome(c, "This gateway replica is stopping and serves no organisation it is not already serving")
	}
	return target{}, s.homeUnknown(c, c.principal.OrgID, err)
}

// homeUnknown is the answer owed when the database cannot say where
// orgID is served: to a request, and to a worker's link request.
func (s *Server) homeUnknown(c *call, orgID string, err error) error {
	s.log.Warn("cluster: cannot find an organisation's home", "org", orgID, "err", err)
	c.ctx.SetConnectionClose()
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, RetryAfter: homeRetryAfter,
		Message: "This gateway replica cannot reach the cluster's database to find where the organisation is served; retry"}
}

// notHome refuses a request before anything of it ran: its organisation
// is served by another replica. A forwarding peer retries elsewhere on it.
func (s *Server) notHome(c *call, msg string) error {
	c.ctx.SetConnectionClose()
	c.ctx.Response.Header.Set(notHomeHeader, "1")
	return &api.Error{Kind: api.KindUnavailable, Type: api.TypeServiceUnavailable, Code: api.CodeNotHome, CodeHeader: true,
		RetryAfter: homeRetryAfter, Message: msg + "; retry through the cluster's load balancer"}
}

// notHomeHeader marks a refusal made before the request ran: the one
// answer on which a forwarding replica may send the request elsewhere.
const notHomeHeader = "X-Svc-Not-Home"

// clusterHealth is the replica's part of /healthz.
func (s *Server) clusterHealth() *api.ClusterHealth {
	if s.cluster == nil {
		return nil
	}
	st := s.cluster.Lease.State()
	h := &api.ClusterHealth{ReplicaID: s.cluster.ReplicaID, Role: cluster.RoleStandby, Epoch: st.Epoch,
		Leader: st.LeaderID, LeaderURL: st.LeaderURL, DatabaseUnreachableS: st.Unconfirmed.Seconds(),
		Homes: s.cluster.Homes.Count()}
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
// while it drains. Every replica of a cluster serves: it forwards what
// another replica serves, and names the peers it could not reach.
func (s *Server) ready(c *call) error {
	r := api.Readiness{Ready: true}
	if s.draining.Load() {
		r = api.Readiness{Reason: "draining"}
	}
	if s.cluster != nil {
		r.UnreachablePeers = s.UnreachablePeers()
		if r.Ready && len(r.UnreachablePeers) > 0 {
			r.Reason = "some peer replicas do not answer: the organisations homed there get 503 here until they move"
		}
	}
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(c.ctx, status, r)
	return nil
}

// SendWorkersAway asks every worker linked here to finish its running
// requests and reconnect through its gateway URL: this replica is
// stopping, and their organisations' new homes are where they land.
func (s *Server) SendWorkersAway() int {
	return s.fleet.SendAway("the gateway replica is stopping; reconnect through the configured gateway")
}

// UnreachablePeers are the peer replicas this one could not link to
// lately.
func (s *Server) UnreachablePeers() []string {
	if s.peers == nil {
		return nil
	}
	return s.peers.Unreachable(time.Now())
}

// SendOrgAway asks an organisation's workers to finish their running
// requests and reconnect through their gateway URL: the organisation
// asks for another region, where it will be homed.
func (s *Server) SendOrgAway(orgID string) {
	n := s.fleet.SendAwayOrg(orgID, "the organisation's home_region is served by another gateway replica; reconnect through the configured gateway")
	s.log.Info("cluster: sent an organisation's workers to its home_region", "org", orgID, "workers", n)
}

// LeaveOrg sends away an organisation's workers: another replica became
// its home, and each worker, once its running requests are done,
// reconnects through its gateway URL to be sent there. Links still here
// after leaveWithin are closed.
func (s *Server) LeaveOrg(orgID string) {
	n := s.fleet.LeaveOrg(orgID, "another gateway replica is now the organisation's home; reconnect through the configured gateway", leaveWithin)
	s.log.Info("cluster: sent away the workers of an organisation homed elsewhere now", "org", orgID, "workers", n)
}

// leaveWithin is how long a worker sent away from an organisation homed
// elsewhere may finish its requests here. Its new home routes it nothing
// until it arrives, so this is short next to a drain: long enough for
// most answers, not for a stream that runs on for minutes.
const leaveWithin = 30 * time.Second

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

// reachProbe bounds the look a replica takes at an organisation's home
// before sending a worker there.
const reachProbe = 300 * time.Millisecond

// hostPort is u's host and port, the scheme's port when u names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// reachable reports whether a TCP connection to the base URL's host opens.
func reachable(base string) bool {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return false
	}
	conn, err := net.DialTimeout("tcp", hostPort(u), reachProbe)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
