package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

// lockPartitions serialises the creation and dropping of usage partitions
// across replicas.
const lockPartitions int64 = 0x7376630000000010

// queryTimeout bounds a read the store's interfaces give no context to.
const queryTimeout = 30 * time.Second

// maxText bounds what a text column holds of a string: PostgreSQL refuses
// a btree key of more than about 2.7 kB, and one refused row must not
// hold up every row shipped with it. The whole row is kept in data.
const maxText = 1024

// pgText makes s a string PostgreSQL's text takes: valid UTF-8 without
// NUL bytes (which no text value may hold), at most maxText bytes. What a
// gateway records is always that already; anything else is mapped the
// same way wherever it is written or looked up.
func pgText(s string) string {
	if len(s) <= maxText && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) > maxText {
		i := maxText
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i]
	}
	return s
}

func ctxFor() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), queryTimeout)
}

// partitions knows which months of svc_usage_rows have a partition, so
// that a shipment creates one only for a month it has not seen.
type partitions struct {
	mu    sync.Mutex
	known map[string]bool
}

func newPartitions() *partitions { return &partitions{known: map[string]bool{}} }

// monthStart is the first instant of t's UTC month.
func monthStart(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// partitionName names the partition of the month starting at m.
func partitionName(m time.Time) string {
	return fmt.Sprintf("svc_usage_rows_y%04dm%02d", m.Year(), int(m.Month()))
}

var partitionPattern = regexp.MustCompile(`^svc_usage_rows_y(\d{4})m(\d{2})$`)

// parsePartition is the month a partition's name is of.
func parsePartition(name string) (time.Time, bool) {
	m := partitionPattern.FindStringSubmatch(name)
	if m == nil {
		return time.Time{}, false
	}
	y, _ := strconv.Atoi(m[1])
	mo, _ := strconv.Atoi(m[2])
	if mo < 1 || mo > 12 {
		return time.Time{}, false
	}
	return time.Date(y, time.Month(mo), 1, 0, 0, 0, 0, time.UTC), true
}

// ensure creates the partitions of the months of times that may not have
// one yet. Each is made in a short transaction of its own before rows are
// shipped into it: creating a partition locks the whole table, which a
// shipment holding it until its commit would make every reader wait for.
// Months outside years 1 to 9999 get none: their rows are refused.
func (p *partitions) ensure(ctx context.Context, s *Store, times ...time.Time) error {
	var need []time.Time
	p.mu.Lock()
	for _, t := range times {
		m := monthStart(t)
		name := partitionName(m)
		if p.known[name] || m.Year() < 1 || m.Year() > 9999 {
			continue
		}
		p.known[name] = true // for the duplicates among times; undone on failure
		need = append(need, m)
	}
	p.mu.Unlock()
	for i, m := range need {
		if err := createPartition(ctx, s, m); err != nil {
			p.mu.Lock()
			for _, m := range need[i:] {
				delete(p.known, partitionName(m))
			}
			p.mu.Unlock()
			return err
		}
	}
	return nil
}

// forget makes ensure check every month again: a partition was dropped,
// here or by another replica.
func (p *partitions) forget() {
	p.mu.Lock()
	clear(p.known)
	p.mu.Unlock()
}

func createPartition(ctx context.Context, s *Store, m time.Time) error {
	name := partitionName(m)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil || exists {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockPartitions); err != nil {
			return err
		}
		const layout = "2006-01-02 15:04:05Z07:00"
		_, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF svc_usage_rows FOR VALUES FROM ('%s') TO ('%s')",
			pgx.Identifier{name}.Sanitize(), m.Format(layout), m.AddDate(0, 1, 0).Format(layout)))
		return err
	})
	if err != nil {
		return fmt.Errorf("create usage partition %s: %w", name, err)
	}
	return nil
}

// noPartition is PostgreSQL's answer to a row whose month has no
// partition: one was dropped since it was known.
func noPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && strings.Contains(pe.Message, "no partition")
}

