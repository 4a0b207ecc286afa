package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// client is the load generator's HTTP client: keep-alive, no limits that
// would queue requests inside the generator.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: 20000, MaxIdleConnsPerHost: 20000, IdleConnTimeout: time.Minute,
		DisableCompression: true, ForceAttemptHTTP2: false,
	}}
}

// outcome is one request's result.
type outcome struct {
	status  int
	at      time.Time     // when it was scheduled to be sent (open loop)
	lag     time.Duration // from then until the generator began sending it
	retry   string        // Retry-After of a 429
	err     error
	latency time.Duration   // from the scheduled send time to the whole answer
	ttft    time.Duration   // streaming: to the first content chunk
	gaps    []time.Duration // streaming: between content chunks
	// queue is svc's own wait for a slot, gateway and worker, from the
	// reply's Server-Timing; -1 where the reply gave none.
	queue time.Duration
}

// recorder gathers outcomes from many goroutines.
type recorder struct {
	mu   sync.Mutex
	outs []outcome
}

func (r *recorder) add(o outcome) {
	r.mu.Lock()
	r.outs = append(r.outs, o)
	r.mu.Unlock()
}

// call sends one request and reads the whole answer.
type call func(ctx context.Context, scheduled time.Time) outcome

// openLoop sends at a constant rate for dur, each request at its own
// scheduled time whether or not earlier ones have finished, and measures
// latency from that scheduled time, so a slow system cannot slow the
// arrivals down and hide its own queueing.
func openLoop(ctx context.Context, rate float64, dur time.Duration, do call) ([]outcome, time.Duration) {
	return openLoopPhases(ctx, []phase{{rate, dur}}, do)
}

// phase is a stretch of an open-loop schedule at one rate.
type phase struct {
	rate float64
	dur  time.Duration
}

// openLoopPhases is openLoop at each phase's rate in turn, on one
// schedule: requests still in flight when the rate changes keep going.
func openLoopPhases(ctx context.Context, phases []phase, do call) ([]outcome, time.Duration) {
	var rec recorder
	var wg sync.WaitGroup
	start := time.Now()
	from := start
send:
	for _, ph := range phases {
		interval := time.Duration(float64(time.Second) / ph.rate)
		for i := range int(ph.dur / interval) {
			at := from.Add(time.Duration(i) * interval)
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			if ctx.Err() != nil {
				break send
			}
			wg.Go(func() {
				lag := time.Since(at)
				o := do(ctx, at)
				o.at, o.lag = at, lag
				rec.add(o)
			})
		}
		from = from.Add(ph.dur)
	}
	wg.Wait()
	return rec.outs, time.Since(start)
}

// closedLoop keeps conc requests in flight for dur: the most the system
// answers.
func closedLoop(ctx context.Context, conc int, dur time.Duration, do call) ([]outcome, time.Duration) {
	var rec recorder
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(dur)
	for range conc {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				rec.add(do(ctx, time.Now()))
			}
		})
	}
	wg.Wait()
	return rec.outs, time.Since(start)
}

// chatRequest is a chat completion request to p.
func chatRequest(ctx context.Context, p *path, body string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", p.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if p.key != "" {
		req.Header.Set("Authorization", "Bearer "+p.key)
	}
	return req
}

// unaryCall posts body and reads the answer.
func unaryCall(c *http.Client, p *path, body string) call {
	return func(ctx context.Context, at time.Time) outcome {
		resp, err := c.Do(chatRequest(ctx, p, body))
		if err != nil {
			return outcome{err: err, latency: time.Since(at)}
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		o := outcome{status: resp.StatusCode, err: err, latency: time.Since(at), queue: queueWait(resp.Header.Get("Server-Timing"))}
		if o.status == http.StatusTooManyRequests {
			o.retry = resp.Header.Get("Retry-After")
		}
		return o
	}
}

// streamCall posts a streaming body and times the first content chunk
// and the gaps between content chunks.
func streamCall(c *http.Client, p *path, body string) call {
	return func(ctx context.Context, at time.Time) outcome {
		resp, err := c.Do(chatRequest(ctx, p, body))
		if err != nil {
			return outcome{err: err, latency: time.Since(at)}
		}
		defer resp.Body.Close()
		o := outcome{status: resp.StatusCode}
		br := bufio.NewReader(resp.Body)
		var last time.Time
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				if err != io.EOF {
					o.err = err
				}
				break
			}
			if !bytes.HasPrefix(line, []byte("data: {")) || !bytes.Contains(line, []byte(`"content":"`)) {
				continue
			}
			now := time.Now()
			if last.IsZero() {
				o.ttft = now.Sub(at)
			} else {
				o.gaps = append(o.gaps, now.Sub(last))
			}
			last = now
		}
		o.latency = time.Since(at)
		return o
	}
}

