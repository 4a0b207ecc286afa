package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/cluster"
)

type leaseAt cluster.State

func (l leaseAt) State() cluster.State { return cluster.State(l) }

// A standby answers the API with the spec's 503, naming the leader, and
// closes the connection, so that a load balancer places the client's next
// one on the leader; only the leader is ready; /readyz of a single host is ready until it
// drains.
func TestStandbyAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  *Cluster
		draining bool
		serves   bool
		ready    bool
		leader   string
	}{
		{name: "single host", serves: true, ready: true},
		{name: "single host draining", draining: true, serves: true},
		{name: "leader", cluster: &Cluster{Lease: leaseAt{Leading: true, Epoch: 3, LeaderID: "a", LeaderURL: "http://a:8080"}}, serves: true, ready: true},
		{name: "standby", cluster: &Cluster{Lease: leaseAt{Epoch: 3, LeaderID: "a", LeaderURL: "http://a:8080"}}, leader: "http://a:8080"},
		{name: "standby, no leader yet", cluster: &Cluster{Lease: leaseAt{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{metrics: newMetrics(buildinfo.Info{}), cluster: tc.cluster}
			s.draining.Store(tc.draining)
			ctx := &fasthttp.RequestCtx{}
			err := s.standby(&call{ctx: ctx})
			if (err == nil) != tc.serves {
				t.Fatalf("standby = %v, want serving %v", err, tc.serves)
			}
			if err != nil {
				answerError(ctx, asAPIError(err, "req-1"), formCompatible)
				var body struct {
					Error struct{ Type, Code, Message string } `json:"error"`
				}
				if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
					t.Fatal(err)
				}
				h := &ctx.Response.Header
				if ctx.Response.StatusCode() != http.StatusServiceUnavailable || string(h.Peek("Retry-After")) != "2" ||
					body.Error.Type != api.TypeServiceUnavailable || body.Error.Code != api.CodeStandby ||
					string(h.Peek("X-Svc-Error-Code")) != api.CodeStandby || string(h.Peek("X-Svc-Leader")) != tc.leader ||
					!h.ConnectionClose() {
					t.Fatalf("answered %d %s\n%s", ctx.Response.StatusCode(), h.String(), ctx.Response.Body())
				}
			}

			ctx = &fasthttp.RequestCtx{}
			if err := s.ready(&call{ctx: ctx}); err != nil {
				t.Fatal(err)
			}
			var r api.Readiness
			if err := json.Unmarshal(ctx.Response.Body(), &r); err != nil {
				t.Fatal(err)
			}
			want := http.StatusServiceUnavailable
			if tc.ready {
				want = http.StatusOK
			}
			if ctx.Response.StatusCode() != want || r.Ready != tc.ready || r.LeaderURL != tc.leader {
				t.Fatalf("/readyz = %d %+v", ctx.Response.StatusCode(), r)
			}
		})
	}
}

func TestClusterHealthAndMetrics(t *testing.T) {
	oldest := time.Now().Add(-3 * time.Second)
	c := &Cluster{ReplicaID: "b", Lease: leaseAt{Epoch: 7, LeaderID: "a", LeaderURL: "http://a:8080", Unconfirmed: 4 * time.Second},
		Outbox: func() (int64, time.Time) { return 12, oldest }}
	s := &Server{metrics: newMetrics(buildinfo.Info{}), cluster: c}
	h := s.clusterHealth()
	if h.Role != cluster.RoleStandby || h.Epoch != 7 || h.Leader != "a" || h.OutboxRecords != 12 || h.DatabaseUnreachableS != 4 ||
		h.OutboxOldest == nil || !h.OutboxOldest.Equal(oldest) {
		t.Fatalf("health = %+v", h)
	}
	m := newClusterMetrics(c)
	if n := testutil.CollectAndCount(m); n != 5 {
		t.Fatalf("%d metrics, want 5", n)
	}
	want := `
# HELP svc_cluster_epoch The epoch of the cluster's leader lease as this replica last read it; it grows by one at each change of leader.
# TYPE svc_cluster_epoch gauge
svc_cluster_epoch 7
# HELP svc_cluster_leader 1 while this replica leads its cluster (holds the lease, or held it last and the database has not named another).
# TYPE svc_cluster_leader gauge
svc_cluster_leader 0
# HELP svc_outbox_records Usage rows, events and power reports recorded on this replica and not yet shipped to the database.
# TYPE svc_outbox_records gauge
svc_outbox_records 12
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "svc_cluster_epoch", "svc_cluster_leader", "svc_outbox_records"); err != nil {
		t.Fatal(err)
	}
}

// A request id forwarded by a replica is taken only with the cluster's
// signature; a client cannot choose its own.
func TestForwardedRequestID(t *testing.T) {
	f := newForwarder("s3cret")
	other := newForwarder("another")
	for _, tc := range []struct {
		name, header, want string
	}{
		{"signed by a replica", "req-1." + f.sign("req-1"), "req-1"},
		{"absent", "", ""},
		{"signed with another secret", "req-1." + other.sign("req-1"), ""},
		{"signature of another id", "req-2." + f.sign("req-1"), ""},
		{"no signature", "req-1", ""},
		{"empty id", "." + f.sign(""), ""},
		{"id too long", strings.Repeat("x", 65) + "." + f.sign(strings.Repeat("x", 65)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := &fasthttp.RequestCtx{}
			if tc.header != "" {
				ctx.Request.Header.Set(forwardHeader, tc.header)
			}
			if got := f.forwardedID(ctx); got != tc.want {
				t.Fatalf("forwardedID = %q, want %q", got, tc.want)
			}
		})
	}
	var none *forwarder
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.Set(forwardHeader, "req-1."+f.sign("req-1"))
	if got := none.forwardedID(ctx); got != "" {
		t.Fatalf("a single host took the forwarded id %q", got)
	}
}

// A standby that knows its leader forwards; one that knows none refuses.
func TestStandbyServesAt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   cluster.State
		forward bool
		want    string
		refused bool
	}{
		{name: "leader", state: cluster.State{Leading: true, LeaderURL: "http://a"}, forward: true},
		{name: "standby forwarding", state: cluster.State{LeaderURL: "http://a"}, forward: true, want: "http://a"},
		{name: "standby, no leader", state: cluster.State{}, forward: true, refused: true},
		{name: "standby without a secret", state: cluster.State{LeaderURL: "http://a"}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{metrics: newMetrics(buildinfo.Info{}), cluster: &Cluster{Lease: leaseAt(tc.state)}}
			if tc.forward {
				s.forwarder = newForwarder("s")
			}
			got, err := s.serveAt(&call{ctx: &fasthttp.RequestCtx{}})
			if got != tc.want || (err != nil) != tc.refused {
				t.Fatalf("serveAt = %q, %v", got, err)
			}
		})
	}
}
