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
		{"a negative count is 0",
			api.UsageRow{CreatedAt: at, PromptTokens: -50, CompletionTokens: 7, TotalTokens: -43, SpeechSeconds: ptr(math.NaN())},
			api.UsageRow{CreatedAt: at.UTC(), CompletionTokens: 7}},
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
	counts := api.UsageTotals{Requests: 1, PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, Images: 2, RequestDurationMs: 900}
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
			t.Succeeded, t.ReasoningTokens, t.CachedTokens, t.AudioSeconds, t.EnergyWh = 1, 5, 6, 1.5, 0.25
		})}},
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
