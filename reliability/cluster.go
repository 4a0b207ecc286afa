package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/harness"
	"github.com/svc-dev/svc/internal/pgtest"
)

// cluster is `svc serve` replicas sharing one PostgreSQL database behind
// a balancer, as an operator runs them: each replica has its own data
// directory and address, and clients and workers reach the cluster only
// through the balancer.
type cluster struct {
	h        *rig
	name     string
	pg       *pgtest.Server
	db       string // the database's URL
	ttl      time.Duration
	replicas []*replica
	lb       *balancer
	// api is the admin key's client through the balancer.
	api       *gateway
	tokenFile string
	workers   []*harness.Proc
}

// replica is one `svc serve` of a cluster.
type replica struct {
	*harness.Gateway
	name string
}

// clusterSpec says how to run a cluster.
type clusterSpec struct {
	replicas int
	ttl      time.Duration
	// args are added to every replica's; --rental-providers none unless
	// they name providers.
	args []string
	// publicURL: rented machines dial the balancer (--public-url).
	publicURL bool
	// prepare runs on a replica's data directory, made 0700, before its
	// first start.
	prepare func(data string) error
	// advertise, when set, is replica i's --advertise-url given its
	// address; http:// and the address otherwise.
	advertise func(i int, addr string) (string, error)
}

// skippedNoPostgres records a skip and reports true when err says no
// PostgreSQL is installed and the run does not require one.
func skippedNoPostgres(r *result, err error) bool {
	if !errors.Is(err, pgtest.ErrNoPostgres) || os.Getenv(pgtest.RequireEnv) == "1" {
		return false
	}
	r.figure("skipped", "no PostgreSQL server binary (%v); set %s=1 to fail instead", err, pgtest.RequireEnv)
	return true
}

// startPostgres runs a PostgreSQL server in the working directory and
// makes the cluster's database on it.
func (h *rig) startPostgres(ctx context.Context, name string) (*pgtest.Server, string, error) {
	if _, err := pgtest.BinDir(); err != nil {
		return nil, "", err
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root, so pgtest runs it as an
		// unprivileged user, who must be able to pass through the working
		// directory (made 0700) to its own.
		if err := os.Chmod(h.dir, 0o711); err != nil {
			return nil, "", err
		}
	}
	pg, err := pgtest.Start(filepath.Join(h.dir, name+"-pg"))
	if err != nil {
		return nil, "", err
	}
	url, err := pg.CreateDB(ctx, "svc")
	if err != nil {
		_ = pg.Stop()
		return nil, "", err
	}
	return pg, url, nil
}

