package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// Overload: svc's closed-loop capacity is measured first, then an open
// loop offers more than that, then less, on one schedule. What matters is
// whether svc keeps serving near its capacity while it sheds the excess
// with quick 429s, rather than queueing everything until every request is
// late, and how soon latency comes back once the excess stops.
const (
	overloadFactor = 1.5
	recoverFactor  = 0.5
	// overloadHold is the gateway's --queue-hold unless -overload-hold
	// says otherwise: how long a request waits for a worker slot before
	// its 429. Shorter than the client timeout, so that svc, not the
	// client, decides which requests are turned away.
	overloadHold = 100 * time.Millisecond
	// recoveryBucket is the resolution of the recovery time.
	recoveryBucket = 250 * time.Millisecond
	// maxLag is how late the generator may send before its figures are
	// suspect: a tenth of the default queue hold.
	maxLag = overloadHold / 10
	// recoveredWithin is how near its no-load p50 latency must come back.
	recoveredWithin = 2.0
)

// overload runs the overload scenario on a fresh gateway and worker whose
// worker has as many slots as the closed loop has connections.
func (h *rig) overload(ctx context.Context) *scenario {
	sc := &scenario{Name: "overload", Paths: map[string]stats{}, Extra: map[string]any{}}
	p, err := svcPath(h.scale.place, h.dir, h.bin, h.engine.url, svcOptions{maxConcurrent: h.scale.conc, queueHold: h.scale.overloadHold})
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	defer p.stop()
	// A client of its own: the timeouts below close connections, and its
	// idle ones are closed with it rather than left in the shared pool.
	client := newClient()
	defer client.CloseIdleConnections()
	body := unaryBody
	if d := h.scale.overloadLatency; d > 0 {
		body = fmt.Sprintf(`{"model":"sim-chat","messages":[{"role":"user","content":"hello\nsim: tokens=16 ttft=%dms"}]}`, d.Milliseconds())
	}
	svc := unaryCall(client, p, body)

	closedLoop(ctx, h.scale.conc, h.scale.warmup, svc)
	capFrom := p.usageEach()
	capOuts, capEl := closedLoop(ctx, h.scale.conc, h.scale.duration, svc)
	capTo := p.usageEach()
	capSt := summarise(capOuts, capEl)
	capacity := capSt.Achieved * capSt.Success
	if capacity <= 0 || ctx.Err() != nil {
		sc.Note = "skipped: no closed-loop capacity measured"
		return sc
	}
	sc.Paths["svc closed loop"] = capSt
	sc.Extra["capacity_rps"] = capacity
	ok := int(capSt.Success * float64(capSt.Requests))
	for role, us := range cpuPer(capFrom, capTo, ok) {
		sc.Extra["closed_loop_"+role+"_cpu_per_request_us"] = us
	}

	// No load: a trickle, one request at a time.
	idleRate := min(100, capacity/20)
	idle := summarise(openLoop(ctx, idleRate, h.scale.duration, svc))
	idle.Target = idleRate
	sc.Paths["svc no load"] = idle

	over, under := overloadFactor*capacity, recoverFactor*capacity
	if d := h.path("direct"); d != nil {
		do := withTimeout(h.scale.overloadTimeout, unaryCall(client, d, body))
		openLoop(ctx, over, h.scale.warmup, do)
		outs, el := openLoop(ctx, over, h.scale.duration, do)
		st := summarise(outs, el)
		st.Target = over
		sc.Paths["direct"] = st
		sc.Extra["direct_p99_ms"] = st.Latency.P99
		sc.Extra["direct_generator_lag_p99_ms"] = lagP99(outs)
	}

	h.log("overload: capacity %.0f requests/s; offering %.0f for %s, then %.0f for %s", capacity, over, h.scale.overloadFor, under, h.scale.recoverFor)
	// The gateway's own time for its 429s, from its histogram: the
	// client's figures also hold the client's time on its busy core.
	const route, rejected = "/v1/chat/completions", "429"
	before, scrapeErr := scrapeDurations(ctx, client, p.base, route, rejected)
	start := time.Now()
	drop := start.Add(h.scale.overloadFor)
	// What svc's processes spent during the overload, read again when it
	// ends, while the recovery's requests go on.
	overFrom := p.usageEach()
	var overTo map[string]usage
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(time.Until(drop))
		defer t.Stop()
		select {
		case <-t.C:
			overTo = p.usageEach()
		case <-ctx.Done():
		}
	})
	outs, _ := openLoopPhases(ctx, []phase{{over, h.scale.overloadFor}, {under, h.scale.recoverFor}}, withTimeout(h.scale.overloadTimeout, svc))
	wg.Wait()
	var during, after []outcome
	served := 0
	for _, o := range outs {
		if o.at.Before(drop) {
			during = append(during, o)
		} else {
			after = append(after, o)
		}
		// Served during the overload: answered 200 while it lasted.
		if end := o.at.Add(o.latency); o.err == nil && o.status == http.StatusOK && end.After(start) && end.Before(drop) {
			served++
		}
	}
	ov := summarise(during, h.scale.overloadFor)
	ov.Target = over
	sc.Paths["svc overload"] = ov
	rec := summarise(after, h.scale.recoverFor)
	rec.Target = under
	sc.Paths["svc recovery"] = rec

	// Latency counts from the scheduled send time, so a load generator
	// that falls behind its schedule shows up as latency of svc's; its own
	// lag says how much of that is the generator's.
	sc.Extra["generator_lag_p99_ms"] = lagP99(during)
	if lag := lagP99(during); lag > ms(maxLag) {
		sc.Extra["warning"] = fmt.Sprintf("the load generator fell behind its schedule (p99 %.0f ms late): latency, timeouts and served share are partly its own", lag)
	}
	share := float64(served) / h.scale.overloadFor.Seconds() / capacity
	sc.Extra["served_over_capacity_share"] = share
	// What a request cost during the overload, against the closed loop's
	// figures above: the gateway's over every request sent then that it
	// answered, the worker's over those served (a refusal costs the
	// worker nothing). The few in flight at either end are within noise.
	if overTo != nil {
		answered := 0
		for _, o := range during {
			if o.err == nil {
				answered++
			}
		}
		if us, ok := cpuPer(overFrom, overTo, answered)["gateway"]; ok {
			sc.Extra["overload_gateway_cpu_per_request_us"] = us
		}
		if us, ok := cpuPer(overFrom, overTo, served)["worker"]; ok {
			sc.Extra["overload_worker_cpu_per_served_us"] = us
		}
	}
	if h.scale.place.cap != nil && share < 1 {
		// Held to its CPU, svc spends on refusals what it does not spend
		// serving (see servedShare): the share served gives the cost of a
		// refusal during the overload, to set beside refusal-cost's
		// figure for refusals alone.
		sc.Extra["implied_refusal_over_served"] = impliedRefusalCost(share)
	}
	sc.Extra["admitted_p50_ms"] = ov.Latency.P50
	sc.Extra["admitted_p99_ms"] = ov.Latency.P99
	if q := queueWaits(during); len(q) > 0 {
		// What of the admitted requests' latency was svc holding them
		// for a slot, as the replies' Server-Timing tells.
		w := pct(q)
		sc.Extra["admitted_queue_wait_p50_ms"] = w.P50
		sc.Extra["admitted_queue_wait_p99_ms"] = w.P99
	}
	c := classify(during)
	sc.Extra["rejected_429"] = c.rejected
	if c.rejected > 0 {
		rl := summarise(during, h.scale.overloadFor, http.StatusTooManyRequests).Latency
		sc.Extra["rejected_p50_ms"] = rl.P50
		sc.Extra["rejected_p99_ms"] = rl.P99
		// The same from when the generator sent each, not from when it
		// was due: what is left of the generator's lag is the client's
		// own time on its busy core.
		var sent []time.Duration
		for _, o := range during {
			if o.err == nil && o.status == http.StatusTooManyRequests {
				sent = append(sent, o.latency-o.lag)
			}
		}
		sl := pct(sent)
		sc.Extra["rejected_from_send_p50_ms"] = sl.P50
		sc.Extra["rejected_from_send_p99_ms"] = sl.P99
		sc.Extra["rejected_retry_after_share"] = float64(c.withRetry) / float64(c.rejected)
	}
	if after, err := scrapeDurations(ctx, client, p.base, route, rejected); err == nil && scrapeErr == nil {
		// Counted until the recovery ends, a few of them after the drop.
		d := after.since(before)
		if share, n := d.within(0.001); n > 0 {
			sc.Extra["rejected_in_gateway_within_1ms_share"] = share
			sc.Extra["rejected_in_gateway_p99_at_most_ms"] = 1000 * d.quantileBound(0.99)
		}
	}
	sc.Extra["unavailable_503"] = c.unavailable
	sc.Extra["other_status"] = c.otherStatus
	sc.Extra["client_timeouts"] = c.timeouts
	sc.Extra["connection_resets"] = c.resets
	sc.Extra["other_errors"] = c.otherErrors

	sc.Recovery = bucketP50s(after, drop, h.scale.recoverFor)
	sc.Extra["no_load_p50_ms"] = idle.Latency.P50
	if i := recovered(sc.Recovery, recoveredWithin*idle.Latency.P50); i >= 0 {
		sc.Extra["recovered_within_ms"] = float64(time.Duration(i+1)*recoveryBucket) / float64(time.Millisecond)
	} else {
		sc.Extra["recovered_within_ms"] = "not during the recovery phase"
	}
	engine := "the engine answering at once"
	if d := h.scale.overloadLatency; d > 0 {
		engine = fmt.Sprintf("the engine taking %s a request", d)
	}
	sc.Note = fmt.Sprintf("worker with %d slots, queue hold %s, client timeout %s, %s; closed-loop capacity over %s, then open loop at %gx it for %s and %gx for %s; counts are of requests sent during the overload",
		h.scale.conc, h.scale.overloadHold, h.scale.overloadTimeout, engine, h.scale.duration, overloadFactor, h.scale.overloadFor, recoverFactor, h.scale.recoverFor)
	h.log("%s done", sc.Name)
	return sc
}

