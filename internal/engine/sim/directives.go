package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
)

// directivePrefix starts a directive line in the last user message:
//
//	sim: tokens=200 reasoning=40 tps=50 ttft=100ms slow=5ms
//	sim: tool=get_weather
//	sim: json=1            (or json=broken)
//	sim: fail=503          (or fail=cut after=10, fail=500 after=3)
//	sim: hang=1
//	sim: rtf=0.5           (audio: work takes half the clip's duration)
//	sim: verdict=unsafe labels=S1,S10   (guards, guard.go)
//
// Keys the simulator does not know are ignored, so that tests written for
// a newer simulator still run; a known key with a bad value is an error.
const directivePrefix = "sim:"

// maxDirectiveCount bounds numeric directives; nothing the simulator does
// needs more, and it keeps arithmetic on them far from overflow.
const maxDirectiveCount = 1 << 24

// directives are the test controls found in a request.
type directives struct {
	tokens    *int           // content tokens to generate
	reasoning *int           // reasoning tokens to generate
	tps       *float64       // decode rate for this request
	ttft      *time.Duration // time to first token for this request
	slow      time.Duration  // extra delay per token
	tool      string         // force a call of this tool
	json      string         // "" (request decides), "1" or "broken"
	failCode  int            // HTTP status to fail with; 0 = none
	cut       bool           // break the connection off (fail=cut)
	after     int            // tokens to emit before fail/cut
	hang      bool           // produce nothing until cancelled
	rtf       *float64       // real-time factor of this audio request

	// Guards (guard.go). A verdict without labels leaves them to the
	// keyword table; labels without a verdict mean unsafe. The reply_
	// forms sit in a prompt and decide the check of the reply to it,
	// which a test cannot otherwise script: the reply is generated.
	verdict      verdict
	labels       []string
	replyVerdict verdict
	replyLabels  []string
}

// failing reports whether the request is scripted to fail or break off.
func (d *directives) failing() bool { return d.failCode != 0 || d.cut }

// scripted is what a request answered whole does as its directives say:
// hang until cancelled, or fail as told; nil when it goes on.
func (d *directives) scripted(ctx context.Context) *api.Result {
	switch {
	case d.hang:
		<-ctx.Done()
		return engine.Cancelled()
	case d.failCode != 0:
		return directiveFailure(d.failCode, false)
	}
	return nil
}

// parseDirectives reads every directive line of text. Later lines and
// later keys override earlier ones.
func parseDirectives(text string) (directives, error) {
	var d directives
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, directivePrefix)
		if !ok {
			continue
		}
		for _, item := range strings.Fields(rest) {
			key, val, ok := strings.Cut(item, "=")
			if !ok {
				continue // not key=value: not a directive item
			}
			if err := d.set(key, val); err != nil {
				return directives{}, fmt.Errorf("sim directive %s: %w", key, err)
			}
		}
	}
	return d, nil
}