// usageColumns are a shipment's rows as the arrays insertUsage takes.
type usageColumns struct {
	createdAt                      []time.Time
	requestID, orgID               []string
	createdNs                      []int64
	workerID, model, requestType   []string
	status                         []int32
	prompt, completion, total      []int64
	data                           [][]byte
	day, workerName                []string
	succeeded, failed, cancelled   []int64
	reasoning, cached, images, dur []int64
	audio, energy, speech          []float64
	unmetered                      []int64
}

func (c *usageColumns) len() int { return len(c.requestID) }

// add appends a row, cleaned, with data its compact encoding.
func (c *usageColumns) add(orgID string, r *api.UsageRow, data []byte) {
	ru := usage.RollupOf(r)
	t := &ru.Totals
	c.createdAt = append(c.createdAt, r.CreatedAt)
	c.requestID = append(c.requestID, pgText(r.ID))
	c.orgID = append(c.orgID, pgText(orgID))
	c.createdNs = append(c.createdNs, r.CreatedAt.UnixNano())
	c.workerID = append(c.workerID, pgText(string(r.WorkerID)))
	c.model = append(c.model, pgText(r.Model))
	c.requestType = append(c.requestType, pgText(r.RequestType))
	c.status = append(c.status, int32(r.StatusCode))
	c.prompt = append(c.prompt, int64(r.PromptTokens))
	c.completion = append(c.completion, int64(r.CompletionTokens))
	c.total = append(c.total, int64(r.TotalTokens))
	c.data = append(c.data, data)
	c.day = append(c.day, ru.Day)
	c.workerName = append(c.workerName, pgText(ru.WorkerName))
	c.succeeded = append(c.succeeded, t.Succeeded)
	c.failed = append(c.failed, t.Failed)
	c.cancelled = append(c.cancelled, t.Cancelled)
	c.reasoning = append(c.reasoning, t.ReasoningTokens)
	c.cached = append(c.cached, t.CachedTokens)
	c.images = append(c.images, t.Images)
	c.dur = append(c.dur, t.RequestDurationMs)
	c.audio = append(c.audio, t.AudioSeconds)
	c.energy = append(c.energy, t.EnergyWh)
	c.speech = append(c.speech, t.SpeechSeconds)
	c.unmetered = append(c.unmetered, t.UnmeteredTokens)
}

func (c *usageColumns) args() []any {
	return []any{c.createdAt, c.requestID, c.orgID, c.createdNs, c.workerID, c.model, c.requestType,
		c.status, c.prompt, c.completion, c.total, c.data,
		c.day, c.workerName, c.succeeded, c.failed, c.cancelled, c.reasoning, c.cached, c.images, c.dur,
		c.audio, c.energy, c.speech, c.unmetered}
}

// totalsColumns are the counters of a totals table, in api.UsageTotals'
// order of usage.Add.
var totalsColumns = []string{"requests", "succeeded", "failed", "cancelled", "prompt_tokens", "completion_tokens",
	"total_tokens", "reasoning_tokens", "cached_tokens", "images", "request_duration_ms", "audio_seconds", "energy_wh",
	"speech_seconds", "unmetered_tokens"}

