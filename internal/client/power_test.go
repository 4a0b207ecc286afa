package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// TestWorkerPower checks the id is one path segment however it is spelt,
// and the range goes in the query.
func TestWorkerPower(t *testing.T) {
	var path, rng string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, rng = r.URL.EscapedPath(), r.URL.Query().Get("range")
		_, _ = w.Write([]byte(`{"worker_id": "wk/1 x", "range": "24h", "resolution_seconds": 300, "machine": null,
			"channels": [], "points": [], "totals": {"energy_kwh": 0, "avg_w": 0, "peak_w": 0, "coverage": 0}}`))
	}))
	defer srv.Close()
	h, err := New(srv.URL, "k").WorkerPower(context.Background(), "wk/1 x", api.Range24h)
	if err != nil {
		t.Fatal(err)
	}
	if path != "/api/v1/workers/wk%2F1%20x/power" || rng != "24h" {
		t.Errorf("sent %s ?range=%s", path, rng)
	}
	if h.ResolutionSeconds != 300 || h.Machine != nil || h.Points == nil {
		t.Errorf("decoded %+v", h)
	}
}