// lagP99 is the p99 of how late the generator sent outs.
func lagP99(outs []outcome) float64 {
	lags := make([]time.Duration, len(outs))
	for i, o := range outs {
		lags[i] = o.lag
	}
	return pct(lags).P99
}

// queueWaits are the waits for a slot of the 200s among outs that gave one.
func queueWaits(outs []outcome) []time.Duration {
	var q []time.Duration
	for _, o := range outs {
		if o.err == nil && o.status == http.StatusOK && o.queue >= 0 {
			q = append(q, o.queue)
		}
	}
	return q
}

// withTimeout gives each request of do at most d.
func withTimeout(d time.Duration, do call) call {
	return func(ctx context.Context, at time.Time) outcome {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return do(ctx, at)
	}
}

// classes count the answers that are not a 200, by kind.
type classes struct {
	rejected, withRetry, unavailable, otherStatus int
	timeouts, resets, otherErrors                 int
}

func classify(outs []outcome) classes {
	var c classes
	for _, o := range outs {
		switch {
		case o.err != nil && (errors.Is(o.err, context.DeadlineExceeded) || os.IsTimeout(o.err)):
			c.timeouts++
		case o.err != nil && (errors.Is(o.err, syscall.ECONNRESET) || errors.Is(o.err, syscall.EPIPE) ||
			errors.Is(o.err, io.EOF) || errors.Is(o.err, io.ErrUnexpectedEOF)):
			c.resets++
		case o.err != nil:
			c.otherErrors++
		case o.status == http.StatusTooManyRequests:
			c.rejected++
			if o.retry != "" {
				c.withRetry++
			}
		case o.status == http.StatusServiceUnavailable:
			c.unavailable++
		case o.status != http.StatusOK:
			c.otherStatus++
		}
	}
	return c
}

// bucketP50s is the p50 latency in ms of the 200s sent in each
// recoveryBucket from since, for dur; -1 where a bucket has none.
func bucketP50s(outs []outcome, since time.Time, dur time.Duration) []float64 {
	n := int(dur / recoveryBucket)
	lat := make([][]time.Duration, n)
	for _, o := range outs {
		i := int(o.at.Sub(since) / recoveryBucket)
		if o.err == nil && o.status == http.StatusOK && i >= 0 && i < n {
			lat[i] = append(lat[i], o.latency)
		}
	}
	p50 := make([]float64, n)
	for i, l := range lat {
		p50[i] = -1
		if len(l) > 0 {
			p50[i] = pct(l).P50
		}
	}
	return p50
}

// recovered is the first bucket whose p50 is at most limit, -1 if none.
func recovered(p50 []float64, limit float64) int {
	for i, v := range p50 {
		if v >= 0 && v <= limit {
			return i
		}
	}
	return -1
}
