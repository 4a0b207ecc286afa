package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"reflect"
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
	"github.com/svc-dev/svc/internal/fleet"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/pgstore"
)

type leaseAt cluster.State

func (l leaseAt) State() cluster.State { return cluster.State(l) }

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
func (homesAt) Forget(string)                 {}
func (homesAt) ForgetUnreachable(string) bool { return true }
func (h homesAt) Count() int                  { return len(h.homes) }

// An organisation's request is served at its home: here, forwarded to
// the live home elsewhere, refused as not_home when a peer forwarded it
// here wrongly or this replica is stopping, and a 503 when the database
// cannot say. The rentals are the home's too.
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
		forwarded bool
		want      target
		code      string // of the refusal; "-" for one without a code
	}{
		{name: "home here", homes: homes, org: "mine"},
		{name: "home elsewhere", homes: homes, org: "other", want: target{id: "a", url: "http://a"}},
		{name: "forwarded to the home", homes: homes, org: "mine", forwarded: true},
		{name: "forwarded to a replica not the home", homes: homes, org: "other", forwarded: true, code: api.CodeNotHome},
		{name: "stopping", homes: homesAt{err: cluster.ErrReleased}, org: "x", code: api.CodeNotHome},
		{name: "database silent", homes: homesAt{err: errors.New("timeout")}, org: "x", code: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{metrics: newMetrics(buildinfo.Info{}), log: slog.New(slog.DiscardHandler),
				cluster: &Cluster{ReplicaID: "b", Lease: lease, Homes: tc.homes}}
			ctx := &fasthttp.RequestCtx{}
			got, err := s.serveAt(&call{ctx: ctx, route: &route{}, forwarded: tc.forwarded,
				principal: auth.Principal{OrgID: tc.org}})
			switch {
			case tc.code == "" && (err != nil || got != tc.want):
				t.Fatalf("serveAt = %+v, %v; want %+v", got, err, tc.want)
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
				s.peers = peer.NewPool(peer.PoolOptions{Me: "b", Secret: []byte("x"),
					Dial: func(context.Context, string) (link.Conn, error) { return nil, errors.New("refused") }})
				defer s.peers.Close()
				if tc.failed != "" {
					if _, err := s.peers.Session(context.Background(), "a", tc.failed); !errors.Is(err, peer.ErrUnreachable) {
						t.Fatalf("a peer that does not answer: %v", err)
					}
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

// A request id is taken from a peer only over its replica link; a
// client cannot choose its own.
func TestForwardedRequestID(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conn      net.Conn
		want      string
		forwarded bool
	}{
		{name: "over a replica link", conn: &peerConn{id: "req-1"}, want: "req-1", forwarded: true},
		{name: "a peer's own call", conn: &peerConn{}, forwarded: true},
		{name: "from a client", conn: &net.TCPConn{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := &fasthttp.RequestCtx{}
			ctx.Init2(tc.conn, nil, false)
			// The header of the forwarding of old means nothing now.
			ctx.Request.Header.Set("X-Svc-Forward", "forged.0000")
			if got, forwarded := forwardedID(ctx); got != tc.want || forwarded != tc.forwarded {
				t.Fatalf("forwardedID = %q, %v; want %q, %v", got, forwarded, tc.want, tc.forwarded)
			}
		})
	}
}

// The peer routes answer only requests that came over a replica link;
// the link's own upgrade proves itself in the link, and is not begun on
// a link.
func TestAuthorizePeer(t *testing.T) {
	acc := peer.NewAcceptor(peer.AcceptorOptions{Me: "b", Secret: []byte("x")})
	for _, tc := range []struct {
		name      string
		path      string
		forwarded bool
		upgrade   bool
		acceptor  *peer.Acceptor
		ok        bool
	}{
		{name: "another path over a link", path: "/api/v1/workers", forwarded: true, acceptor: acc},
		{name: "link upgrade", path: peer.Path, upgrade: true, acceptor: acc, ok: true},
		{name: "link upgrade on a single host", path: peer.Path, upgrade: true},
		{name: "link upgrade over a link", path: peer.Path, upgrade: true, forwarded: true, acceptor: acc},
		{name: "link path without an upgrade", path: peer.Path, acceptor: acc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{peerAccept: tc.acceptor}
			ctx := &fasthttp.RequestCtx{}
			if tc.upgrade {
				ctx.Request.Header.Set("Connection", "Upgrade")
				ctx.Request.Header.Set("Upgrade", "websocket")
			}
			err := s.authorizePeer(&call{ctx: ctx, route: &route{path: tc.path}, forwarded: tc.forwarded})
			if (err == nil) != tc.ok {
				t.Fatalf("authorizePeer = %v, want allowed %v", err, tc.ok)
			}
		})
	}
}

// A new home reads what each worker's connected event tells of it; of a
// worker whose events are older than the ones telling its features and
// private inference, it knows neither.
func TestAdoptedWorkers(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	connected := func(meta map[string]any) api.WorkerEvent {
		// As read back from the store: JSON's types.
		raw, _ := json.Marshal(meta)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return api.WorkerEvent{EventType: api.EventConnected, WorkerName: "w", Metadata: m, CreatedAt: now.Add(-time.Hour)}
	}
	engines := []api.EngineInfo{{Kind: "openai", URL: "http://127.0.0.1:8000"}}
	hist := map[string]pgstore.WorkerHistory{
		"wk_new": {Last: connected(nil), Connected: connected(map[string]any{"version": "v2", "max_concurrent": 8,
			"engines": engines, "features": []string{"moderation/1"}, "private_inference": true})},
		"wk_old": {Last: api.WorkerEvent{EventType: api.EventDisconnected, WorkerName: "w2", CreatedAt: now.Add(-time.Minute)},
			Connected: connected(map[string]any{"version": "v1", "max_concurrent": 4})},
	}
	ws, back := adoptedWorkers(hist, now)
	byID := map[string]fleet.Remembered{}
	for _, r := range ws {
		byID[r.ID] = r
	}
	n, o := byID["wk_new"], byID["wk_old"]
	if len(ws) != 2 || len(back) != 1 || back[0] != "wk_new" {
		t.Fatalf("adopted %+v, awaited back %v", ws, back)
	}
	if n.Version != "v2" || n.MaxConcurrent != 8 || !reflect.DeepEqual(n.Engines, engines) ||
		!reflect.DeepEqual(n.Features, []string{"moderation/1"}) || n.Private == nil || !*n.Private || !n.OfflineSince.Equal(now) {
		t.Fatalf("from a connected event that tells all: %+v", n)
	}
	if o.MaxConcurrent != 4 || o.Private != nil || o.Features != nil || !o.OfflineSince.Equal(now.Add(-time.Minute)) {
		t.Fatalf("from an older connected event: %+v", o)
	}
}

func TestUnreachableAdvert(t *testing.T) {
	loop := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}
	any := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	private := &net.TCPAddr{IP: net.ParseIP("10.0.0.11"), Port: 8080}
	for _, tc := range []struct {
		listen net.Addr
		url    string
		want   bool
	}{
		{loop, "http://10.0.0.11:8080", true},
		{loop, "https://gw-1.internal", true},
		{loop, "http://127.0.0.1:8080", false},
		{loop, "http://localhost:8080", false},
		{any, "http://10.0.0.11:8080", false},
		{private, "http://10.0.0.11:8080", false},
	} {
		if got := unreachableAdvert(tc.listen, tc.url); got != tc.want {
			t.Errorf("listening on %v, advertising %s: %v, want %v", tc.listen, tc.url, got, tc.want)
		}
	}
}
