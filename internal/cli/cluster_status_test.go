package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/iostreams"
)

// The leader line reads the lease as it is: held, lapsed, or given up by
// a leader that resigned, whose name and address are gone.
func TestClusterStatusLeaderLine(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		leader *api.ClusterLeader
		want   string
	}{
		{nil, "Leader: none yet\n"},
		{&api.ClusterLeader{ReplicaID: "r1", AdvertiseURL: "http://10.0.0.1:8080", Epoch: 3, ExpiresAt: now.Add(4 * time.Second)},
			"Leader: r1 at http://10.0.0.1:8080, epoch 3, lease expires in 4s\n"},
		{&api.ClusterLeader{ReplicaID: "r1", AdvertiseURL: "http://10.0.0.1:8080", Epoch: 3, ExpiresAt: now.Add(-2 * time.Second), Expired: true},
			"Leader: r1 at http://10.0.0.1:8080, epoch 3, lease EXPIRED 2s ago\n"},
		{&api.ClusterLeader{Epoch: 2, ExpiresAt: now.Add(-200 * time.Millisecond), Expired: true}, "Leader: none since epoch 2's resigned\n"},
	} {
		ios, _, out, _ := iostreams.Test()
		if err := printClusterStatus(&Factory{IO: ios}, api.ClusterStatus{DatabaseTime: now, Leader: tt.leader}); err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(out.String(), "Schema"); first != tt.want {
			t.Errorf("leader %+v: %q, want %q", tt.leader, first, tt.want)
		}
	}
}

// A replica that is gone shows the role it last had as past.
func TestClusterStatusGoneReplica(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ios, _, out, _ := iostreams.Test()
	st := api.ClusterStatus{DatabaseTime: now,
		Leader: &api.ClusterLeader{ReplicaID: "r2", AdvertiseURL: "http://b:8080", Epoch: 4, ExpiresAt: now.Add(5 * time.Second)},
		Replicas: []api.ClusterReplica{
			{ID: "r1", Role: "leader", AdvertiseURL: "http://a:8080", SeenAt: now.Add(-time.Minute)},
			{ID: "r2", Role: "leader", AdvertiseURL: "http://b:8080", SeenAt: now, Alive: true},
		}}
	if err := printClusterStatus(&Factory{IO: ios}, st); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "r1" && !strings.Contains(line, "gone (was leader)"):
			t.Errorf("the replica that is gone: %q", line)
		case len(f) > 1 && f[0] == "r2" && (f[1] != "leader" || strings.Contains(line, "gone")):
			t.Errorf("the leader: %q", line)
		}
	}
}

// A peer no replica reaches is told of while organisations are homed on
// it, and not once it is gone and homes none: others serve them then.
func TestClusterStatusUnreachablePeer(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		dead  api.ClusterReplica
		tells bool
	}{
		{"gone, homing none", api.ClusterReplica{ID: "r1", Role: "member", AdvertiseURL: "http://a:8080", SeenAt: now.Add(-5 * time.Second)}, false},
		{"gone, still homing", api.ClusterReplica{ID: "r1", Role: "member", AdvertiseURL: "http://a:8080", SeenAt: now.Add(-5 * time.Second), Homes: 2}, true},
		{"alive", api.ClusterReplica{ID: "r1", Role: "member", AdvertiseURL: "http://a:8080", SeenAt: now, Alive: true}, true},
	} {
		ios, _, out, _ := iostreams.Test()
		st := api.ClusterStatus{DatabaseTime: now, Replicas: []api.ClusterReplica{tt.dead,
			{ID: "r2", Role: "leader", AdvertiseURL: "http://b:8080", SeenAt: now, Alive: true, UnreachablePeers: []string{"http://a:8080"}}}}
		if err := printClusterStatus(&Factory{IO: ios}, st); err != nil {
			t.Fatal(err)
		}
		if told := strings.Contains(out.String(), "r2 cannot reach http://a:8080"); told != tt.tells {
			t.Errorf("%s: told %v, want %v:\n%s", tt.name, told, tt.tells, out)
		}
	}
}