// startCluster starts PostgreSQL, the balancer and the replicas, the
// first alone so that it bootstraps the organisation and leads, and waits
// until the balancer sends clients to it. It returns nil, nil when the
// check is skipped for want of PostgreSQL.
func startCluster(ctx context.Context, h *rig, r *result, name string, cs clusterSpec) (*cluster, error) {
	pg, url, err := h.startPostgres(ctx, name)
	if skippedNoPostgres(r, err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	c := &cluster{h: h, name: name, pg: pg, db: url, ttl: cs.ttl}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	addrs := make([]string, cs.replicas)
	for i := range addrs {
		if addrs[i], err = harness.FreeAddr(); err != nil {
			return nil, err
		}
	}
	if c.lb, err = startBalancer(addrs); err != nil {
		return nil, err
	}
	args := []string{"--store", url, "--lease-ttl", cs.ttl.String()}
	if !slices.Contains(cs.args, "--rental-providers") {
		args = append(args, "--rental-providers", "none")
	}
	if cs.publicURL {
		args = append(args, "--public-url", c.lb.URL())
	}
	args = append(args, cs.args...)
	for i, addr := range addrs {
		rname := fmt.Sprintf("%s-%d", name, i)
		data := filepath.Join(h.dir, rname+"-data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if cs.prepare != nil {
			if err := cs.prepare(data); err != nil {
				return nil, err
			}
		}
		adv := "http://" + addr
		if cs.advertise != nil {
			if adv, err = cs.advertise(i, addr); err != nil {
				return nil, err
			}
		}
		s := h.spec(rname, "NO_COLOR=1")
		s.Args = append([]string{"--advertise-url", adv}, args...)
		g, err := harness.StartGateway(ctx, harness.GatewaySpec{Spec: s, Addr: addr, Data: data})
		if err != nil {
			return nil, err
		}
		c.replicas = append(c.replicas, &replica{Gateway: g, name: rname})
		if i == 0 {
			// The first replica on the empty database bootstraps the
			// organisation and takes the lease before the others start.
			if err := c.bootstrap(ctx); err != nil {
				return nil, err
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Every live replica is ready: each serves, forwarding what another does.
	if err := harness.Poll(wctx, 20*time.Millisecond, func() bool { return c.lb.readyCount() >= 1 }); err != nil {
		return nil, errors.New("the balancer sees no replica ready")
	}
	ok = true
	return c, nil
}

// bootstrap waits for the first replica to write the admin key and the
// worker token and to lead.
func (c *cluster) bootstrap(ctx context.Context) error {
	g := c.replicas[0]
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var key string
	if err := harness.Poll(wctx, 20*time.Millisecond, func() bool {
		k, err := g.AdminKey()
		key = k
		return err == nil && k != ""
	}); err != nil {
		return fmt.Errorf("%s wrote no admin key: %w", g.name, err)
	}
	c.tokenFile = g.TokenFile()
	c.api = &gateway{Gateway: &harness.Gateway{URL: c.lb.URL()}, h: c.h, Key: key}
	if _, _, err := c.waitLeader(ctx, -1, 30*time.Second); err != nil {
		return err
	}
	return nil
}

// close stops the workers, the replicas, the balancer and PostgreSQL.
func (c *cluster) close() {
	for _, w := range c.workers {
		_ = w.Stop(syscall.SIGTERM, stopGrace)
	}
	client.CloseIdleConnections()
	var wg sync.WaitGroup
	for _, g := range c.replicas {
		wg.Go(func() { _ = g.Stop(syscall.SIGTERM, stopGrace) })
	}
	wg.Wait()
	if c.lb != nil {
		c.lb.close()
	}
	if err := c.pg.Stop(); err != nil {
		c.h.logf("%s: stop postgres: %v", c.name, err)
	}
}

// crashes fails r for every process of the cluster that panicked.
func (c *cluster) crashes(r *result) {
	for _, g := range c.replicas {
		if sign := crashed(g); sign != "" {
			r.fail("%s crashed: %s", g.name, sign)
		}
	}
	for _, w := range c.workers {
		if sign := crashed(w); sign != "" {
			r.fail("%s crashed: %s", w.Name(), sign)
		}
	}
}

// replicaView is a replica's /healthz as the checks read it.
type replicaView struct {
	Status  string `json:"status"`
	Cluster *struct {
		ReplicaID            string  `json:"replica_id"`
		Role                 string  `json:"role"`
		Epoch                int64   `json:"epoch"`
		Leader               string  `json:"leader"`
		LeaderURL            string  `json:"leader_url"`
		DatabaseUnreachableS float64 `json:"database_unreachable_s"`
		OutboxRecords        int64   `json:"outbox_records"`
		Homes                int     `json:"homes"`
	} `json:"cluster"`
}

func (v replicaView) leads() bool { return v.Cluster != nil && v.Cluster.Role == "leader" }

// health reads replica i's /healthz.
func (c *cluster) health(ctx context.Context, i int) (replicaView, error) {
	var v replicaView
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.replicas[i].URL+"/healthz", nil)
	if err != nil {
		return v, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return v, err
	}
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s /healthz: status %d", c.replicas[i].name, resp.StatusCode)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%s /healthz: %w", c.replicas[i].name, err)
	}
	if v.Cluster == nil {
		return v, fmt.Errorf("%s /healthz has no cluster object: %s", c.replicas[i].name, tail(string(b), 300))
	}
	return v, nil
}

// leader is the running replica that says it leads, at the highest
// epoch; -1 when none does.
func (c *cluster) leader(ctx context.Context) (int, replicaView) {
	best, view := -1, replicaView{}
	for i, g := range c.replicas {
		if g.Exited() {
			continue
		}
		v, err := c.health(ctx, i)
		if err == nil && v.leads() && (best < 0 || v.Cluster.Epoch > view.Cluster.Epoch) {
			best, view = i, v
		}
	}
	return best, view
}

// waitLeader waits until a running replica leads at an epoch above
// after, and returns it and its epoch.
func (c *cluster) waitLeader(ctx context.Context, after int64, timeout time.Duration) (int, int64, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	i, epoch := -1, int64(0)
	err := harness.Poll(wctx, 20*time.Millisecond, func() bool {
		l, v := c.leader(wctx)
		if l >= 0 && v.Cluster.Epoch > after {
			i, epoch = l, v.Cluster.Epoch
			return true
		}
		return false
	})
	if err != nil {
		return -1, 0, fmt.Errorf("no replica leads at an epoch above %d within %v", after, timeout)
	}
	return i, epoch, nil
}

// startWorkers runs simulated workers that dial the balancer and waits
// until the leader lists them healthy.
func (c *cluster) startWorkers(ctx context.Context, names []string, args ...string) error {
	for _, name := range names {
		w, err := harness.StartWorker(c.h.workerSpec(name, c.lb.URL(), c.tokenFile, args...))
		if err != nil {
			return err
		}
		c.workers = append(c.workers, w)
	}
	l, _ := c.leader(ctx)
	if l < 0 {
		return errors.New("no replica leads")
	}
	return c.waitWorkers(ctx, l, names, 30*time.Second)
}

// waitWorkers waits until replica i lists every worker named healthy.
func (c *cluster) waitWorkers(ctx context.Context, i int, names []string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g := &gateway{Gateway: c.replicas[i].Gateway, h: c.h, Key: c.api.Key}
	missing := names
	err := harness.Poll(wctx, 20*time.Millisecond, func() bool {
		missing = nil
		for _, n := range names {
			if st, _, err := g.workerState(wctx, n); err != nil || st != "healthy" {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0
	})
	if err != nil {
		return fmt.Errorf("%s does not list %s healthy within %v", c.replicas[i].name, strings.Join(missing, ", "), timeout)
	}
	return nil
}

// outbox is the outbox depth of every running replica, summed.
func (c *cluster) outbox(ctx context.Context) (int64, error) {
	var n int64
	for i, g := range c.replicas {
		if g.Exited() {
			continue
		}
		v, err := c.health(ctx, i)
		if err != nil {
			return 0, err
		}
		n += v.Cluster.OutboxRecords
	}
	return n, nil
}

// waitOutboxEmpty waits until no running replica has anything left to
// ship and returns how long that took.
func (c *cluster) waitOutboxEmpty(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last int64 = -1
	err := harness.Poll(wctx, 50*time.Millisecond, func() bool {
		n, err := c.outbox(wctx)
		if err != nil {
			return false
		}
		last = n
		return n == 0
	})
	if err != nil {
		return time.Since(start), fmt.Errorf("outboxes still hold %d records after %v", last, timeout)
	}
	return time.Since(start), nil
}

// settle waits, once the load has stopped, until every row it made is in
// the database: nothing is in progress, a usage read on the leader first
// waits for the rows recorded before it, and every outbox is then empty. It returns how long
// the outboxes took to empty after the read.
func (c *cluster) settle(ctx context.Context) (time.Duration, error) {
	// A connection kept from a failover may still be spliced to a
	// standby; the reads go on new ones, as a client that reconnects.
	client.CloseIdleConnections()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A request its client gave up on may still be running on the
	// leader, to be recorded when it ends.
	var last string
	if err := harness.Poll(wctx, 100*time.Millisecond, func() bool {
		st, body, err := c.api.do(wctx, "GET", "/api/v1/usage/inflight", nil)
		last = fmt.Sprintf("%d %s %v", st, tail(string(body), 200), err)
		return err == nil && st == http.StatusOK && strings.TrimSpace(string(body)) == "[]"
	}); err != nil {
		return 0, fmt.Errorf("requests still in progress after the load stopped: %s", last)
	}
	if err := harness.Poll(wctx, 100*time.Millisecond, func() bool {
		st, body, err := c.api.do(wctx, "GET", "/api/v1/usage/summary?days=1", nil)
		last = fmt.Sprintf("%d %s %v", st, tail(string(body), 200), err)
		return err == nil && st == http.StatusOK
	}); err != nil {
		return 0, fmt.Errorf("usage summary through the balancer: %s", last)
	}
	return c.waitOutboxEmpty(ctx, 60*time.Second)
}

// judgeStatus checks that `svc cluster status --json` agrees with the
// replicas: the leader and its epoch as the leading replica's /healthz
// says, every replica registered and alive, and no outbox holding
// anything once every /healthz says so.
func (c *cluster) judgeStatus(ctx context.Context, r *result) error {
	// A replica reports its outbox with its registration, at each
	// renewal (TTL/5): the status may name what an outbox held until the
	// next one.
	var st api.ClusterStatus
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var failed string
	_ = harness.Poll(wctx, 200*time.Millisecond, func() bool {
		cmd := exec.CommandContext(wctx, c.h.bin, "cluster", "status", "--store", c.db, "--json")
		cmd.Env = append(os.Environ(), "NO_COLOR=1")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			failed = fmt.Sprintf("svc cluster status: %v: %s", err, tail(string(stderr), 300))
			return false
		}
		st = api.ClusterStatus{}
		if err := json.Unmarshal(out, &st); err != nil {
			failed = fmt.Sprintf("svc cluster status --json: %v: %s", err, tail(string(out), 300))
			return false
		}
		failed = ""
		for _, rep := range st.Replicas {
			if rep.OutboxRecords != 0 {
				return false
			}
		}
		return true
	})
	if failed != "" {
		r.fail("%s", failed)
		return nil
	}
	l, v := c.leader(ctx)
	if l < 0 {
		return errors.New("no replica leads")
	}
	switch {
	case st.Leader == nil:
		r.fail("svc cluster status names no leader; %s leads at epoch %d", c.replicas[l].name, v.Cluster.Epoch)
	case st.Leader.ReplicaID != v.Cluster.ReplicaID || st.Leader.Epoch != v.Cluster.Epoch || st.Leader.Expired:
		r.fail("svc cluster status says %s leads at epoch %d (expired %v); %s (%s) says it leads at epoch %d",
			st.Leader.ReplicaID, st.Leader.Epoch, st.Leader.Expired, c.replicas[l].name, v.Cluster.ReplicaID, v.Cluster.Epoch)
	}
	alive := 0
	for _, rep := range st.Replicas {
		if rep.Alive {
			alive++
		}
		if rep.OutboxRecords != 0 {
			r.fail("svc cluster status says replica %s has %d records in its outbox 10 s after every outbox emptied", rep.ID, rep.OutboxRecords)
		}
	}
	if alive != len(c.replicas) {
		r.fail("svc cluster status lists %d replicas alive of %d registered; %d run", alive, len(st.Replicas), len(c.replicas))
	}
	if st.Leader != nil {
		r.figure("svc cluster status", "leader %s at epoch %d; %d of %d replicas alive", st.Leader.ReplicaID, st.Leader.Epoch, alive, len(st.Replicas))
	}
	return nil
}

// sqlRow is a usage row as the database holds it.
type sqlRow struct {
	OrgID  string
	Status int
	Usage  usageCounts
}

// usageRows reads every usage row from the database, by request id; an id
// with more than one row has them all.
func (c *cluster) usageRows(ctx context.Context) (map[string][]sqlRow, error) {
	conn, err := pgx.Connect(ctx, c.db)
	if err != nil {
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT request_id, org_id, status_code, prompt_tokens, completion_tokens, total_tokens FROM svc_usage_rows`)
	if err != nil {
		return nil, fmt.Errorf("read svc_usage_rows: %w", err)
	}
	out := map[string][]sqlRow{}
	for rows.Next() {
		var id string
		var row sqlRow
		if err := rows.Scan(&id, &row.OrgID, &row.Status, &row.Usage.PromptTokens, &row.Usage.CompletionTokens, &row.Usage.TotalTokens); err != nil {
			return nil, fmt.Errorf("read svc_usage_rows: %w", err)
		}
		out[id] = append(out[id], row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read svc_usage_rows: %w", err)
	}
	return out, nil
}

// dayTotals is a row of svc_usage_days, or the same sums over the rows.
type dayTotals struct {
	Requests, Succeeded, Failed, Cancelled      int64
	PromptTokens, CompletionTokens, TotalTokens int64
}

// judgeTotals checks in SQL that every organisation's totals of each day
// are the sums over its rows of that day (UTC), and that no request has
// two rows; it returns the number of duplicated request ids.
func (c *cluster) judgeTotals(ctx context.Context, r *result) (dups int, err error) {
	conn, err := pgx.Connect(ctx, c.db)
	if err != nil {
		return 0, fmt.Errorf("connect to the database: %w", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT request_id FROM svc_usage_rows GROUP BY request_id HAVING count(*) > 1) d`).Scan(&dups); err != nil {
		return 0, fmt.Errorf("count duplicated rows: %w", err)
	}
	if dups > 0 {
		r.fail("%d request ids have more than one row in svc_usage_rows", dups)
	}
	type key struct {
		org string
		day time.Time
	}
	read := func(sql string) (map[key]dayTotals, error) {
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			return nil, err
		}
		out := map[key]dayTotals{}
		for rows.Next() {
			var k key
			var t dayTotals
			if err := rows.Scan(&k.org, &k.day, &t.Requests, &t.Succeeded, &t.Failed, &t.Cancelled,
				&t.PromptTokens, &t.CompletionTokens, &t.TotalTokens); err != nil {
				return nil, err
			}
			out[k] = t
		}
		return out, rows.Err()
	}
	// The status classes are the summary's: below 400 succeeded, 499
	// cancelled, any other failed.
	fromRows, err := read(`SELECT org_id, (created_at AT TIME ZONE 'UTC')::date, count(*),
		count(*) FILTER (WHERE status_code < 400),
		count(*) FILTER (WHERE status_code >= 400 AND status_code <> 499),
		count(*) FILTER (WHERE status_code = 499),
		coalesce(sum(prompt_tokens), 0)::bigint, coalesce(sum(completion_tokens), 0)::bigint, coalesce(sum(total_tokens), 0)::bigint
		FROM svc_usage_rows GROUP BY 1, 2`)
	if err != nil {
		return dups, fmt.Errorf("sum svc_usage_rows: %w", err)
	}
	days, err := read(`SELECT org_id, day, requests, succeeded, failed, cancelled, prompt_tokens, completion_tokens, total_tokens FROM svc_usage_days`)
	if err != nil {
		return dups, fmt.Errorf("read svc_usage_days: %w", err)
	}
	equal := 0
	for k, want := range fromRows {
		got, ok := days[k]
		switch {
		case !ok:
			r.fail("svc_usage_days has no totals for org %s on %s, whose rows sum to %+v", k.org, k.day.Format(time.DateOnly), want)
		case got != want:
			r.fail("svc_usage_days for org %s on %s is %+v; its rows sum to %+v", k.org, k.day.Format(time.DateOnly), got, want)
		default:
			equal++
		}
	}
	for k, got := range days {
		if _, ok := fromRows[k]; !ok && got != (dayTotals{}) {
			r.fail("svc_usage_days has totals %+v for org %s on %s, which has no rows", got, k.org, k.day.Format(time.DateOnly))
		}
	}
	r.figure("SQL totals", "%d of %d (org, day) totals in svc_usage_days equal the sums over svc_usage_rows", equal, len(fromRows))
	return dups, nil
}

// judgeSucceeded checks that every request the clients saw succeed has
// exactly one row, with status 200 and the usage the client was told;
// it returns the ids without a row.
func judgeSucceeded(r *result, ok map[string]crashOK, rows map[string][]sqlRow) (missing []string) {
	unlike := 0
	for id, o := range ok {
		rs := rows[id]
		switch {
		case len(rs) == 0:
			missing = append(missing, id)
		case len(rs) > 1:
			// Counted by judgeTotals.
		case rs[0].Status != http.StatusOK || rs[0].Usage != o.usage:
			unlike++
			r.fail("request %s succeeded with usage %+v but its row has status %d and %+v", id, o.usage, rs[0].Status, rs[0].Usage)
		}
	}
	r.figure("rows unlike their reply", "%d", unlike)
	return missing
}

// apiRows is the database's rows as the usage summary is judged against.
func apiRows(rows map[string][]sqlRow) []usageRow {
	var out []usageRow
	for id, rs := range rows {
		for _, row := range rs {
			out = append(out, usageRow{ID: id, StatusCode: row.Status, PromptTokens: row.Usage.PromptTokens,
				CompletionTokens: row.Usage.CompletionTokens, TotalTokens: row.Usage.TotalTokens})
		}
	}
	return out
}

// failoverFailure says whether a request that failed while the cluster
// changed leaders failed as it may: a 503 or 502 (a standby's refusal, no
// worker yet), a stream's error frame with one of those, or a cut or
// refused connection. A hang or any other status is a violation.
func failoverFailure(e *loadError) (class string, allowed bool) {
	switch {
	case e.Timeout:
		return "timed out", false
	case e.Status == 0 && e.Cut:
		return "connection cut or refused", true
	case e.Status == http.StatusServiceUnavailable || e.Status == http.StatusBadGateway:
		if e.Code != "" {
			return fmt.Sprintf("%d %s", e.Status, e.Code), true
		}
		return fmt.Sprintf("%d", e.Status), true
	case e.Status == http.StatusOK && (e.Frame == http.StatusServiceUnavailable || e.Frame == http.StatusBadGateway):
		return fmt.Sprintf("stream error frame %d", e.Frame), true
	case e.Status == http.StatusOK && e.Cut && e.Frame == 0:
		return "response cut", true
	case e.Status != 0:
		return fmt.Sprintf("status %d", e.Status), false
	}
	return "other: " + e.Msg, false
}

// judgeFailures fails r for each failed request that did not fail as a
// failover may, and returns the count of each kind.
func judgeFailures(r *result, fails []loadFailure) map[string]int {
	kinds := map[string]int{}
	for _, f := range fails {
		class, ok := failoverFailure(f.err)
		kinds[class]++
		if !ok {
			r.fail("request %s sent at %s failed in a way no failover may: %s (%s)", f.err.ID, f.start.Format("15:04:05.000"), class, tail(f.err.Msg, 200))
		}
	}
	return kinds
}

// kindList is a map of counts as "a 3, b 1", largest first.
func kindList(kinds map[string]int) string {
	if len(kinds) == 0 {
		return "none"
	}
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int {
		if kinds[a] != kinds[b] {
			return kinds[b] - kinds[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s: %d", k, kinds[k]))
	}
	return strings.Join(parts, ", ")
}

// runLoad starts the crash check's mixed load through the balancer with
// n clients; stop ends it and waits.
func (c *cluster) runLoad(ctx context.Context, n int) (ld *crashLoad, stop func()) {
	ld = &crashLoad{g: c.api}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ld.client(lctx, i) })
	}
	return ld, func() {
		cancel()
		wg.Wait()
	}
}

