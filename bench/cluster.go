package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/pgtest"
)

// The cluster's paths: two replicas of svc serve on one throwaway
// PostgreSQL and one worker linked to the leader, all on the
// system-under-test core. svc-leader sends requests to the leader, which
// serves them as a single host does but records usage through its outbox
// into PostgreSQL; svc-forwarded sends them to the standby, which forwards
// each to the leader. The two share every process, so svc-forwarded minus
// svc-leader is the hop through the standby and nothing else.
const (
	pathLeader    = "svc-leader"
	pathForwarded = "svc-forwarded"
)

// clusterLeaseTTL is the replicas' --lease-ttl, the least svc serve takes:
// a cluster made in a few seconds.
const clusterLeaseTTL = "3s"

// clusterPaths starts the cluster and returns its two paths; svc-forwarded
// owns the processes and the database and stops them. The database runs
// wherever this process may run (the load core when pinned): its CPU time
// is reported beside the system under test's, not in it.
func clusterPaths(pl placement, dir, bin, engineURL string) (leader, forwarded *path, err error) {
	ctx := context.Background()
	// pgtest makes the server's directory itself, under the temporary
	// directory's root, where the unprivileged user it runs postgres as
	// can enter it; the harness's own directory is private to root.
	db, err := pgtest.Start("")
	if err != nil {
		return nil, nil, err
	}
	forwarded = &path{name: pathForwarded, db: db, ownsDB: true, pprof: map[string]string{}}
	defer func() {
		if err != nil {
			forwarded.stop()
		}
	}()
	url, err := db.CreateDB(ctx, "svc")
	if err != nil {
		return nil, nil, err
	}

	replica := func(role string) (*harness.Gateway, error) {
		addr, err := harness.FreeAddr()
		if err != nil {
			return nil, err
		}
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		prof, _ := harness.FreeAddr()
		forwarded.pprof[role] = prof
		s := pl.sut(dir, role+"-"+port, "GOMAXPROCS=1", "SVC_STORE_URL="+url)
		s.Bin, s.Group = bin, &forwarded.group
		s.Args = []string{"--log-level", "warn", "--pprof-addr", prof, "--lease-ttl", clusterLeaseTTL}
		data := filepath.Join(dir, role+"-data-"+port)
		_ = os.RemoveAll(data)
		return harness.StartGateway(ctx, harness.GatewaySpec{Spec: s, Addr: addr, Data: data})
	}
	// The first replica on an empty database leads; it writes the admin
	// key and the worker token into its data directory.
	lg, err := replica("leader")
	if err != nil {
		return nil, nil, err
	}
	if err := waitRole(ctx, lg.URL, api.ClusterHealth{Role: "leader"}); err != nil {
		return nil, nil, fmt.Errorf("the first replica: %w", err)
	}
	sg, err := replica("standby")
	if err != nil {
		return nil, nil, err
	}
	if err := waitRole(ctx, sg.URL, api.ClusterHealth{Role: "standby", LeaderURL: lg.URL}); err != nil {
		return nil, nil, fmt.Errorf("the second replica: %w", err)
	}
	key, err := lg.AdminKey()
	if err != nil {
		return nil, nil, err
	}
	wkProf, _ := harness.FreeAddr()
	forwarded.pprof["worker"] = wkProf
	ws := pl.sut(dir, "worker-"+strings.TrimPrefix(lg.Addr, "127.0.0.1:"), "GOMAXPROCS=1")
	ws.Group = &forwarded.group
	ws.Args = []string{"--max-concurrent", "16384", "--engine", "openai=" + engineURL, "--log-level", "warn", "--pprof-addr", wkProf}
	wk, err := lg.StartWorker(ctx, harness.WorkerSpec{Spec: ws, Worker: "bench"})
	if err != nil {
		return nil, nil, err
	}

	settle := func() { waitOutbox(lg.URL) }
	forwarded.base, forwarded.key, forwarded.settle = sg.URL, key, settle
	forwarded.procs = []*harness.Proc{lg.Proc, sg.Proc, wk}
	leader = &path{name: pathLeader, base: lg.URL, key: key, db: db, settle: settle,
		procs: []*harness.Proc{lg.Proc, wk},
		pprof: map[string]string{"leader": forwarded.pprof["leader"], "worker": wkProf}}
	return leader, forwarded, nil
}

// clusterHealth is a replica's /healthz, its cluster object only.
func clusterHealth(ctx context.Context, base string) (*api.ClusterHealth, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
	if err != nil {
		return nil, err
	}
	req.Close = true // no idle connection left behind in the replica
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil {
		return nil, fmt.Errorf("/healthz: %w", err)
	}
	if h.Cluster == nil {
		return nil, errors.New("/healthz has no cluster: the replica does not run on the database")
	}
	return h.Cluster, nil
}

// waitRole waits until the replica at base has want's role and, when want
// names one, knows the leader's URL.
func waitRole(ctx context.Context, base string, want api.ClusterHealth) error {
	ctx, cancel := context.WithTimeout(ctx, harness.StartTimeout)
	defer cancel()
	var last *api.ClusterHealth
	var lastErr error
	err := harness.Poll(ctx, 50*time.Millisecond, func() bool {
		last, lastErr = clusterHealth(ctx, base)
		return lastErr == nil && last.Role == want.Role && (want.LeaderURL == "" || last.LeaderURL == want.LeaderURL)
	})
	switch {
	case err == nil:
		return nil
	case lastErr != nil:
		return fmt.Errorf("not %s: %w", want.Role, lastErr)
	}
	return fmt.Errorf("not %s (role %q, leader %q) within %s", want.Role, last.Role, last.LeaderURL, harness.StartTimeout)
}

// waitOutbox waits, for up to ten seconds, until the leader has shipped
// its outbox to the database, so that the rows of one run are not shipped
// during the next path's.
func waitOutbox(base string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = harness.Poll(ctx, 50*time.Millisecond, func() bool {
		h, err := clusterHealth(ctx, base)
		return err == nil && h.OutboxRecords == 0
	})
}

// dbUsage is the CPU time of the path's database: the postmaster, its
// backends, and the backends that have ended, which the postmaster
// waited for.
func (p *path) dbUsage() usage {
	if p.db == nil {
		return usage{}
	}
	pid := p.db.Pid()
	if pid == 0 {
		return usage{}
	}
	u := procUsageOf(pid)
	u.cpu += reapedCPU(pid)
	return u
}

// reapedCPU is the CPU time of pid's children that have ended and been
// waited for: /proc/PID/stat's cutime and cstime.
func reapedCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) <= 14 {
		return 0
	}
	cu, _ := strconv.ParseInt(fields[13], 10, 64)
	cs, _ := strconv.ParseInt(fields[14], 10, 64)
	return time.Duration(cu+cs) * 10 * time.Millisecond
}