// totalsUpsert is the statement part that adds one group of the inserted
// rows to a totals table: its keys, the sums of the group's rows, and the
// ON CONFLICT that adds them to a stored total.
func totalsUpsert(table string, keys []string, extra, extraSum, extraSet string) string {
	cols := strings.Join(keys, ", ") + extra + ", " + strings.Join(totalsColumns, ", ")
	sums := []string{"count(*)"}
	set := make([]string, 0, len(totalsColumns)+1)
	for _, c := range totalsColumns[1:] {
		sums = append(sums, "sum("+c+")")
	}
	for _, c := range totalsColumns {
		set = append(set, c+" = t."+c+" + excluded."+c)
	}
	if extraSet != "" {
		set = append(set, extraSet)
	}
	group := strings.Join(keys, ", ")
	where := ""
	if table == "svc_usage_workers" {
		where = " WHERE worker_id <> ''" // a row that ran on no worker counts toward none's
	}
	sel := make([]string, len(keys))
	for i, k := range keys {
		if k == "day" {
			k = "day::date"
		}
		sel[i] = k
	}
	selectKeys := strings.Join(sel, ", ")
	return fmt.Sprintf(`INSERT INTO %s AS t (%s)
		SELECT %s%s, %s FROM added%s GROUP BY %s ORDER BY %s
		ON CONFLICT (%s) DO UPDATE SET %s`,
		table, cols, selectKeys, extraSum, strings.Join(sums, ", "), where, group, group, group, strings.Join(set, ", "))
}

// insertUsage inserts a shipment's rows and adds to the totals only what
// it inserted, in one statement.
//
// Exactly once: a row is inserted only if no row of its (created_at,
// request_id) is there (ON CONFLICT DO NOTHING), and the totals are the
// sums of the rows the insert returns, in the same statement and so the
// same transaction. A batch sent again (a crash after the commit, before
// the outbox let it go; a shipment whose commit was in doubt) finds every
// row there and adds nothing; a concurrent insert of the same key waits
// for the first to commit or roll back and then inserts nothing or
// everything. A request's row has one created_at wherever it is shipped
// from, since the outbox holds it encoded and sends the same bytes; the
// input is made distinct first, so a row twice in one batch counts once.
//
// Each totals table is written in its key order, so that two replicas
// adding to the same keys lock them in the same order and cannot
// deadlock. The sums are in Go's usage.RollupOf terms: the arrays carry
// each row's rollup, computed by the shipper.
var insertUsage = `
WITH input AS (
	SELECT DISTINCT ON (u.created_at, u.request_id) u.*
	FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
		$8::integer[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bytea[],
		$13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[],
		$20::bigint[], $21::bigint[], $22::double precision[], $23::double precision[], $24::double precision[],
		$25::bigint[])
		WITH ORDINALITY AS u(created_at, request_id, org_id, created_ns, worker_id, model, request_type,
			status_code, prompt_tokens, completion_tokens, total_tokens, data,
			day, worker_name, succeeded, failed, cancelled, reasoning_tokens, cached_tokens,
			images, request_duration_ms, audio_seconds, energy_wh, speech_seconds, unmetered_tokens, ord)
	ORDER BY u.created_at, u.request_id, u.ord
), ins AS (
	INSERT INTO svc_usage_rows (created_at, request_id, org_id, created_ns, worker_id, model, request_type,
		status_code, prompt_tokens, completion_tokens, total_tokens, data)
	SELECT created_at, request_id, org_id, created_ns, worker_id, model, request_type,
		status_code, prompt_tokens, completion_tokens, total_tokens, data
	FROM input ORDER BY ord
	ON CONFLICT DO NOTHING
	RETURNING created_at, request_id
), added AS (
	SELECT i.* FROM input i JOIN ins USING (created_at, request_id)
), days AS (
	` + totalsUpsert("svc_usage_days", []string{"org_id", "day"}, "", "", "") + `
), models AS (
	` + totalsUpsert("svc_usage_models", []string{"org_id", "day", "model"}, "", "", "") + `
), workers AS (
	` + totalsUpsert("svc_usage_workers", []string{"org_id", "day", "worker_id"}, ", name",
	", coalesce((array_agg(worker_name ORDER BY ord DESC) FILTER (WHERE worker_name <> ''))[1], '')",
	"name = CASE WHEN excluded.name <> '' THEN excluded.name ELSE t.name END") + `
)
SELECT count(*) FROM ins`

