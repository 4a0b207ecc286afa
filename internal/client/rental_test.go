package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/money"
)

// TestRentalEndpoints checks each method's method, path and body, and that
// money and optional fields decode.
func TestRentalEndpoints(t *testing.T) {
	type sent struct{ method, path, body string }
	var got []sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, sent{r.Method, r.URL.EscapedPath(), string(b)})
		rental := `{"id": "r/1", "status": "provisioning", "price_per_hour_gbp": 2.10, "accrued_cost_gbp": 0.00,
			"boot_phase": "queued", "model_download": null, "started_at": null, "created_at": "2026-01-02T03:04:05Z"}`
		switch r.Method + " " + r.URL.Path {
		case "GET /api/v1/compute/catalogue":
			_, _ = io.WriteString(w, `[{"gpu_model_id": "a100-80gb", "vram_gb": 80, "gpu_count": 1, "tiers": [
				{"tier_id": "uk", "price_per_hour_gbp": 2.10, "allowed": true, "available": false, "max_ram_gb": null}]}]`)
		case "GET /api/v1/compute/models":
			_, _ = io.WriteString(w, `[{"model_id": "qwen3-8b", "default_variant_id": "qwen3-8b-q4",
				"variants": [{"variant_id": "qwen3-8b-q4", "min_vram_gb": 8, "min_ram_gb": 32}]}]`)
		case "POST /api/v1/compute/instances":
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, rental)
		case "GET /api/v1/compute/instances":
			_, _ = io.WriteString(w, "["+rental+"]")
		case "GET /api/v1/compute/instances/r/1", "DELETE /api/v1/compute/instances/r/1":
			_, _ = io.WriteString(w, rental)
		case "GET /api/v1/compute/instances/r/1/audit":
			_, _ = io.WriteString(w, `{"rental_id": "r/1", "country": "GB", "placed_at": "2026-01-02T03:05:00Z",
				"events": [{"at": "2026-01-02T03:04:05Z", "type": "requested"}]}`)
		case "GET /api/v1/compute/spend":
			_, _ = io.WriteString(w, `{"month_to_date_gbp": 12.34, "monthly_budget_gbp": null, "active_count": 1,
				"credit_remaining_gbp": 87.66, "lines": [{"rental_id": "r/1", "cost_gbp": 12.34, "serving": false}]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, ctx := New(srv.URL, "k"), context.Background()

	cat, err := c.Catalogue(ctx)
	if err != nil || len(cat) != 1 || cat[0].Tiers[0].PricePerHourGBP != 210 || cat[0].Tiers[0].MaxRAMGB != nil {
		t.Fatalf("Catalogue = %+v, %v", cat, err)
	}
	models, err := c.RentableModels(ctx)
	if err != nil || len(models) != 1 || *models[0].Variants[0].MinRAMGB != 32 {
		t.Fatalf("RentableModels = %+v, %v", models, err)
	}
	r, err := c.Rent(ctx, api.RentRequest{GPUModelID: "a100-80gb", TierID: "uk", Models: []string{"qwen3-8b-q4"}})
	if err != nil || r.Status != api.RentalProvisioning || *r.BootPhase != api.BootQueued || r.PricePerHourGBP != 210 {
		t.Fatalf("Rent = %+v, %v", r, err)
	}
	list, err := c.Rentals(ctx)
	if err != nil || len(list) != 1 || list[0].CreatedAt != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) {
		t.Fatalf("Rentals = %+v, %v", list, err)
	}
	if _, err := c.Rental(ctx, "r/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StopRental(ctx, "r/1"); err != nil {
		t.Fatal(err)
	}
	p, err := c.RentalAudit(ctx, "r/1")
	if err != nil || p.Country != "GB" || len(p.Events) != 1 {
		t.Fatalf("RentalAudit = %+v, %v", p, err)
	}
	s, err := c.Spend(ctx)
	if err != nil || s.MonthToDateGBP != 1234 || s.MonthlyBudgetGBP != nil || s.CreditRemainingGBP != money.GBP(8766) || s.Lines[0].Serving {
		t.Fatalf("Spend = %+v, %v", s, err)
	}

	want := []sent{
		{"GET", "/api/v1/compute/catalogue", ""},
		{"GET", "/api/v1/compute/models", ""},
		{"POST", "/api/v1/compute/instances", `{"gpu_model_id":"a100-80gb","tier_id":"uk","models":["qwen3-8b-q4"]}`},
		{"GET", "/api/v1/compute/instances", ""},
		// The id is one path segment however it is spelt.
		{"GET", "/api/v1/compute/instances/r%2F1", ""},
		{"DELETE", "/api/v1/compute/instances/r%2F1", ""},
		{"GET", "/api/v1/compute/instances/r%2F1/audit", ""},
		{"GET", "/api/v1/compute/spend", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("sent %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestRentErrors checks the rental refusals come back as *Error with what
// the CLI needs to explain them: the status and, for a 429, when to retry.
func TestRentErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		header map[string]string
		retry  time.Duration
	}{
		{http.StatusPaymentRequired, nil, 0},
		{http.StatusConflict, nil, 0},
		{http.StatusTooManyRequests, map[string]string{"Retry-After": "42"}, 42 * time.Second},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			for k, v := range tc.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(tc.status)
			_ = json.NewEncoder(w).Encode(map[string]string{"detail": "refused"})
		}))
		_, err := New(srv.URL, "k").Rent(context.Background(), api.RentRequest{GPUModelID: "g", TierID: "t"})
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.status || e.Message != "refused" || e.RetryAfter != tc.retry {
			t.Errorf("%d: err = %#v", tc.status, err)
		}
	}
}
