package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// clusterCrash kills the cluster's leader with SIGKILL under the crash
// check's mixed load, sent through the balancer to three replicas on one
// database with two simulated workers. After each kill a standby must
// take the lease within the TTL and a renewal, the workers must be back on
// it within the TTL plus 5 s, and the killed replica is started again on
// its data directory, so that the rows its outbox still held are shipped.
// At the end, with every outbox empty, every request a client saw succeed
// must have exactly one row in the database, with the usage the client
// was told; no request may have two; the day totals must be the sums
// over the rows; and a request may fail only as a failover may: 503 or
// 502, or a cut connection.
func clusterCrash(ctx context.Context, h *rig, r *result) error {
	ttl := scaled(h, 5*time.Second, 10*time.Second)
	c, err := startCluster(ctx, h, r, "cluster-crash", clusterSpec{replicas: 3, ttl: ttl})
	if c == nil || err != nil {
		return err
	}
	defer c.close()
	workers := []string{"cluster-crash-w1", "cluster-crash-w2"}
	if err := c.startWorkers(ctx, workers, "--engine", "sim=ttft=0", "--max-concurrent", "8"); err != nil {
		return err
	}

	kills := scaled(h, 1, 3)
	pauseMin, pauseMax := scaled(h, 3*time.Second, 6*time.Second), scaled(h, 5*time.Second, 12*time.Second)
	ld, stopLoad := c.runLoad(ctx, scaled(h, 4, 6))
	loadStart := time.Now()

	// Takeover within the TTL and one renewal (TTL/5), and a margin for
	// a loaded machine's polls; the workers within the TTL and 5 s.
	takeoverBound := ttl + ttl/5 + 2*time.Second
	workersBound := ttl + 5*time.Second
	var rounds []failover
	var runErr error
	for k := 0; k < kills && runErr == nil; k++ {
		if sleep(ctx, pauseMin+rand.N(pauseMax-pauseMin+1)); ctx.Err() != nil {
			runErr = ctx.Err()
			break
		}
		since := loadStart
		if len(rounds) > 0 {
			since = rounds[len(rounds)-1].reaped
		}
		var f failover
		if f, runErr = c.killReplica(ctx, r, k+1, ld, since, workers, takeoverBound, workersBound); runErr == nil {
			rounds = append(rounds, f)
		}
	}
	if runErr == nil {
		sleep(ctx, pauseMin)
		runErr = ctx.Err()
	}
	stopLoad()
	if runErr != nil {
		return runErr
	}
	c.crashes(r)

	drain, err := c.settle(ctx)
	if err != nil {
		r.fail("%v", err)
	}
	rows, err := c.usageRows(ctx)
	if err != nil {
		return err
	}
	ok := ld.succeeded()
	missing := judgeSucceeded(r, ok, rows)
	// Each missing row is charged to the run it completed in, the kill
	// that ended that run. A home killed within a group commit of a
	// request's end had not written its row to the outbox: those, and
	// only those, may be lost, as on a single host.
	lostPer := make([]int, len(rounds)+1)
	inWindow := 0
	var earliest time.Duration // the longest a lost row's request completed before its kill
	for _, id := range missing {
		done := ok[id].done
		k := 0
		for k < len(rounds) && done.After(rounds[k].reaped.Add(readLag)) {
			k++
		}
		lostPer[k]++
		if k < len(rounds) && !done.Before(rounds[k].sent.Add(-clusterLossWindow)) {
			inWindow++
			earliest = max(earliest, rounds[k].sent.Sub(done))
			continue
		}
		after := "no kill after it"
		if k < len(rounds) {
			after = fmt.Sprintf("%d ms before kill %d", rounds[k].sent.Sub(done).Milliseconds(), k+1)
		}
		r.fail("request %s succeeded at %s but has no usage row (%s; loss window %v)", id, done.Format("15:04:05.000"), after, clusterLossWindow)
	}
	dups, err := c.judgeTotals(ctx, r)
	if err != nil {
		return err
	}
	if err := crashJudgeSummary(ctx, r, c.api, apiRows(rows)); err != nil {
		return err
	}
	if err := c.judgeStatus(ctx, r); err != nil {
		return err
	}
	fails := ld.failures()
	kinds := judgeFailures(r, fails)
	// Outside a failover, from a kill until the new leader has its
	// workers and the balancer has seen it, nothing may fail at all: a
	// request may fail only if it ended after a kill and was sent before
	// the failover settled.
	outside := map[string]int{}
	for _, f := range fails {
		if duringFailover(f, rounds) {
			continue
		}
		class, _ := failoverFailure(f.err)
		outside[class]++
		if outside[class] <= 5 {
			r.fail("request %s sent at %s, outside any failover, failed: %s (%s)", f.err.ID, f.start.Format("15:04:05.000"), class, tail(f.err.Msg, 200))
		}
	}
	for class, n := range outside {
		if n > 5 {
			r.fail("and %d more requests outside any failover failed: %s", n-5, class)
		}
	}

	var takeovers, backs, gaps []time.Duration
	var pending []int
	var roles []string
	for i := range rounds {
		f := &rounds[i]
		roles = append(roles, f.role())
		if f.leader {
			takeovers = append(takeovers, f.leaderAt.Sub(f.sent))
		}
		backs = append(backs, f.workersAt.Sub(f.sent))
		pending = append(pending, f.pending)
		// The gap: from the kill to the first request sent after it that
		// succeeded, served by the new leader.
		first := time.Time{}
		for _, o := range ok {
			if o.start.After(f.sent) && (first.IsZero() || o.done.Before(first)) {
				first = o.done
			}
		}
		if first.IsZero() {
			r.fail("kill %d: no request sent after it succeeded", i+1)
			continue
		}
		gaps = append(gaps, first.Sub(f.sent))
	}
	sent := ld.sent.Load()
	r.figure("requests", "%d sent, %d succeeded (%d streamed, %d non-streaming chat, %d embeddings), %d failed", sent, len(ok),
		ld.okKind[kindStream].Load(), ld.okKind[kindChat].Load(), ld.okKind[kindEmbed].Load(), len(fails))
	r.figure("failures", "%s", kindList(kinds))
	r.figure("failures outside a failover", "%s", kindList(outside))
	r.figure("kills of a random replica", "%d (lease TTL %v, 3 replicas, 2 workers): %s", len(rounds), ttl, strings.Join(roles, "; "))
	r.figure("new leader after a kill of the leader", "%s (bound %v)", durStats(takeovers), takeoverBound)
	r.figure("workers at the organisation's home after the kill", "%s (bound %v)", durStats(backs), workersBound)
	r.figure("failover gap", "%s (from the kill to the first request sent after it that succeeded)", durStats(gaps))
	r.figure("rows missing at each kill", "%v (succeeded requests without a row in the database before the killed replica restarted)", pending)
	r.figure("rows lost per kill", "%v after the killed replicas restarted (the last entry: after the last kill); %d of them completed within the loss window (%v) before their kill",
		lostPer, inWindow, clusterLossWindow)
	r.figure("earliest lost completion", "%d ms before its kill", earliest.Milliseconds())
	r.figure("duplicate rows", "%d", dups)
	r.figure("outboxes drained", "%d ms after the load stopped and a usage read on the leader", drain.Milliseconds())
	r.figure("usage rows", "%d for %d succeeded requests (load ran %v)", len(rows), len(ok), time.Since(loadStart).Round(time.Second))
	return nil
}