// set applies one key=value item.
func (d *directives) set(key, val string) error {
	switch key {
	case "tokens":
		n, err := parseCount(val)
		if err != nil {
			return err
		}
		d.tokens = &n
	case "reasoning":
		n, err := parseCount(val)
		if err != nil {
			return err
		}
		d.reasoning = &n
	case "after":
		n, err := parseCount(val)
		if err != nil {
			return err
		}
		d.after = n
	case "tps":
		f, err := parseRate(val)
		if err != nil {
			return err
		}
		d.tps = &f
	case "ttft":
		t, err := parseDuration(val)
		if err != nil {
			return err
		}
		d.ttft = &t
	case "slow":
		t, err := parseDuration(val)
		if err != nil {
			return err
		}
		d.slow = t
	case "tool":
		if val == "" {
			return fmt.Errorf("empty tool name")
		}
		d.tool = val
	case "json":
		switch strings.ToLower(val) {
		case "broken":
			d.json = "broken"
		default:
			on, err := parseBool(val)
			if err != nil {
				return fmt.Errorf("want 1, 0 or broken, got %q", val)
			}
			d.json = ""
			if on {
				d.json = "1"
			}
		}
	case "fail":
		if strings.EqualFold(val, "cut") {
			d.cut, d.failCode = true, 0
			return nil
		}
		code, err := strconv.Atoi(val)
		if err != nil || code < 400 || code > 599 {
			return fmt.Errorf("want an HTTP status 400-599 or cut, got %q", val)
		}
		d.failCode, d.cut = code, false
	case "hang":
		on, err := parseBool(val)
		if err != nil {
			return err
		}
		d.hang = on
	case "rtf":
		f, err := parseRate(val)
		if err != nil {
			return err
		}
		d.rtf = &f
	case "verdict", "reply_verdict":
		v, err := parseVerdict(val)
		if err != nil {
			return err
		}
		if key == "verdict" {
			d.verdict = v
		} else {
			d.replyVerdict = v
		}
	case "labels", "reply_labels":
		labels, err := parseLabels(val)
		if err != nil {
			return err
		}
		if key == "labels" {
			d.labels = labels
		} else {
			d.replyLabels = labels
		}
	}
	return nil
}

// guardVerdict is what the directives say of the message they sit in;
// "" leaves it to the keyword table.
func (d *directives) guardVerdict() (verdict, []string) {
	return impliedVerdict(d.verdict, d.labels)
}

// guardReplyVerdict is what the directives of a prompt say of its reply.
func (d *directives) guardReplyVerdict() (verdict, []string) {
	return impliedVerdict(d.replyVerdict, d.replyLabels)
}

func impliedVerdict(v verdict, labels []string) (verdict, []string) {
	if v == "" && len(labels) > 0 {
		v = verdictUnsafe
	}
	return v, labels
}

// parseVerdict reads a guard verdict.
func parseVerdict(s string) (verdict, error) {
	switch v := verdict(strings.ToLower(s)); v {
	case verdictSafe, verdictUnsafe, verdictBorderline, verdictMalformed:
		return v, nil
	}
	return "", fmt.Errorf("want safe, unsafe, borderline or malformed, got %q", s)
}

// parseLabels reads a comma-separated label list. A directive item holds
// no spaces, so "_" stands for one: labels=Unethical_Acts.
func parseLabels(s string) ([]string, error) {
	var out []string
	for l := range strings.SplitSeq(s, ",") {
		if l = strings.TrimSpace(strings.ReplaceAll(l, "_", " ")); l == "" {
			return nil, fmt.Errorf("empty label in %q", s)
		}
		out = append(out, l)
	}
	return out, nil
}

// withoutDirectives is text without its directive lines: what a speech
// request says aloud.
func withoutDirectives(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(strings.TrimSpace(line), directivePrefix) {
			b.WriteString(line)
		}
	}
	return strings.TrimSpace(b.String())
}

// parseCount reads a token count.
func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("not a whole number: %q", s)
	}
	if n < 0 || n > maxDirectiveCount {
		return 0, fmt.Errorf("%d out of range 0-%d", n, maxDirectiveCount)
	}
	return n, nil
}

// effectiveRate is the decode rate a request runs at, given the engine's
// rate and the request's directives, as tokens per second and as the time
// between tokens; both zero when it runs unpaced.
func (d *directives) effectiveRate(base float64) (float64, time.Duration) {
	tps := base
	if d.tps != nil {
		tps = *d.tps
	}
	// Clamp so absurd directives cannot overflow the arithmetic below.
	const maxInterval = time.Hour
	var interval time.Duration
	if tps > 0 {
		interval = time.Duration(min(float64(time.Second)/tps, float64(maxInterval)))
	}
	interval = min(interval+min(d.slow, maxInterval), maxInterval)
	if interval <= 0 {
		return 0, 0
	}
	return float64(time.Second) / float64(interval), interval
}
