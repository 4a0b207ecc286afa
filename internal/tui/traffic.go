package tui

import (
	"math"
	"time"

	"charm.land/lipgloss/v2"

	"github.com/svc-dev/svc/internal/api"
)

// maxSamples bounds the traffic history: three minutes at the default one
// poll a second.
const maxSamples = 180

// shareWindow is how far back the error shares look: long enough that one
// failed request in a quiet second does not read as a 100% error rate.
const shareWindow = time.Minute

// sample is what happened between two polls: counter deltas over Dt.
type sample struct {
	At   time.Time
	Dt   float64 // seconds since the previous poll
	Req  int64   // requests completed
	Tok  int64   // tokens (prompt + completion) of those requests
	Err  int64   // failed requests other than 429s
	R429 int64   // requests answered 429
}

func (s sample) rate(n int64) float64 {
	if s.Dt <= 0 {
		return 0
	}
	return float64(n) / s.Dt
}

// traffic turns the polled usage totals into per-second samples. The
// summary's counters are exact, so consecutive polls diff to exact rates;
// the usage log only splits the failures into 429s and the rest.
type traffic struct {
	samples []sample // oldest first

	// The previous summary, the baseline of the next sample.
	prev   api.UsageSummary
	prevAt time.Time
	have   bool

	// seen holds the ids of the previous usage-log page (the newest rows):
	// a row is new if it was not on that page. Rows only ever leave the page
	// from the old end, so the last page is all that needs remembering.
	seen map[string]struct{}

	today     api.UsageSummary
	haveToday bool

	// Tokens are counted as they are generated, not only once a request
	// completes: gen is what each running stream had generated at the last
	// poll, live what the running streams generated since the last sample,
	// and done what had been counted of the streams that finished since,
	// which their completed totals already hold.
	gen        map[string]int
	live, done int64
}

// progress folds a poll of the requests in flight into the token count:
// what each stream generated since the last poll. inflight is nil when the
// poll failed. t is not modified.
func (t traffic) progress(inflight []api.InflightRequest) traffic {
	if inflight == nil {
		return t
	}
	next := make(map[string]int, len(inflight))
	for _, r := range inflight {
		if r.TokensGenerated == nil {
			continue
		}
		n := *r.TokensGenerated
		next[r.TaskID] = n
		if n > t.gen[r.TaskID] {
			t.live += int64(n - t.gen[r.TaskID])
		}
	}
	for id, n := range t.gen {
		if _, running := next[id]; !running {
			t.done += int64(n)
		}
	}
	t.gen = next
	return t
}

// logLimit is the usage-log page polled each tick.
const logLimit = 200

// observe folds one poll into the history and returns the new state; sum
// is nil when the summary failed, rows is nil when the log failed. t is
// not modified: Update hands the result back to bubbletea's model.
func (t traffic) observe(at time.Time, sum *api.UsageSummary, rows []api.UsageRow) traffic {
	if sum == nil {
		// No exact totals, no sample. The seen rows stay as they were, so the
		// next sample's 429 split covers the same span as its totals.
		return t
	}
	t.today, t.haveToday = *sum, true

	var newRows, new429, newFailed int64
	var seen map[string]struct{}
	if rows != nil {
		seen = make(map[string]struct{}, len(rows))
		for _, r := range rows {
			seen[r.ID] = struct{}{}
			if t.seen == nil {
				continue
			}
			if _, ok := t.seen[r.ID]; ok {
				continue
			}
			newRows++
			if failed(r.StatusCode) {
				newFailed++
				if r.StatusCode == 429 {
					new429++
				}
			}
		}
	}

	if t.have && continues(t.prev, *sum) && at.After(t.prevAt) {
		s := sample{
			At:  at,
			Dt:  at.Sub(t.prevAt).Seconds(),
			Req: sum.Requests - t.prev.Requests,
			// The streams' tokens as they came, and the completed
			// requests' totals less what was counted of them running.
			Tok: max(0, sum.TotalTokens-t.prev.TotalTokens-t.done) + t.live,
		}
		t.live, t.done = 0, 0
		failedDelta := sum.Failed - t.prev.Failed
		if rows != nil && t.seen != nil {
			s.R429 = new429
			// A page of nothing but new rows may have missed some: scale the
			// page's share of 429s among failures to the exact failure count.
			if newRows >= int64(len(rows)) && len(rows) >= logLimit && newFailed > 0 {
				s.R429 = int64(math.Round(float64(failedDelta) * float64(new429) / float64(newFailed)))
			}
			s.R429 = min(s.R429, failedDelta)
		}
		s.Err = max(0, failedDelta-s.R429)
		t.samples = appendSample(t.samples, s)
	}
	t.prev, t.prevAt, t.have = *sum, at, true
	if rows != nil {
		t.seen = seen
	}
	return t
}

// failed is the summary's definition: 400 and above except client cancels.
func failed(status int) bool { return status >= 400 && status != 499 }

// continues reports whether cur counts on from prev. A new UTC day starts
// the one-day summary from zero; diffing across it would give negative
// rates, so that poll only becomes the new baseline.
func continues(prev, cur api.UsageSummary) bool {
	return prev.To == cur.To && cur.Requests >= prev.Requests && cur.TotalTokens >= prev.TotalTokens && cur.Failed >= prev.Failed
}

// appendSample adds s, dropping the oldest beyond maxSamples. It copies when
// trimming so an older model value never sees its history shift.
func appendSample(ss []sample, s sample) []sample {
	if len(ss) >= maxSamples {
		ss = append([]sample(nil), ss[len(ss)-maxSamples+1:]...)
	}
	return append(ss, s)
}

