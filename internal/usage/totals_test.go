package usage

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

func ptr[T any](v T) *T { return &v }

func TestClean(t *testing.T) {
	at := time.Date(2026, 11, 15, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600))
	tests := []struct {
		name     string
		in, want api.UsageRow
	}{
		{"finite measurements are kept",
			api.UsageRow{CreatedAt: at, TokensPerSecond: ptr(41.5), DraftAcceptanceRate: ptr(0.5), AudioSeconds: ptr(2.25), EnergyWh: ptr(0.0)},
			api.UsageRow{CreatedAt: at.UTC(), TokensPerSecond: ptr(41.5), DraftAcceptanceRate: ptr(0.5), AudioSeconds: ptr(2.25), EnergyWh: ptr(0.0)}},
		{"what is not a finite number is dropped",
			api.UsageRow{CreatedAt: at, TokensPerSecond: ptr(math.Inf(1)), DraftAcceptanceRate: ptr(math.NaN()), AudioSeconds: ptr(math.Inf(-1)), EnergyWh: ptr(math.NaN())},
			api.UsageRow{CreatedAt: at.UTC()}},
		{"absent stays absent", api.UsageRow{CreatedAt: at.UTC()}, api.UsageRow{CreatedAt: at.UTC()}},
		{"a negative count is 0, a total at least its parts",
			api.UsageRow{CreatedAt: at, PromptTokens: -50, CompletionTokens: 7, TotalTokens: -43, SpeechSeconds: ptr(math.NaN())},
			api.UsageRow{CreatedAt: at.UTC(), CompletionTokens: 7, TotalTokens: 7}},
		{"a count past belief is held to the bound",
			api.UsageRow{CreatedAt: at, PromptTokens: math.MaxInt64, CompletionTokens: math.MaxInt64, TotalTokens: math.MaxInt64,
				ReasoningTokens: ptr(math.MaxInt64), CachedTokens: ptr(math.MaxInt64)},
			api.UsageRow{CreatedAt: at.UTC(), PromptTokens: api.MaxTokens, CompletionTokens: api.MaxTokens, TotalTokens: 2 * api.MaxTokens,
				ReasoningTokens: ptr(api.MaxTokens), CachedTokens: ptr(api.MaxTokens)}},
		{"negative optional counts are 0",
			api.UsageRow{CreatedAt: at, ReasoningTokens: ptr(-7), CachedTokens: ptr(-3)},
			api.UsageRow{CreatedAt: at.UTC(), ReasoningTokens: ptr(0), CachedTokens: ptr(0)}},
		{"a total past its parts is kept",
			api.UsageRow{CreatedAt: at, PromptTokens: 5, CompletionTokens: 3, TotalTokens: 9},
			api.UsageRow{CreatedAt: at.UTC(), PromptTokens: 5, CompletionTokens: 3, TotalTokens: 9}},
		{"negative measurements are dropped",
			api.UsageRow{CreatedAt: at, TokensPerSecond: ptr(-3.0), DraftAcceptanceRate: ptr(-0.5), AudioSeconds: ptr(-1.0),
				SpeechSeconds: ptr(-2.0), EnergyWh: ptr(-5.0), RequestDurationMs: -10,
				TimeToFirstTokenMs: ptr[int64](-50), QueueWaitMs: ptr[int64](-1), WorkerQueueWaitMs: ptr[int64](-1), ModelLoadMs: ptr[int64](math.MinInt64)},
			api.UsageRow{CreatedAt: at.UTC()}},
		{"an acceptance rate past 1 and timings past a week are dropped",
			api.UsageRow{CreatedAt: at, DraftAcceptanceRate: ptr(7.5), TimeToFirstTokenMs: ptr[int64](api.MaxMs + 1), ModelLoadMs: ptr[int64](math.MaxInt64)},
			api.UsageRow{CreatedAt: at.UTC()}},
		{"measurements at their bounds are kept",
			api.UsageRow{CreatedAt: at, DraftAcceptanceRate: ptr(1.0), TimeToFirstTokenMs: ptr[int64](api.MaxMs), QueueWaitMs: ptr[int64](0),
				RequestDurationMs: 5, EnergyWh: ptr(0.0)},
			api.UsageRow{CreatedAt: at.UTC(), DraftAcceptanceRate: ptr(1.0), TimeToFirstTokenMs: ptr[int64](api.MaxMs), QueueWaitMs: ptr[int64](0),
				RequestDurationMs: 5, EnergyWh: ptr(0.0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			Clean(&got)
			if !reflect.DeepEqual(got, tt.want) || got.CreatedAt.Location() != time.UTC {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestRollupOf(t *testing.T) {
	at := time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)
	base := api.UsageRow{CreatedAt: at, Model: "m", StatusCode: 200, PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7,
		Images: 2, RequestDurationMs: 900, WorkerID: "w1", WorkerName: "one"}
	// A row without energy counts its tokens as unmetered.
	counts := api.UsageTotals{Requests: 1, PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, Images: 2, RequestDurationMs: 900,
		UnmeteredTokens: 7}
	with := func(f func(*api.UsageRow)) api.UsageRow { r := base; f(&r); return r }
	plus := func(f func(*api.UsageTotals)) api.UsageTotals { t := counts; f(&t); return t }
	tests := []struct {
		name string
		row  api.UsageRow
		want Rollup
	}{
		{"a success", base, Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Succeeded = 1 })}},
		{"below 400 is a success", with(func(r *api.UsageRow) { r.StatusCode = 399 }),
			Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Succeeded = 1 })}},
		{"499 is cancelled", with(func(r *api.UsageRow) { r.StatusCode = 499 }),
			Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Cancelled = 1 })}},
		{"400 failed", with(func(r *api.UsageRow) { r.StatusCode = 400 }),
			Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Failed = 1 })}},
		{"503 failed", with(func(r *api.UsageRow) { r.StatusCode = 503 }),
			Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Failed = 1 })}},
		{"optional counts", with(func(r *api.UsageRow) {
			r.ReasoningTokens, r.CachedTokens, r.AudioSeconds, r.EnergyWh = ptr(5), ptr(6), ptr(1.5), ptr(0.25)
		}), Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) {
			t.Succeeded, t.ReasoningTokens, t.CachedTokens, t.AudioSeconds, t.EnergyWh, t.UnmeteredTokens = 1, 5, 6, 1.5, 0.25, 0
		})}},
		{"energy measured as none is metered", with(func(r *api.UsageRow) { r.EnergyWh = ptr(0.0) }),
			Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Succeeded, t.UnmeteredTokens = 1, 0 })}},
		{"on no worker", with(func(r *api.UsageRow) { r.WorkerID, r.WorkerName = "", "" }),
			Rollup{"2026-11-15", "m", "", "", plus(func(t *api.UsageTotals) { t.Succeeded = 1 })}},
		{"the UTC date of a time in another zone", with(func(r *api.UsageRow) {
			r.CreatedAt = time.Date(2026, 11, 16, 4, 0, 0, 0, time.FixedZone("UTC+5", 5*3600))
		}), Rollup{"2026-11-15", "m", "w1", "one", plus(func(t *api.UsageTotals) { t.Succeeded = 1 })}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RollupOf(&tt.row); got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Add adds every field: one it missed would be lost from every total.
func TestAdd(t *testing.T) {
	var a, b, want api.UsageTotals
	va, vb, vw := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem(), reflect.ValueOf(&want).Elem()
	for i := range va.NumField() {
		switch f := va.Field(i); f.Kind() {
		case reflect.Int64:
			f.SetInt(int64(i + 1))
			vb.Field(i).SetInt(int64(100 * (i + 1)))
			vw.Field(i).SetInt(int64(101 * (i + 1)))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
			vb.Field(i).SetFloat(float64(100*i) + 0.25)
			vw.Field(i).SetFloat(float64(101*i) + 0.75)
		default:
			t.Fatalf("field %s of kind %s", va.Type().Field(i).Name, f.Kind())
		}
	}
	Add(&a, &b)
	if a != want {
		t.Fatalf("got %+v\nwant %+v", a, want)
	}
}

// Sums of measured seconds are the decimals they add up to, not binary
// fractions' noise.
func TestAddRoundsAwayBinaryNoise(t *testing.T) {
	var sum api.UsageTotals
	for _, s := range []float64{1.33, 0.335, 0.525, 0.335, 0.525, 0.875, 0.875} {
		Add(&sum, &api.UsageTotals{SpeechSeconds: s, AudioSeconds: s / 10})
	}
	if sum.SpeechSeconds != 4.8 || sum.AudioSeconds != 0.48 {
		t.Fatalf("speech %v, audio %v; want 4.8 and 0.48", sum.SpeechSeconds, sum.AudioSeconds)
	}
}

// A sum that would overflow stops at the largest value instead of
// wrapping to a negative one, which, kept for good, would never recover.
func TestAddSaturates(t *testing.T) {
	tests := []struct {
		name      string
		a, b, sum int64
	}{
		{"in range", 5, 7, 12},
		{"to the largest exactly", math.MaxInt64 - 1, 1, math.MaxInt64},
		{"past the largest", math.MaxInt64, 1, math.MaxInt64},
		{"both largest", math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{"past the smallest", math.MinInt64, -1, math.MinInt64},
		{"of opposite signs", math.MaxInt64, math.MinInt64, -1},
		{"a negative addend", 10, -3, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := api.UsageTotals{PromptTokens: tt.a, Requests: tt.a}
			Add(&dst, &api.UsageTotals{PromptTokens: tt.b, Requests: tt.b})
			if dst.PromptTokens != tt.sum || dst.Requests != tt.sum {
				t.Fatalf("%d + %d = %d, %d; want %d", tt.a, tt.b, dst.PromptTokens, dst.Requests, tt.sum)
			}
		})
	}
	dst := api.UsageTotals{EnergyWh: math.MaxFloat64, AudioSeconds: -math.MaxFloat64}
	Add(&dst, &api.UsageTotals{EnergyWh: math.MaxFloat64, AudioSeconds: -math.MaxFloat64})
	if dst.EnergyWh != math.MaxFloat64 || dst.AudioSeconds != -math.MaxFloat64 {
		t.Fatalf("float sums past the largest: %+v", dst)
	}
}

// The reproduced corruption: rows of a worker claiming the most tokens an
// int64 holds made the day's prompt_tokens read -9223372036854775808.
// Cleaned, each row counts at most api.MaxTokens, and whatever a day adds
// up to, the totals never wrap.
func TestHostileRowsNeverWrapTotals(t *testing.T) {
	at := time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)
	row := api.UsageRow{CreatedAt: at, Model: "m", StatusCode: 200, PromptTokens: math.MaxInt64, CompletionTokens: math.MaxInt64,
		TotalTokens: math.MaxInt64, ReasoningTokens: ptr(-7), CachedTokens: ptr(-3), EnergyWh: ptr(-5.0), RequestDurationMs: 10}
	Clean(&row)
	r := RollupOf(&row)
	if r.Totals.PromptTokens != api.MaxTokens || r.Totals.TotalTokens != 2*api.MaxTokens ||
		r.Totals.ReasoningTokens != 0 || r.Totals.CachedTokens != 0 || r.Totals.EnergyWh != 0 {
		t.Fatalf("one row adds %+v", r.Totals)
	}
	var day api.UsageTotals
	for range 2 {
		Add(&day, &r.Totals)
	}
	if day.PromptTokens != 2*api.MaxTokens || day.TotalTokens != 4*api.MaxTokens {
		t.Fatalf("two rows: %+v", day)
	}
	// A billion rows at the bound fit in a day's sums; past them the sums
	// stop at the largest.
	if math.MaxInt64/(2*api.MaxTokens) < 1e9 {
		t.Fatal("api.MaxTokens leaves room for fewer than a billion rows a day")
	}
	big := r.Totals
	big.PromptTokens, big.TotalTokens = math.MaxInt64/2+1, math.MaxInt64/2+1
	for range 3 {
		Add(&day, &big)
	}
	if day.PromptTokens != math.MaxInt64 || day.TotalTokens != math.MaxInt64 || day.Requests != 5 {
		t.Fatalf("saturated: %+v", day)
	}
}