// importUsageRows inserts rows without adding to any total: a copy of a
// store whose totals are copied as they are.
const importUsageRows = `
INSERT INTO svc_usage_rows (created_at, request_id, org_id, created_ns, worker_id, model, request_type,
	status_code, prompt_tokens, completion_tokens, total_tokens, data)
SELECT u.created_at, u.request_id, u.org_id, u.created_ns, u.worker_id, u.model, u.request_type,
	u.status_code, u.prompt_tokens, u.completion_tokens, u.total_tokens, u.data
FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
	$8::integer[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bytea[])
	WITH ORDINALITY AS u(created_at, request_id, org_id, created_ns, worker_id, model, request_type,
		status_code, prompt_tokens, completion_tokens, total_tokens, data, ord)
ORDER BY u.ord
ON CONFLICT DO NOTHING`

// Usage is the usage log and its totals in PostgreSQL, recorded through
// the local outbox: Record never waits on the network, Sync waits until
// what was recorded before it is shipped, and the reads are the
// database's, so every replica reads the same log.
type Usage struct {
	s     *Store
	box   *bolt.Outbox
	ship  *Shipper
	parts *partitions
	// pruneBatch bounds the rows one deleting statement of PruneUsage
	// deletes.
	pruneBatch int
}

var _ store.Usage = (*Usage)(nil)

// Record queues a row in the outbox; it never blocks (bolt.Outbox).
func (u *Usage) Record(orgID string, row api.UsageRow) { u.box.RecordUsage(orgID, row) }

// Sync returns once the rows recorded before it are in the database.
func (u *Usage) Sync(ctx context.Context) error { return u.ship.Sync(ctx) }

// Logs lists rows newest first, filtered by worker, status and model when
// set,
// in the order bbolt lists them: by time to the nanosecond, then the
// order they were recorded in.
func (u *Usage) Logs(orgID string, q store.UsageQuery) ([]api.UsageRow, error) {
	out := []api.UsageRow{}
	if q.Limit <= 0 {
		return out, nil
	}
	ctx, cancel := ctxFor()
	defer cancel()
	where := "org_id = $1"
	args := []any{pgText(orgID), q.Limit, max(q.Offset, 0)}
	if q.WorkerID != "" {
		args = append(args, pgText(q.WorkerID))
		where += fmt.Sprintf(" AND worker_id = $%d", len(args))
	}
	if q.Status != 0 {
		args = append(args, q.Status)
		where += fmt.Sprintf(" AND status_code = $%d", len(args))
	}
	if q.Model != "" {
		args = append(args, pgText(q.Model))
		where += fmt.Sprintf(" AND model = $%d", len(args))
	}
	sql := `SELECT data FROM svc_usage_rows WHERE ` + where + ` ORDER BY created_ns DESC, seq DESC LIMIT $2 OFFSET $3`
	rows, err := u.s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list usage rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("list usage rows: %w", err)
		}
		r, err := bolt.DecodeUsageRow(data)
		if err != nil {
			return nil, fmt.Errorf("usage row: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list usage rows: %w", err)
	}
	return out, nil
}

// scanTotals reads the counters of a totals row, after dst's leading
// columns.
func scanTotals(rows pgx.Rows, t *api.UsageTotals, lead ...any) error {
	err := rows.Scan(append(lead, &t.Requests, &t.Succeeded, &t.Failed, &t.Cancelled, &t.PromptTokens,
		&t.CompletionTokens, &t.TotalTokens, &t.ReasoningTokens, &t.CachedTokens, &t.Images,
		&t.RequestDurationMs, &t.AudioSeconds, &t.EnergyWh, &t.SpeechSeconds, &t.UnmeteredTokens)...)
	usage.Tidy(t)
	return err
}

// scanAggregates runs a totals query of orgID from from to to and calls
// each with every row read.
func (u *Usage) scanAggregates(sql, orgID, from, to string, each func(rows pgx.Rows) error) error {
	ctx, cancel := ctxFor()
	defer cancel()
	rows, err := u.s.pool.Query(ctx, sql, pgText(orgID), from, to)
	if err != nil {
		return fmt.Errorf("read usage totals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read usage totals: %w", err)
	}
	return nil
}

