package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// clusterDB stops the cluster's database under load and starts it again:
// a leader and a standby on one PostgreSQL, two simulated workers, the
// crash check's mixed load through the balancer. While the database is
// down the leader must go on serving inference from memory, recording
// usage in its outbox; once it is back the outbox must drain within
// outboxDrainBound. Then the database is stopped a second time and the
// leader killed with rows in its outbox only: once the database is back,
// the standby must lead with the workers, and the killed replica, started
// again on its data directory, must ship what its outbox held. Judged:
// requests fail, if at all, only with the spec's 503 or 502 or a cut
// connection, and outside the second failover not at all (the success
// rate during the first outage is a figure); the outbox grew during the
// first outage and emptied after; every succeeded request has exactly one
// row with the usage its client was told, but those completed within the
// loss window before the kill; no request has two; the day totals are the
// sums over the rows; the same replica leads after the first outage, or,
// if the lease moved when the database came back, the workers followed.
func clusterDB(ctx context.Context, h *rig, r *result) error {
	ttl := scaled(h, 5*time.Second, 10*time.Second)
	c, err := startCluster(ctx, h, r, "cluster-db", clusterSpec{replicas: 2, ttl: ttl})
	if c == nil || err != nil {
		return err
	}
	defer c.close()
	workers := []string{"cluster-db-w1", "cluster-db-w2"}
	if err := c.startWorkers(ctx, workers, "--engine", "sim=ttft=0", "--max-concurrent", "8"); err != nil {
		return err
	}
	l0, v0 := c.leader(ctx)
	if l0 < 0 {
		return fmt.Errorf("no replica leads")
	}
	outage := scaled(h, 8*time.Second, 20*time.Second)

	ld, stopLoad := c.runLoad(ctx, scaled(h, 4, 6))
	// The leader's outbox, sampled throughout.
	sampler := &outboxSampler{c: c, replica: l0}
	sctx, stopSampler := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sampler.run(sctx) })
	defer func() {
		stopSampler()
		wg.Wait()
	}()

	sleep(ctx, scaled(h, 3*time.Second, 5*time.Second))
	down := time.Now()
	if err := c.pg.Stop(); err != nil {
		stopLoad()
		return fmt.Errorf("stop postgres: %w", err)
	}
	c.h.logf("%s: postgres stopped for %v", c.name, outage)
	sleep(ctx, outage/2)
	// What only the database can answer is the spec's 503 meanwhile, a
	// retry's cue, never a 500.
	for _, path := range []string{"/api/v1/workers/events?limit=1", "/api/v1/usage/logs?limit=1", "/api/v1/compute/instances"} {
		if st, body, err := c.api.do(ctx, "GET", path, nil); err == nil && st != 200 && st != 503 {
			r.fail("GET %s while the database was down: %d %s, want 200 or 503", path, st, tail(string(body), 200))
		}
	}
	sleep(ctx, outage-outage/2)
	if err := c.pg.Restart(); err != nil {
		stopLoad()
		return fmt.Errorf("start postgres again: %w", err)
	}
	up := time.Now()
	c.h.logf("%s: postgres back after %v", c.name, up.Sub(down).Round(time.Millisecond))

	// The outbox empties under load: the leader ships faster than the
	// load adds to it.
	drained, drainErr := c.waitOutboxEmpty(ctx, outboxDrainBound)
	if drainErr != nil {
		r.fail("after the database came back: %v (bound %v)", drainErr, outboxDrainBound)
	}
	stopSampler()
	wg.Wait()

	// Who leads now. The lease lapses on the database's clock while
	// nobody can renew it, so when the database is back either replica
	// may take it: a move is a failover, from the database's return
	// until the workers are on the new leader.
	var moved *failover
	l1, v1 := c.leader(ctx)
	switch {
	case l1 < 0:
		r.fail("no replica leads after the database came back")
	case l1 == l0 && v1.Cluster.Epoch == v0.Cluster.Epoch:
		r.figure("leader", "%s throughout, epoch %d unchanged", c.replicas[l0].name, v0.Cluster.Epoch)
	default:
		// The lease lapsed on the database's clock while nobody could
		// renew it; whoever renewed first took it. Then the workers must
		// be on the new leader.
		if err := c.waitWorkers(ctx, l1, workers, ttl+5*time.Second); err != nil {
			r.fail("the lease moved from %s (epoch %d) to %s (epoch %d) and the workers did not follow: %v",
				c.replicas[l0].name, v0.Cluster.Epoch, c.replicas[l1].name, v1.Cluster.Epoch, err)
		}
		moved = &failover{sent: up, workersAt: time.Now()}
		r.figure("leader", "moved from %s (epoch %d) to %s (epoch %d) when the database came back; workers on it %d ms after",
			c.replicas[l0].name, v0.Cluster.Epoch, c.replicas[l1].name, v1.Cluster.Epoch, moved.workersAt.Sub(up).Milliseconds())
	}
	sleep(ctx, scaled(h, 2*time.Second, 5*time.Second))

	// The second outage: the leader is killed while its rows wait in its
	// outbox, and they must reach the database when it runs again.
	kill, err := c.killOffline(ctx, r, ld, workers)
	if err != nil {
		stopLoad()
		return err
	}
	sleep(ctx, scaled(h, 2*time.Second, 5*time.Second))
	stopLoad()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c.crashes(r)
	if _, err := c.settle(ctx); err != nil {
		r.fail("after the load: %v", err)
	}

	// Inference during the first outage.
	ok := ld.succeeded()
	fails := ld.failures()
	kinds := judgeFailures(r, fails)
	okDuring, failDuring := 0, 0
	for _, o := range ok {
		if o.start.After(down) && o.done.Before(up) {
			okDuring++
		}
	}
	for _, f := range fails {
		if f.start.After(down) && f.start.Before(up) {
			failDuring++
		}
	}
	if okDuring == 0 {
		r.fail("no request sent while the database was down succeeded")
	}
	rate := 0.0
	if okDuring+failDuring > 0 {
		rate = 100 * float64(okDuring) / float64(okDuring+failDuring)
	}
	// Outside a failover, nothing may fail.
	failovers := []failover{kill.failover}
	if moved != nil {
		failovers = append(failovers, *moved)
	}
	outside := map[string]int{}
	for _, f := range fails {
		if duringFailover(f, failovers) {
			continue
		}
		class, _ := failoverFailure(f.err)
		if outside[class]++; outside[class] <= 5 {
			r.fail("request %s sent at %s, outside the failover, failed: %s (%s)", f.err.ID, f.start.Format("15:04:05.000"), class, tail(f.err.Msg, 200))
		}
	}

	peak, during := sampler.peak(down, up)
	if peak == 0 {
		r.fail("the leader's outbox never held a record while the database was down (%d samples)", during)
	}

	rows, err := c.usageRows(ctx)
	if err != nil {
		return err
	}
	missing := judgeSucceeded(r, ok, rows)
	inWindow := 0
	for _, id := range missing {
		done := ok[id].done
		if !done.Before(kill.sent.Add(-clusterLossWindow)) && !done.After(kill.reaped.Add(readLag)) {
			inWindow++
			continue
		}
		r.fail("request %s succeeded at %s but has no usage row", id, done.Format("15:04:05.000"))
	}
	dups, err := c.judgeTotals(ctx, r)
	if err != nil {
		return err
	}
	if err := crashJudgeSummary(ctx, r, c.api, apiRows(rows)); err != nil {
		return err
	}

	r.figure("database outage", "%v (PostgreSQL stopped, then started again on its data)", up.Sub(down).Round(time.Millisecond))
	r.figure("requests", "%d sent, %d succeeded, %d failed", ld.sent.Load(), len(ok), len(fails))
	r.figure("during the outage", "%d succeeded, %d failed: %.1f%% success", okDuring, failDuring, rate)
	r.figure("failures", "%s", kindList(kinds))
	r.figure("failures outside the failover", "%s", kindList(outside))
	r.figure("outbox during the outage", "peak %d records (%d samples of the leader's /healthz)", peak, during)
	r.figure("outbox drained", "%d ms after the database was back (bound %v)", drained.Milliseconds(), outboxDrainBound)
	r.figure("leader killed during a second outage", "outbox %d records at the kill; %d succeeded requests without a row before it restarted, %d after (%d of them completed within the loss window, %v, before the kill)",
		kill.held, kill.pending, len(missing), inWindow, clusterLossWindow)
	r.figure("failover after it", "new leader %d ms after the kill, workers on it after %d ms (database down %v of that)",
		kill.leaderAt.Sub(kill.sent).Milliseconds(), kill.workersAt.Sub(kill.sent).Milliseconds(), kill.offline.Round(time.Millisecond))
	r.figure("duplicate rows", "%d", dups)
	return nil
}

