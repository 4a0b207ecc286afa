package sim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseDirectives(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		check   func(d directives) bool
		wantErr bool
	}{
		{name: "none", text: "hello\nworld", check: func(d directives) bool { return d.tokens == nil && !d.failing() && !d.hang }},
		{name: "tokens and reasoning", text: "hi\nsim: tokens=12 reasoning=7", check: func(d directives) bool {
			return *d.tokens == 12 && *d.reasoning == 7
		}},
		{name: "indented line", text: "  sim: tokens=3  ", check: func(d directives) bool { return *d.tokens == 3 }},
		{name: "pacing", text: "sim: tps=50 ttft=100ms slow=2", check: func(d directives) bool {
			return *d.tps == 50 && *d.ttft == 100*time.Millisecond && d.slow == 2*time.Millisecond
		}},
		{name: "tool and json", text: "sim: tool=get_weather json=1", check: func(d directives) bool { return d.tool == "get_weather" && d.json == "1" }},
		{name: "json broken", text: "sim: json=broken", check: func(d directives) bool { return d.json == "broken" }},
		{name: "fail status", text: "sim: fail=503", check: func(d directives) bool { return d.failCode == 503 && !d.cut && d.failing() }},
		{name: "fail cut", text: "sim: fail=cut after=4", check: func(d directives) bool { return d.cut && d.after == 4 && d.failCode == 0 }},
		{name: "hang", text: "sim: hang=1", check: func(d directives) bool { return d.hang }},
		{name: "audio pace", text: "sim: rtf=0.5", check: func(d directives) bool { return *d.rtf == 0.5 }},
		{name: "later lines win", text: "sim: tokens=1\nsim: tokens=2", check: func(d directives) bool { return *d.tokens == 2 }},
		{name: "unknown keys ignored", text: "sim: colour=blue tokens=5 bare", check: func(d directives) bool { return *d.tokens == 5 }},
		{name: "mid-line is not a directive", text: "please sim: tokens=5", check: func(d directives) bool { return d.tokens == nil }},
		{name: "guard verdict and labels", text: "sim: verdict=Unsafe labels=S1,s10", check: func(d directives) bool {
			v, l := d.guardVerdict()
			return v == verdictUnsafe && slices.Equal(l, []string{"S1", "s10"})
		}},
		{name: "labels alone mean unsafe", text: "sim: labels=Unethical_Acts", check: func(d directives) bool {
			v, l := d.guardVerdict()
			return v == verdictUnsafe && slices.Equal(l, []string{"Unethical Acts"})
		}},
		{name: "no guard directive", text: "hello", check: func(d directives) bool {
			v, l := d.guardVerdict()
			return v == "" && l == nil
		}},
		{name: "reply verdict", text: "sim: verdict=safe reply_verdict=borderline reply_labels=PII", check: func(d directives) bool {
			v, _ := d.guardVerdict()
			rv, rl := d.guardReplyVerdict()
			return v == verdictSafe && rv == verdictBorderline && slices.Equal(rl, []string{"PII"})
		}},
		{name: "malformed verdict", text: "sim: verdict=malformed", check: func(d directives) bool { return d.verdict == verdictMalformed }},
		{name: "bad verdict", text: "sim: verdict=maybe", wantErr: true},
		{name: "empty label", text: "sim: labels=S1,,S2", wantErr: true},
		{name: "bad reply verdict", text: "sim: reply_verdict=", wantErr: true},
		{name: "bad count", text: "sim: tokens=lots", wantErr: true},
		{name: "negative count", text: "sim: tokens=-1", wantErr: true},
		{name: "huge count", text: "sim: reasoning=99999999999", wantErr: true},
		{name: "bad status", text: "sim: fail=200", wantErr: true},
		{name: "bad json", text: "sim: json=yaml", wantErr: true},
		{name: "bad duration", text: "sim: ttft=later", wantErr: true},
		{name: "empty tool", text: "sim: tool=", wantErr: true},
		{name: "bad rtf", text: "sim: rtf=-1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := parseDirectives(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseDirectives(%q) error = %v, wantErr %v", tt.text, err, tt.wantErr)
			}
			if err == nil && !tt.check(d) {
				t.Fatalf("parseDirectives(%q) = %+v", tt.text, d)
			}
		})
	}
}

func TestEffectiveRate(t *testing.T) {
	tests := []struct {
		name     string
		base     float64
		text     string
		tps      float64
		interval time.Duration
	}{
		{"engine rate", 100, "", 100, 10 * time.Millisecond},
		{"unpaced", 0, "", 0, 0},
		{"override", 100, "sim: tps=50", 50, 20 * time.Millisecond},
		{"override to unpaced", 100, "sim: tps=0", 0, 0},
		{"slow adds per token", 100, "sim: slow=10ms", 50, 20 * time.Millisecond},
		{"slow alone", 0, "sim: slow=4ms", 250, 4 * time.Millisecond},
		{"absurdly slow is clamped", 0, "sim: tps=0.0000000001", 1.0 / 3600, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := parseDirectives(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			tps, interval := d.effectiveRate(tt.base)
			if interval != tt.interval || (tps-tt.tps) > 0.001 || (tt.tps-tps) > 0.001 {
				t.Fatalf("effectiveRate = %v, %v; want %v, %v", tps, interval, tt.tps, tt.interval)
			}
		})
	}
}

func FuzzParseDirectives(f *testing.F) {
	for _, s := range []string{
		"", "sim: tokens=5", "sim: fail=cut after=3", "sim: fail=507", "sim: tps=1e3 ttft=5ms slow=1",
		"hello\nsim: json=broken tool=x hang=0\n", "sim:tokens=1", "sim: =", "sim: a=b=c", "sim: ttft=9223372036854775807ns",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		d, err := parseDirectives(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "sim directive ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if d.tokens != nil && (*d.tokens < 0 || *d.tokens > maxDirectiveCount) {
			t.Fatalf("tokens out of range: %d", *d.tokens)
		}
		if d.reasoning != nil && (*d.reasoning < 0 || *d.reasoning > maxDirectiveCount) {
			t.Fatalf("reasoning out of range: %d", *d.reasoning)
		}
		if d.after < 0 || d.slow < 0 || (d.ttft != nil && *d.ttft < 0) || (d.tps != nil && *d.tps < 0) {
			t.Fatalf("negative value: %+v", d)
		}
		if d.failCode != 0 && (d.failCode < 400 || d.failCode > 599 || d.cut) {
			t.Fatalf("bad fail: %+v", d)
		}
		if d.json != "" && d.json != "1" && d.json != "broken" {
			t.Fatalf("bad json mode %q", d.json)
		}
		if tps, interval := d.effectiveRate(100); tps < 0 || interval < 0 || interval > time.Hour {
			t.Fatalf("effectiveRate = %v, %v", tps, interval)
		}
	})
}