// clusterLossWindow is how long before a kill a request may have
// completed and still have no row: the group-commit interval after
// which its row is in the outbox on disk, and a margin for the commit
// itself on a loaded machine.
const clusterLossWindow = writerInterval + 100*time.Millisecond

// failoverSettle is how long after the new leader has its workers back a
// request may still fail: the balancer's next check of /readyz, and a
// request already under way.
const failoverSettle = time.Second

// duringFailover reports whether a failed request may owe its failure to
// one of the failovers: it ended after the failover began and was sent
// before it settled.
func duringFailover(f loadFailure, fos []failover) bool {
	for _, fo := range fos {
		if !f.done.Before(fo.sent) && f.start.Before(fo.workersAt.Add(failoverSettle)) {
			return true
		}
	}
	return false
}

// failover is a change of leader, a kill or a lease that moved, and what
// followed.
type failover struct {
	sent, reaped time.Time // the kill, or when the lease could move
	leaderAt     time.Time // a standby leads at a higher epoch (the kill, when the leader lived)
	workersAt    time.Time // a replica lists every worker healthy at the organisation's home
	// leader and home say what the killed replica held.
	leader, home bool
	// pending is how many requests the killed leader had seen succeed
	// whose rows were not in the database before it restarted.
	pending int
}

// killReplica kills a replica (every replica is a front for the
// balancer's clients; it may also be the organisation's home, the leader,
// or both; see victim), waits for whatever it held to move (the lease to a
// new leader, the organisation's home and its workers to another
// replica), and starts the killed replica again. since is when the killed
// replica's run began: requests completed before were the previous run's.
func (c *cluster) killReplica(ctx context.Context, r *result, k int, ld *crashLoad, since time.Time, workers []string, takeoverBound, workersBound time.Duration) (failover, error) {
	var f failover
	l, v, err := c.victim(ctx, k)
	if err != nil {
		return f, fmt.Errorf("kill %d: %w", k, err)
	}
	if sign := crashed(c.replicas[l]); sign != "" {
		r.fail("%s crashed before kill %d: %s", c.replicas[l].name, k, sign)
	}
	f.leader, f.home = v.leads(), v.Cluster.Homes > 0
	f.sent = time.Now()
	_ = c.replicas[l].Kill()
	f.reaped = time.Now()
	c.h.logf("%s: kill %d: killed %s (%s) at epoch %d", c.name, k, c.replicas[l].name, f.role(), v.Cluster.Epoch)
	f.leaderAt = f.sent
	nl := (l + 1) % len(c.replicas)
	if f.leader {
		var epoch int64
		if nl, epoch, err = c.waitLeader(ctx, v.Cluster.Epoch, 3*c.ttl+30*time.Second); err != nil {
			r.fail("kill %d: %v", k, err)
			return f, err
		}
		f.leaderAt = time.Now()
		if d := f.leaderAt.Sub(f.sent); d > takeoverBound {
			r.fail("kill %d: %s led at epoch %d only %v after the kill (bound %v)", k, c.replicas[nl].name, epoch, d.Round(time.Millisecond), takeoverBound)
		}
	}
	if err := c.waitWorkers(ctx, nl, workers, 60*time.Second); err != nil {
		r.fail("kill %d: %v", k, err)
		return f, err
	}
	f.workersAt = time.Now()
	if d := f.workersAt.Sub(f.sent); d > workersBound {
		r.fail("kill %d: the workers were back at the organisation's home %v after the kill (bound %v)", k, d.Round(time.Millisecond), workersBound)
	}
	c.h.logf("%s: kill %d: a leader after %v, the workers at the organisation's home after %v", c.name, k,
		f.leaderAt.Sub(f.sent).Round(time.Millisecond), f.workersAt.Sub(f.sent).Round(time.Millisecond))
	// What the dead replica had not shipped: nothing can ship it until it
	// runs again.
	if rows, err := c.usageRows(ctx); err == nil {
		for id, o := range ld.succeeded() {
			if o.done.After(since) && !o.done.After(f.reaped.Add(readLag)) && len(rows[id]) == 0 {
				f.pending++
			}
		}
	}
	if err := c.replicas[l].Restart(ctx); err != nil {
		r.fail("kill %d: the killed replica did not start again: %v", k, err)
		return f, err
	}
	return f, nil
}

// victim picks the replica of kill k: the organisation's home first (the
// one kill of a short run), then one that is neither home nor leader,
// then any.
func (c *cluster) victim(ctx context.Context, k int) (int, replicaView, error) {
	views := make([]replicaView, len(c.replicas))
	for i := range c.replicas {
		v, err := c.health(ctx, i)
		if err != nil {
			return -1, v, err
		}
		views[i] = v
	}
	want := func(v replicaView) bool { return true }
	switch k {
	case 1:
		want = func(v replicaView) bool { return v.Cluster.Homes > 0 }
	case 2:
		want = func(v replicaView) bool { return v.Cluster.Homes == 0 && !v.leads() }
	}
	var fit []int
	for i, v := range views {
		if want(v) {
			fit = append(fit, i)
		}
	}
	if len(fit) == 0 {
		fit = []int{rand.N(len(views))}
	}
	l := fit[rand.N(len(fit))]
	return l, views[l], nil
}

// role names what a killed replica held.
func (f failover) role() string {
	switch {
	case f.leader && f.home:
		return "leader and home"
	case f.leader:
		return "leader, front"
	case f.home:
		return "home, front"
	}
	return "front only"
}
