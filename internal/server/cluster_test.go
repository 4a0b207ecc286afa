package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/cluster"
)

type leaseAt cluster.State

func (l leaseAt) State() cluster.State { return cluster.State(l) }

// A replica that does not lead answers a leader's request (the rentals)
// with the spec's 503, naming the leader, and closes the connection, so
// that the client's next one is placed afresh.
func TestStandbyAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster *Cluster
		serves  bool
		leader  string
	}{
		{name: "single host", serves: true},
		{name: "leader", cluster: &Cluster{Lease: leaseAt{Leading: true, Epoch: 3, LeaderID: "a", LeaderURL: "http://a:8080"}}, serves: true},
		{name: "standby", cluster: &Cluster{Lease: leaseAt{Epoch: 3, LeaderID: "a", LeaderURL: "http://a:8080"}}, leader: "http://a:8080"},
		{name: "standby, no leader yet", cluster: &Cluster{Lease: leaseAt{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{metrics: newMetrics(buildinfo.Info{}), cluster: tc.cluster}
			ctx := &fasthttp.RequestCtx{}
			err := s.standby(&call{ctx: ctx})
			if (err == nil) != tc.serves {
				t.Fatalf("standby = %v, want serving %v", err, tc.serves)
			}
			if err != nil {
				checkRefusal(t, ctx, err, api.CodeStandby)
				if got := string(ctx.Response.Header.Peek("X-Svc-Leader")); got != tc.leader {
					t.Fatalf("X-Svc-Leader %q, want %q", got, tc.leader)
				}
			}
		})
	}
}

// checkRefusal checks err answers as the spec's 503 with code, Retry-After
// and the connection closed.
func checkRefusal(t *testing.T, ctx *fasthttp.RequestCtx, err error, code string) {
	t.Helper()
	answerError(ctx, asAPIError(err, "req-1"), formCompatible)
	var body struct {
		Error struct{ Type, Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
		t.Fatal(err)
	}
	h := &ctx.Response.Header
	if ctx.Response.StatusCode() != http.StatusServiceUnavailable || string(h.Peek("Retry-After")) != "2" ||
		body.Error.Type != api.TypeServiceUnavailable || body.Error.Code != code ||
		(code != "" && string(h.Peek("X-Svc-Error-Code")) != code) || !h.ConnectionClose() {
		t.Fatalf("answered %d %s\n%s", ctx.Response.StatusCode(), h.String(), ctx.Response.Body())
	}
}

// homesAt answers Where from a fixed table.
type homesAt struct {
	homes map[string]cluster.Home
	err   error
}

func (h homesAt) Where(_ context.Context, org string) (cluster.Home, error) {
	return h.homes[org], h.err
}
func (h homesAt) Lookup(org string) (cluster.Home, bool) {
	x, ok := h.homes[org]
	return x, ok
}
func (homesAt) Forget(string) {}
func (h homesAt) Count() int  { return len(h.homes) }

// An organisation's request is served at its home: here, forwarded to
// the live home elsewhere, refused as not_home when a peer forwarded it
// here wrongly or this replica is stopping, and a 503 when the database
// cannot say. Rentals go to the leader.
func TestServeAt(t *testing.T) {
	homes := homesAt{homes: map[string]cluster.Home{
		"mine":  {OrgID: "mine", ReplicaID: "b", Alive: true, AdvertiseURL: "http://b"},
		"other": {OrgID: "other", ReplicaID: "a", Alive: true, AdvertiseURL: "http://a"},
	}}
	lease := leaseAt{Epoch: 3, LeaderID: "a", LeaderURL: "http://a"}
	for _, tc := range []struct {
		name      string
		homes     Homes
		org       string
		leader    bool
		forwarded bool
		lease     leaseAt
		want      string
		code      string // of the refusal; "-" for one without a code
	}{
		{name: "home here", homes: homes, org: "mine"},
		{name: "home elsewhere", homes: homes, org: "other", want: "http://a"},
		{name: "forwarded to the home", homes: homes, org: "mine", forwarded: true},
		{name: "forwarded to a replica not the home", homes: homes, org: "other", forwarded: true, code: api.CodeNotHome},
		{name: "stopping", homes: homesAt{err: cluster.ErrReleased}, org: "x", code: api.CodeNotHome},
		{name: "database silent", homes: homesAt{err: errors.New("timeout")}, org: "x", code: "-"},
		{name: "rentals here at the leader", homes: homes, org: "mine", leader: true, lease: leaseAt{Leading: true}},
		{name: "rentals at the leader", homes: homes, org: "mine", leader: true, want: "http://a"},
		{name: "rentals forwarded to a standby", homes: homes, org: "mine", leader: true, forwarded: true, code: api.CodeStandby},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lease
			if tc.lease.Leading {
				l = tc.lease
			}
			s := &Server{metrics: newMetrics(buildinfo.Info{}), log: slog.New(slog.DiscardHandler),
				cluster: &Cluster{ReplicaID: "b", Lease: l, Homes: tc.homes}}
			ctx := &fasthttp.RequestCtx{}
			got, err := s.serveAt(&call{ctx: ctx, route: &route{leader: tc.leader}, forwarded: tc.forwarded,
				principal: auth.Principal{OrgID: tc.org}})
			switch {
			case tc.code == "" && (err != nil || got != tc.want):
				t.Fatalf("serveAt = %q, %v; want %q", got, err, tc.want)
			case tc.code == "-":
				checkRefusal(t, ctx, err, "")
			case tc.code != "":
				checkRefusal(t, ctx, err, tc.code)
			}
		})
	}
}

