package server

import (
	"context"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

// The usage endpoints: organisation-scoped reads, usage:read.

func (s *Server) usageInflight(c *call) error {
	out := s.inflight.List(c.principal.OrgID, string(c.ctx.QueryArgs().Peek("worker_id")), time.Now())
	writeJSON(c.ctx, http.StatusOK, out)
	return nil
}

func (s *Server) usageLogs(c *call) error {
	q := query{c: c}
	limit := q.intRange("limit", 50, 1, 1000)
	offset := q.intRange("offset", 0, 0, 1<<31-1)
	// status and model narrow the log to the failures or the model being
	// looked into; 0 and "" keep every row.
	status := q.intRange("status", 0, 100, 599)
	if err := q.v.Err(); err != nil {
		return err
	}
	if err := s.syncUsage(c); err != nil {
		return err
	}
	args := c.ctx.QueryArgs()
	rows, err := s.usage.Logs(c.principal.OrgID, store.UsageQuery{
		WorkerID: string(args.Peek("worker_id")), Status: status, Model: string(args.Peek("model")),
		Limit: limit, Offset: offset})
	return respond(c, http.StatusOK, rows, err)
}

func (s *Server) usageSummary(c *call) error {
	q := query{c: c}
	days := q.intRange("days", 30, 1, 365)
	if err := q.v.Err(); err != nil {
		return err
	}
	if err := s.syncUsage(c); err != nil {
		return err
	}
	sum, err := usage.Summary(s.usage, c.principal.OrgID, days, time.Now())
	return respond(c, http.StatusOK, sum, err)
}

func (s *Server) usageDaily(c *call) error {
	q := query{c: c}
	days := q.intRange("days", 30, 1, 365)
	if err := q.v.Err(); err != nil {
		return err
	}
	if err := s.syncUsage(c); err != nil {
		return err
	}
	out, err := usage.Daily(s.usage, c.principal.OrgID, days, time.Now())
	return respond(c, http.StatusOK, out, err)
}

func (s *Server) usageBreakdown(c *call) error {
	q := query{c: c}
	days := q.intRange("days", 30, 1, 365)
	sort := q.oneOf("sort", "tokens", "tokens", "requests")
	if err := q.v.Err(); err != nil {
		return err
	}
	if err := s.syncUsage(c); err != nil {
		return err
	}
	out, err := usage.Breakdown(s.usage, c.principal.OrgID, days, sort, time.Now())
	return respond(c, http.StatusOK, out, err)
}

// syncUsage waits for the usage rows recorded so far to be committed, so
// that a request answered before this read is in it, in the log and the
// totals alike. It waits at most one group commit, and not at all while
// the store's commits fail: the read would miss the rows waiting.
func (s *Server) syncUsage(c *call) error {
	// Not derived from c.ctx: a RequestCtx may not be a parent context.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.usage.Sync(ctx); err != nil {
		return s.behindError(err)
	}
	return nil
}
