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
// outboxDrainBound. Judged: requests during the outage fail, if at all,
// only with the spec's 503 or 502 (the success rate is a figure); the
// outbox grew during the outage and emptied after; every succeeded
// request has exactly one row with the usage its client was told, no
// request two, and the day totals are the sums over the rows; the same
// replica leads afterwards, or, if the lease moved when the database
// came back, the workers followed it.
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
	sleep(ctx, outage)
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
	sleep(ctx, scaled(h, 2*time.Second, 5*time.Second))
	stopLoad()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	stopSampler()
	wg.Wait()
	c.crashes(r)

	// Who leads now.
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
		r.figure("leader", "moved from %s (epoch %d) to %s (epoch %d) when the database came back; workers followed",
			c.replicas[l0].name, v0.Cluster.Epoch, c.replicas[l1].name, v1.Cluster.Epoch)
	}

	// Inference during the outage.
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

	peak, during := sampler.peak(down, up)
	if peak == 0 {
		r.fail("the leader's outbox never held a record while the database was down (%d samples)", during)
	}

	rows, err := c.usageRows(ctx)
	if err != nil {
		return err
	}
	missing := judgeSucceeded(r, ok, rows)
	for _, id := range missing {
		r.fail("request %s succeeded at %s but has no usage row", id, ok[id].done.Format("15:04:05.000"))
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
	r.figure("outbox during the outage", "peak %d records (%d samples of the leader's /healthz)", peak, during)
	r.figure("outbox drained", "%d ms after the database was back (bound %v)", drained.Milliseconds(), outboxDrainBound)
	r.figure("rows lost", "%d", len(missing))
	r.figure("duplicate rows", "%d", dups)
	return nil
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