// Every replica of a cluster is ready, naming the peers it could not
// reach lately; any server draining is not.
func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  bool
		draining bool
		failed   string
		ready    bool
	}{
		{name: "single host", ready: true},
		{name: "single host draining", draining: true},
		{name: "replica", cluster: true, ready: true},
		{name: "replica with a silent peer", cluster: true, failed: "http://a", ready: true},
		{name: "replica draining", cluster: true, draining: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{metrics: newMetrics(buildinfo.Info{})}
			if tc.cluster {
				s.cluster = &Cluster{Lease: leaseAt{}}
				s.forwarder = newForwarder("x")
				if tc.failed != "" {
					s.forwarder.mark(tc.failed, false)
				}
			}
			s.draining.Store(tc.draining)
			ctx := &fasthttp.RequestCtx{}
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
			if ctx.Response.StatusCode() != want || r.Ready != tc.ready || (tc.failed != "") != slices.Contains(r.UnreachablePeers, tc.failed) {
				t.Fatalf("/readyz = %d %+v", ctx.Response.StatusCode(), r)
			}
		})
	}
}

func TestClusterHealthAndMetrics(t *testing.T) {
	oldest := time.Now().Add(-3 * time.Second)
	c := &Cluster{ReplicaID: "b", Lease: leaseAt{Epoch: 7, LeaderID: "a", LeaderURL: "http://a:8080", Unconfirmed: 4 * time.Second},
		Homes: homesAt{homes: map[string]cluster.Home{"x": {}}}, Outbox: func() (int64, time.Time) { return 12, oldest }}
	s := &Server{metrics: newMetrics(buildinfo.Info{}), cluster: c}
	h := s.clusterHealth()
	if h.Role != cluster.RoleStandby || h.Epoch != 7 || h.Leader != "a" || h.OutboxRecords != 12 || h.DatabaseUnreachableS != 4 || h.Homes != 1 ||
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

// A peer route takes only a fresh signature of its own method and URI
// made with the cluster's secret.
func TestPeerSignature(t *testing.T) {
	f := newForwarder("s3cret")
	other := newForwarder("another")
	now := time.Now()
	uri := "/api/v1/peers/workers?org_id=a"
	for _, tc := range []struct {
		name, method, uri, sig string
		want                   bool
	}{
		{"signed", "GET", uri, f.signPeer("GET", uri, now), true},
		{"a little old", "GET", uri, f.signPeer("GET", uri, now.Add(-30*time.Second)), true},
		{"too old", "GET", uri, f.signPeer("GET", uri, now.Add(-2*time.Minute)), false},
		{"another secret", "GET", uri, other.signPeer("GET", uri, now), false},
		{"another organisation", "GET", "/api/v1/peers/workers?org_id=b", f.signPeer("GET", uri, now), false},
		{"another method", "POST", uri, f.signPeer("GET", uri, now), false},
		{"garbage", "GET", uri, "x.y", false},
		{"none", "GET", uri, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.peerSigned(tc.method, tc.uri, tc.sig, now); got != tc.want {
				t.Fatalf("peerSigned = %v, want %v", got, tc.want)
			}
		})
	}
	var single *forwarder
	if single.peerSigned("GET", uri, f.signPeer("GET", uri, now), now) {
		t.Fatal("a single host took a peer's signature")
	}
}

// A peer that failed is reported until it answers again or peerMemory
// passes.
func TestPeerReachability(t *testing.T) {
	f := newForwarder("s")
	now := time.Now()
	f.mark("http://a", false)
	f.mark("http://b", false)
	f.mark("http://a", true)
	if got := f.unreachable(now); !slices.Equal(got, []string{"http://b"}) {
		t.Fatalf("unreachable %v, want b", got)
	}
	if got := f.unreachable(now.Add(peerMemory + time.Second)); len(got) != 0 {
		t.Fatalf("unreachable %v after peerMemory, want none", got)
	}
	f.mark("http://c", false)
	f.mark("http://c", true)
	if got := f.unreachable(now); len(got) != 0 || f.failing.Load() != 0 {
		t.Fatalf("unreachable %v (%d failing) once every peer answered", got, f.failing.Load())
	}
}