// trafficPane is the traffic pane: the history it draws.
type trafficPane struct {
	hist traffic
}

// trafficView is everything the traffic pane draws.
type trafficView struct {
	samples   []sample
	today     api.UsageSummary
	haveToday bool
	focused   bool
	// denied is the gateway's refusal of the key for usage, "" otherwise.
	denied string
}

// trafficStats are the current rates and the recent error rates.
type trafficStats struct {
	req, tok float64 // per second, latest sample
	// Errors are rarer and burstier: they are averaged over shareWindow,
	// per second and as a share of the requests in it.
	err, r429           float64
	errShare, r429Share float64
}

func stats(ss []sample) trafficStats {
	var st trafficStats
	if len(ss) == 0 {
		return st
	}
	last := ss[len(ss)-1]
	st.req, st.tok = last.rate(last.Req), last.rate(last.Tok)
	var req, errs, r429 int64
	var secs float64
	for i := len(ss) - 1; i >= 0 && last.At.Sub(ss[i].At) < shareWindow; i-- {
		req += ss[i].Req
		errs += ss[i].Err
		r429 += ss[i].R429
		secs += ss[i].Dt
	}
	if secs > 0 {
		st.err, st.r429 = float64(errs)/secs, float64(r429)/secs
	}
	if req > 0 {
		st.errShare = float64(errs) / float64(req)
		st.r429Share = float64(r429) / float64(req)
	}
	return st
}

// spanOf is the time the last n samples cover.
func spanOf(ss []sample, n int) time.Duration {
	if len(ss) == 0 || n <= 0 {
		return 0
	}
	first := ss[max(0, len(ss)-n)]
	return ss[len(ss)-1].At.Sub(first.At) + time.Duration(first.Dt*float64(time.Second))
}

// renderTraffic draws the traffic pane in exactly width×height cells. With
// three body lines it draws one-line sparklines with the value beside them;
// given more room, taller sparklines with a caption line above each.
func renderTraffic(d trafficView, width, height int, st *styles) string {
	if d.denied != "" {
		// Said, not left collecting for ever.
		return box(st, frame{title: "Traffic", focused: d.focused},
			[]string{st.dim.Render("not shown: this API key may not read usage (usage:read)")}, width, height)
	}
	cw, ch := contentSize(width, height)
	s := stats(d.samples)
	req := make([]float64, len(d.samples))
	tok := make([]float64, len(d.samples))
	for i, x := range d.samples {
		req[i], tok[i] = x.rate(x.Req), x.rate(x.Tok)
	}
	now := func(v float64) string {
		if len(d.samples) == 0 {
			return "—"
		}
		return fmtRate(v) + "/s"
	}

	share := func(v float64) string {
		if len(d.samples) == 0 {
			return ""
		}
		return " " + fmtPct(v)
	}
	errLine := st.dim.Render("errors ") + rateStyle(st, s.err, st.bad).Render(now(s.err)+share(s.errShare))
	r429Line := st.dim.Render("429s ") + rateStyle(st, s.r429, st.warn).Render(now(s.r429)+share(s.r429Share))
	var todayLine string
	if d.haveToday {
		t := d.today
		todayLine = st.dim.Render("today ") + fmtCount(t.Requests) + " req · " + fmtCount(t.TotalTokens) + " tok · " +
			fmtCount(t.Failed) + " failed"
	}

	var body []string
	const labelW, valueW = 7, 8
	// sw is the sparklines' width: a sample a column, the newest on the
	// right, so the footer's span is that of the last sw samples.
	var sw int
	if rows := (ch - 5) / 2; rows >= 2 {
		rows = min(rows, 8)
		sw = cw
		body = append(body, st.bold.Render("requests/s ")+now(s.req))
		for _, l := range sparkline(req, sw, rows) {
			body = append(body, st.spark.Render(l))
		}
		body = append(body, st.bold.Render("tokens/s ")+now(s.tok))
		for _, l := range sparkline(tok, sw, rows) {
			body = append(body, st.spark.Render(l))
		}
		body = append(body, errLine+st.dim.Render("  over 1m"), r429Line+st.dim.Render("  over 1m"), todayLine)
	} else {
		sw = max(0, cw-labelW-valueW-1)
		line := func(label string, vals []float64, v float64) string {
			return padRight(st.bold.Render(label), labelW) + st.spark.Render(sparkline(vals, sw, 1)[0]) + " " + padLeft(now(v), valueW)
		}
		body = append(body, line("req/s", req, s.req), line("tok/s", tok, s.tok))
		stat := errLine + st.dim.Render(" · ") + r429Line
		if todayLine != "" && lipgloss.Width(stat)+3+lipgloss.Width(todayLine) <= cw {
			stat += st.dim.Render(" · ") + todayLine
		}
		body = append(body, stat)
	}
	f := frame{title: "Traffic", focused: d.focused}
	if len(d.samples) == 0 {
		f.footer = "collecting…"
	} else {
		f.footer = "last " + fmtAge(spanOf(d.samples, sw).Round(time.Second))
	}
	return box(st, f, body, width, height)
}

// rateStyle colours a non-zero error rate; zero stays plain so a healthy
// gateway shows no red.
func rateStyle(st *styles, v float64, hot lipgloss.Style) lipgloss.Style {
	if v > 0 {
		return hot
	}
	return lipgloss.NewStyle()
}

func (p trafficPane) view(c common, d *snapshot, width, height int, focused bool) string {
	return renderTraffic(trafficView{
		samples:   p.hist.samples,
		today:     p.hist.today,
		haveToday: p.hist.haveToday,
		focused:   focused,
		denied:    d.usageDenied,
	}, width, height, c.st)
}
