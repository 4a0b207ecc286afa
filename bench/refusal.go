package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

// refusalCost measures what refusing a request costs svc, against what
// serving one costs in max-throughput, in the same run. A worker with one
// slot holds each request it serves for refusalHold; the gateway's queue
// hold is two of those; the closed loop's clients keep asking. Once the
// queue has refused a request it is in overload, and from then on all but
// the request served and the two queued are refused at admission, before
// their bodies are parsed: the cheapest refusal svc makes.
//
// When refusing costs r and serving s, a gateway whose CPU is the limit,
// offered 1.5 times what it can serve, serves (1 − 1.5ρ)/(1 − ρ) of it,
// ρ = r/s: the CPU-bound overload's served share follows from these two
// figures (docs/benchmarks.md, "Overload on this machine").
func (h *rig) refusalCost(ctx context.Context) *scenario {
	sc := &scenario{Name: "refusal-cost", Paths: map[string]stats{}, Extra: map[string]any{}}
	hold := refusalHold
	if h.scale.short {
		hold = refusalHoldShort
	}
	p, err := svcPath(h.scale.place, h.dir, h.bin, h.engine.url, svcOptions{maxConcurrent: 1, queueHold: 2 * hold})
	if err != nil {
		sc.Note = "skipped: " + err.Error()
		return sc
	}
	defer p.stop()
	body := fmt.Sprintf(`{"model":"sim-chat","messages":[{"role":"user","content":"hold\nsim: tokens=4 ttft=%dms"}]}`, hold.Milliseconds())
	do := unaryCall(h.client, p, body)
	// One request alone first, so that the gateway knows how long the slot
	// is held and can tell a backed-up queue from the start; the warm-up
	// then puts the queue in overload.
	if o := do(ctx, time.Now()); o.err != nil || o.status != http.StatusOK {
		sc.Note = fmt.Sprintf("skipped: the first request failed: %d %v", o.status, o.err)
		return sc
	}
	loop := func(d time.Duration) ([]outcome, time.Duration) {
		// The requests served and queued when the loop ends are cancelled
		// rather than waited for.
		lctx, cancel := context.WithTimeout(ctx, d+hold/10)
		defer cancel()
		return closedLoop(lctx, h.scale.conc, d, do)
	}
	loop(h.scale.warmup + 2*hold)
	each := p.usageEach()
	outs, el := loop(h.scale.duration)
	after := p.usageEach()
	st := summarise(outs, el, http.StatusTooManyRequests)
	sc.Paths["svc"] = st
	refused := st.Statuses["429_too_many_requests"]
	if refused == 0 {
		sc.Note = "no request was refused"
		return sc
	}
	for role, us := range cpuPer(each, after, refused) {
		sc.Extra[role+"_cpu_per_refusal_us"] = us
	}
	r, _ := sc.Extra["gateway_cpu_per_refusal_us"].(float64)
	if s := h.servedCPU(); s > 0 && r > 0 {
		rho := r / s
		sc.Extra["refusal_over_served"] = rho
		sc.Extra["cpu_bound_served_share_at_1.5x"] = servedShare(rho)
	}
	sc.Note = fmt.Sprintf("a worker with 1 slot held %s a request, queue hold %s, %d clients; refusals at admission", hold, 2*hold, h.scale.conc)
	if h.scale.profile != "" && p.pprof != nil {
		// After the measured loop, so that the profiler's own work is not
		// counted as the refusals'.
		secs := max(int(h.scale.duration/time.Second), 2)
		load := time.Duration(secs)*time.Second + hold/2
		if err := os.MkdirAll(h.scale.profile, 0o755); err != nil {
			h.log("%s: profile: %v", sc.Name, err)
		} else if err := cpuProfiles(p, h.scale.profile, "refusal.cpu", secs, func() { loop(load) }); err != nil {
			h.log("%s: profile: %v", sc.Name, err)
		}
	}
	h.log("%s done", sc.Name)
	return sc
}

// servedShare is the share of its capacity a svc whose CPU is the limit
// serves when offered overloadFactor times it, a refusal costing rho of a
// served request: the CPU it does not spend serving goes on refusing the
// rest.
func servedShare(rho float64) float64 {
	return max(0, (1-overloadFactor*rho)/(1-rho))
}

// impliedRefusalCost is servedShare the other way: the rho at which svc
// serves share.
func impliedRefusalCost(share float64) float64 {
	return (1 - share) / (overloadFactor - share)
}

// How long the refusal scenario's worker holds each request it serves: a
// few a second, against thousands refused.
const (
	refusalHold      = time.Second
	refusalHoldShort = 100 * time.Millisecond
)

// servedCPU is svc's CPU per served request in this run's max-throughput,
// gateway and worker together; 0 when it did not run.
func (h *rig) servedCPU() float64 {
	for _, s := range h.report.Scenarios {
		if s.Name == "max-throughput" {
			return s.Paths["svc"].CPUPerRequest
		}
	}
	return 0
}
