package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
)

// usageBench is the usage store's write rate through the group-commit
// writer and its query times once it holds rows rows.
type usageBench struct {
	Rows       int                `json:"rows"`
	RowsPerSec float64            `json:"rows_per_second"`
	DBBytes    int64              `json:"db_bytes"`
	QueryMs    map[string]float64 `json:"query_ms"` // median of 20
}

func benchUsage(dir string, rows int) (*usageBench, error) {
	ud := filepath.Join(dir, "usage-bench")
	if err := bolt.EnsureDir(ud); err != nil {
		return nil, err
	}
	store, err := bolt.Open(ud, bolt.Options{})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	w := store.NewWriter(bolt.WriterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	u := store.Usage(w)
	now := time.Now().UTC()
	start := time.Now()
	for i := range rows {
		status := 200
		if i%50 == 0 {
			status = 429
		}
		u.Record("org", api.UsageRow{
			ID: fmt.Sprint("row-", i), CreatedAt: now.Add(-time.Duration(rows-i) * time.Millisecond), Model: fmt.Sprint("model-", i%20),
			RequestType: api.RequestChat, StatusCode: status, PromptTokens: 100, CompletionTokens: 200, TotalTokens: 300,
			RequestDurationMs: 40, WorkerID: api.NullText(fmt.Sprint("wk_", i%50)), WorkerName: api.NullText(fmt.Sprint("worker-", i%50)),
		})
	}
	cancel()
	if err := <-done; err != nil {
		return nil, err
	}
	ub := &usageBench{Rows: rows, RowsPerSec: float64(rows) / time.Since(start).Seconds(), QueryMs: map[string]float64{}}
	if fi, err := os.Stat(filepath.Join(ud, bolt.FileName)); err == nil {
		ub.DBBytes = fi.Size()
	}
	queries := map[string]func() error{
		"summary_30d":    func() error { _, err := u.Summary("org", 30, now); return err },
		"daily_30d":      func() error { _, err := u.Daily("org", 30, now); return err },
		"breakdown_30d":  func() error { _, err := u.Breakdown("org", 30, "tokens", now); return err },
		"breakdown_365d": func() error { _, err := u.Breakdown("org", 365, "requests", now); return err },
		"logs_50":        func() error { _, err := u.Logs("org", bolt.UsageQuery{Limit: 50}); return err },
	}
	for name, q := range queries {
		var ds []time.Duration
		for range 20 {
			t := time.Now()
			if err := q(); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			ds = append(ds, time.Since(t))
		}
		slices.Sort(ds)
		ub.QueryMs[name] = ms(ds[len(ds)/2])
	}
	return ub, nil
}