var counters = strings.Join(totalsColumns, ", ")

// Days calls fn with each of orgID's day totals dated from to to
// (YYYY-MM-DD, both in), oldest first.
func (u *Usage) Days(orgID, from, to string, fn func(day []byte, t *api.UsageTotals) error) error {
	var t api.UsageTotals
	var day time.Time
	buf := make([]byte, 0, len(time.DateOnly))
	return u.scanAggregates(`SELECT day, `+counters+` FROM svc_usage_days
		WHERE org_id = $1 AND day BETWEEN $2::date AND $3::date ORDER BY day`, orgID, from, to,
		func(rows pgx.Rows) error {
			if err := scanTotals(rows, &t, &day); err != nil {
				return fmt.Errorf("read usage totals: %w", err)
			}
			return fn(day.AppendFormat(buf[:0], time.DateOnly), &t)
		})
}

// Models calls fn with each of orgID's model totals dated from to to,
// oldest day first, each day's in the models' byte order.
func (u *Usage) Models(orgID, from, to string, fn func(day, model []byte, t *api.UsageTotals) error) error {
	var t api.UsageTotals
	var day time.Time
	var model []byte
	buf := make([]byte, 0, len(time.DateOnly))
	return u.scanAggregates(`SELECT day, model, `+counters+` FROM svc_usage_models
		WHERE org_id = $1 AND day BETWEEN $2::date AND $3::date ORDER BY day, model`, orgID, from, to,
		func(rows pgx.Rows) error {
			if err := scanTotals(rows, &t, &day, &model); err != nil {
				return fmt.Errorf("read usage totals: %w", err)
			}
			return fn(day.AppendFormat(buf[:0], time.DateOnly), model, &t)
		})
}

// Workers calls fn with each of orgID's worker totals dated from to to,
// oldest day first, and the name the worker went by that day.
func (u *Usage) Workers(orgID, from, to string, fn func(day, workerID, name []byte, t *api.UsageTotals) error) error {
	var t api.UsageTotals
	var day time.Time
	var id, name []byte
	buf := make([]byte, 0, len(time.DateOnly))
	return u.scanAggregates(`SELECT day, worker_id, name, `+counters+` FROM svc_usage_workers
		WHERE org_id = $1 AND day BETWEEN $2::date AND $3::date ORDER BY day, worker_id`, orgID, from, to,
		func(rows pgx.Rows) error {
			if err := scanTotals(rows, &t, &day, &id, &name); err != nil {
				return fmt.Errorf("read usage totals: %w", err)
			}
			return fn(day.AppendFormat(buf[:0], time.DateOnly), id, name, &t)
		})
}

// usagePruneBatch bounds the rows one deleting statement deletes in the
// month at the cut-off, so that no statement holds its locks for long.
const usagePruneBatch = 10000