// offlineKill is the leader's kill while the database is down.
type offlineKill struct {
	failover
	held    int64         // the outbox's records at the kill
	offline time.Duration // how long the database stayed down after it
}

// killOffline stops the database, lets the leader's outbox fill, kills
// the leader, starts the database again, waits for the standby to lead
// and the workers to follow, and starts the killed replica again on its
// data, whose outbox must then ship.
func (c *cluster) killOffline(ctx context.Context, r *result, ld *crashLoad, workers []string) (offlineKill, error) {
	var k offlineKill
	l, v := c.leader(ctx)
	if l < 0 {
		return k, fmt.Errorf("no replica leads before the second outage")
	}
	since := time.Now()
	if err := c.pg.Stop(); err != nil {
		return k, fmt.Errorf("stop postgres: %w", err)
	}
	sleep(ctx, scaled(c.h, 2*time.Second, 5*time.Second))
	if hv, err := c.health(ctx, l); err == nil {
		k.held = hv.Cluster.OutboxRecords
	}
	if k.held == 0 {
		r.fail("the leader's outbox was empty after the database had been down a while")
	}
	k.sent = time.Now()
	_ = c.replicas[l].Kill()
	k.reaped = time.Now()
	c.h.logf("%s: killed the leader %s with %d records in its outbox and the database down", c.name, c.replicas[l].name, k.held)
	sleep(ctx, scaled(c.h, 2*time.Second, 5*time.Second))
	if err := c.pg.Restart(); err != nil {
		return k, fmt.Errorf("start postgres again: %w", err)
	}
	k.offline = time.Since(k.sent)
	nl, epoch, err := c.waitLeader(ctx, v.Cluster.Epoch, 3*c.ttl+30*time.Second)
	if err != nil {
		r.fail("after the kill during the outage: %v", err)
		return k, err
	}
	k.leaderAt = time.Now()
	if err := c.waitWorkers(ctx, nl, workers, 60*time.Second); err != nil {
		r.fail("after the kill during the outage: %v", err)
		return k, err
	}
	k.workersAt = time.Now()
	if d := k.workersAt.Sub(k.leaderAt); d > c.ttl+5*time.Second {
		r.fail("the workers were on the new leader %v after it led (bound %v)", d.Round(time.Millisecond), c.ttl+5*time.Second)
	}
	c.h.logf("%s: %s leads at epoch %d", c.name, c.replicas[nl].name, epoch)
	if rows, err := c.usageRows(ctx); err == nil {
		for id, o := range ld.succeeded() {
			if o.done.After(since) && !o.done.After(k.reaped.Add(readLag)) && len(rows[id]) == 0 {
				k.pending++
			}
		}
	}
	if err := c.replicas[l].Restart(ctx); err != nil {
		r.fail("the killed replica did not start again: %v", err)
		return k, err
	}
	return k, nil
}

// outboxDrainBound is how soon after the database is back the outbox must
// be empty.
const outboxDrainBound = 30 * time.Second

// outboxSampler reads one replica's outbox depth from its /healthz every
// 200 ms.
type outboxSampler struct {
	c       *cluster
	replica int

	mu      sync.Mutex
	samples []outboxSample
}

type outboxSample struct {
	at      time.Time
	records int64
}

func (s *outboxSampler) run(ctx context.Context) {
	for ctx.Err() == nil {
		if v, err := s.c.health(ctx, s.replica); err == nil {
			s.mu.Lock()
			s.samples = append(s.samples, outboxSample{time.Now(), v.Cluster.OutboxRecords})
			s.mu.Unlock()
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// peak is the most records sampled between from and to, and how many
// samples were taken then.
func (s *outboxSampler) peak(from, to time.Time) (peak int64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.samples {
		if x.at.After(from) && x.at.Before(to) {
			n++
			peak = max(peak, x.records)
		}
	}
	return peak, n
}