// stats summarise a run on one path.
type stats struct {
	Target   float64        `json:"target_rps,omitempty"`
	Achieved float64        `json:"achieved_rps"`
	Requests int            `json:"requests"`
	Success  float64        `json:"success_share"`
	Statuses map[string]int `json:"statuses"`
	Latency  percentiles    `json:"latency_ms"`
	TTFT     *percentiles   `json:"ttft_ms,omitempty"`
	Gap      *percentiles   `json:"chunk_gap_ms,omitempty"`
	CPU      float64        `json:"sut_cpu_share,omitempty"` // share of one core used by the system under test
	PeakRSS  int64          `json:"sut_peak_rss_bytes,omitempty"`
	// The system under test's user plus system CPU time per request: in a
	// closed loop, over the requests answered in the measured part; in an
	// open loop, its share of a core over the rate.
	CPUPerRequest float64 `json:"sut_cpu_us_per_request,omitempty"`
	// CPUPerRequestOf is CPUPerRequest by process (gateway, worker), closed
	// loop only, for a system under test of several.
	CPUPerRequestOf map[string]float64 `json:"sut_cpu_us_per_request_by_process,omitempty"`
	// Closed loop only, svc only: heap allocations per request answered.
	AllocsPerRequest float64 `json:"sut_allocs_per_request,omitempty"`
	// FirstError is the first request error's text, to tell why a run
	// failed.
	FirstError string `json:"first_error,omitempty"`
	// DBCPU is the share of one core the cluster's PostgreSQL used, apart
	// from CPU: the database is not on the system under test's core.
	DBCPU float64 `json:"db_cpu_share,omitempty"`
}

type percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

func pct(ds []time.Duration) percentiles {
	if len(ds) == 0 {
		return percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := int(q * float64(len(ds)))
		return ms(ds[min(i, len(ds)-1)])
	}
	return percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarise turns outcomes into stats. Only answers with status 200 count
// toward latency, unless only is set, which picks the statuses measured.
func summarise(outs []outcome, elapsed time.Duration, only ...int) stats {
	s := stats{Requests: len(outs), Statuses: map[string]int{}}
	var lat, ttft, gaps []time.Duration
	ok := 0
	for _, o := range outs {
		key := "error"
		if o.err != nil && s.FirstError == "" {
			s.FirstError = o.err.Error()
		}
		if o.err == nil {
			key = http.StatusText(o.status)
			if key == "" {
				key = "status"
			}
			key = strings.ToLower(strings.ReplaceAll(key, " ", "_"))
			key = strconv.Itoa(o.status) + "_" + key
		}
		s.Statuses[key]++
		want := o.err == nil && o.status == 200
		if len(only) > 0 {
			want = o.err == nil && slices.Contains(only, o.status)
		}
		if o.err == nil && o.status == 200 {
			ok++
		}
		if want {
			lat = append(lat, o.latency)
			if o.ttft > 0 {
				ttft = append(ttft, o.ttft)
			}
			gaps = append(gaps, o.gaps...)
		}
	}
	if len(outs) > 0 {
		s.Success = float64(ok) / float64(len(outs))
	}
	s.Achieved = float64(len(outs)) / elapsed.Seconds()
	s.Latency = pct(lat)
	if len(ttft) > 0 {
		p := pct(ttft)
		s.TTFT = &p
	}
	if len(gaps) > 0 {
		p := pct(gaps)
		s.Gap = &p
	}
	return s
}

// queueWait is the "queue" member of a Server-Timing header, or -1.
func queueWait(h string) time.Duration {
	for m := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(m), ";")
		if name != "queue" {
			continue
		}
		for p := range strings.SplitSeq(params, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				if ms, err := strconv.ParseFloat(v, 64); err == nil {
					return time.Duration(ms * float64(time.Millisecond))
				}
			}
		}
	}
	return -1
}