// PruneUsage deletes the rows created before before, never the totals,
// and returns how many it deleted: each month wholly before it is
// dropped as a partition, and the rows before it in its own month are
// deleted in statements of at most pruneBatch rows. It stops between
// statements when ctx ends.
func (u *Usage) PruneUsage(ctx context.Context, before time.Time) (int, error) {
	rows, err := u.s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'svc_usage_rows'::regclass`)
	if err != nil {
		return 0, fmt.Errorf("list usage partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("list usage partitions: %w", err)
	}
	n := 0
	for _, name := range names {
		m, ok := parsePartition(name)
		switch {
		case !ok:
			continue // not one of ours
		case !m.AddDate(0, 1, 0).After(before):
			dropped, err := u.dropPartition(ctx, name)
			n += dropped
			if err != nil {
				return n, err
			}
		case m.Before(before):
			deleted, err := u.deleteBefore(ctx, name, before)
			n += deleted
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// dropPartition drops a month's partition and returns how many rows it
// held.
func (u *Usage) dropPartition(ctx context.Context, name string) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, u.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockPartitions); err != nil {
			return err
		}
		id := pgx.Identifier{name}.Sanitize()
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+id).Scan(&n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DROP TABLE "+id)
		return err
	})
	u.parts.forget()
	if err != nil {
		return 0, fmt.Errorf("drop usage partition %s: %w", name, err)
	}
	return n, nil
}

// deleteBefore deletes the rows of partition name created before before.
func (u *Usage) deleteBefore(ctx context.Context, name string, before time.Time) (int, error) {
	id := pgx.Identifier{name}.Sanitize()
	// created_at is created_ns to the microsecond, rounded down: the
	// index on it narrows the rows to look at, created_ns decides.
	sql := fmt.Sprintf(`DELETE FROM %s WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM %s WHERE created_at <= $1 AND created_ns < $2 LIMIT $3))`, id, id)
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		tag, err := u.s.pool.Exec(ctx, sql, before, before.UnixNano(), u.pruneBatch)
		if err != nil {
			return n, fmt.Errorf("delete usage rows: %w", err)
		}
		n += int(tag.RowsAffected())
		if tag.RowsAffected() < int64(u.pruneBatch) {
			return n, nil
		}
	}
}

// moveSpeechSeconds is migration 9: builds before schema 7 recorded the
// seconds of audio a speech request made as its row's audio_seconds,
// which is a transcription's (the spec's usage rules), and migration 7
// left those rows as they were. It moves them to speech_seconds, in the
// rows' data and in the totals each row added to, as bbolt's migration 7
// does. A row that does not decode is left as it is.
//
// Speech rows are few, but finding them reads the whole log once: the
// rows have no index by request type.
func moveSpeechSeconds(ctx context.Context, tx pgx.Tx) error {
	type moved struct {
		createdAt time.Time
		id, org   string
		data      []byte
		rollup    usage.Rollup
	}
	rows, err := tx.Query(ctx, `SELECT created_at, request_id, org_id, data FROM svc_usage_rows WHERE request_type = $1`,
		api.RequestSpeech)
	if err != nil {
		return err
	}
	var todo []moved
	for rows.Next() {
		var m moved
		var data []byte
		if err := rows.Scan(&m.createdAt, &m.id, &m.org, &data); err != nil {
			rows.Close()
			return err
		}
		row, err := bolt.DecodeUsageRow(data)
		if err != nil || row.AudioSeconds == nil || row.SpeechSeconds != nil {
			continue
		}
		secs := *row.AudioSeconds
		m.rollup = usage.RollupOf(&row)
		m.rollup.Totals = api.UsageTotals{SpeechSeconds: secs}
		row.AudioSeconds, row.SpeechSeconds = nil, &secs
		m.data = bolt.EncodeUsageRow(nil, &row)
		todo = append(todo, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var b pgx.Batch
	for _, m := range todo {
		secs := m.rollup.Totals.SpeechSeconds
		b.Queue(`UPDATE svc_usage_rows SET data = $3 WHERE created_at = $1 AND request_id = $2`, m.createdAt, m.id, m.data)
		b.Queue(`UPDATE svc_usage_days SET audio_seconds = audio_seconds - $3, speech_seconds = speech_seconds + $3
			WHERE org_id = $1 AND day = $2::date`, m.org, m.rollup.Day, secs)
		b.Queue(`UPDATE svc_usage_models SET audio_seconds = audio_seconds - $4, speech_seconds = speech_seconds + $4
			WHERE org_id = $1 AND day = $2::date AND model = $3`, m.org, m.rollup.Day, m.rollup.Model, secs)
		if m.rollup.WorkerID != "" {
			b.Queue(`UPDATE svc_usage_workers SET audio_seconds = audio_seconds - $4, speech_seconds = speech_seconds + $4
				WHERE org_id = $1 AND day = $2::date AND worker_id = $3`, m.org, m.rollup.Day, m.rollup.WorkerID, secs)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("move speech seconds: %w", err)
	}
	return nil
}