// clusterHostile sends the hostile input to a replica that is neither the
// organisation's home nor the leader: what it forwards must be answered
// as a single host answers it, and what it refuses itself too.
func clusterHostile(ctx context.Context, h *rig, r *result) error {
	c, err := startCluster(ctx, h, r, "cluster-hostile", clusterSpec{replicas: 2, ttl: 5 * time.Second})
	if c == nil || err != nil {
		return err
	}
	defer c.close()
	l, _ := c.leader(ctx)
	if l < 0 {
		return errors.New("no replica leads")
	}
	front := 1 - l
	// The worker dials the leader, which becomes the organisation's home.
	w, err := harness.StartWorker(h.workerSpec("hostile-home-box", c.replicas[l].URL, c.tokenFile, "--engine", "sim=tps=0,ttft=0"))
	if err != nil {
		return err
	}
	c.workers = append(c.workers, w)
	if err := c.waitWorkers(ctx, l, []string{"hostile-home-box"}, 30*time.Second); err != nil {
		return err
	}
	r.figure("replicas", "home and leader %s; the input is sent to %s", c.replicas[l].name, c.replicas[front].name)
	g := &gateway{Gateway: c.replicas[front].Gateway, h: h, Key: c.api.Key}
	if err := hostileAt(ctx, h, r, g, "hostile-home-box"); err != nil {
		return err
	}
	c.crashes(r)
	return nil
}
