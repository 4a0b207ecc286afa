package pgstore

// schemaLogs is version 2: the usage log and its totals, worker events
// and power history, written by each replica's outbox shipper (ship.go).
//
// Usage rows are partitioned by month on created_at, so that retention
// drops a month's partition rather than deleting its rows one by one; the
// partitions are created as rows need them (usage.go). The key is
// (created_at, request_id): a partitioned table's unique keys must hold
// its partition key, and a request's row carries one created_at wherever
// it is sent from (the outbox re-sends the very bytes it first sent), so
// the pair is as unique as the request id. Why that makes the totals
// exactly once is told at insertUsage.
//
// created_ns is the row's time to the nanosecond, as bbolt orders rows,
// and seq the order rows were written in, for rows of the same instant:
// a listing is newest first by (created_ns, seq), as bbolt's. data is the
// whole row in bbolt's compact layout, so a listing returns exactly what
// bbolt's does; the columns beside it are what queries filter on and what
// an operator checks the totals against.
//
// Totals are kept per UTC day, as bbolt keeps them, and never pruned.
// Text that is listed in order (models, workers) is in the "C" collation,
// so that it lists in bbolt's byte order; so are the ids in keys and
// indexes, which a locale's collation would only make slower to compare.
//
// The three totals tables share their counters (totalsCounters), which
// the statements of usage.go name in totalsColumns.
//
// Power buckets hold one row per channel; through, the end of the last
// window recorded of each worker, is moved in the same statement that
// adds a report's buckets, and only forward (power.go).
const schemaLogs = `
CREATE SEQUENCE svc_usage_seq;
CREATE TABLE svc_usage_rows (
	created_at        timestamptz NOT NULL,
	request_id        text COLLATE "C" NOT NULL,
	org_id            text COLLATE "C" NOT NULL,
	created_ns        bigint NOT NULL,
	seq               bigint NOT NULL DEFAULT nextval('svc_usage_seq'),
	worker_id         text COLLATE "C" NOT NULL,
	model             text NOT NULL,
	request_type      text NOT NULL,
	status_code       integer NOT NULL,
	prompt_tokens     bigint NOT NULL,
	completion_tokens bigint NOT NULL,
	total_tokens      bigint NOT NULL,
	data              bytea NOT NULL,
	PRIMARY KEY (created_at, request_id)
) PARTITION BY RANGE (created_at);
CREATE INDEX svc_usage_rows_org ON svc_usage_rows (org_id, created_ns DESC, seq DESC);
CREATE INDEX svc_usage_rows_worker ON svc_usage_rows (org_id, worker_id, created_ns DESC, seq DESC);

CREATE TABLE svc_usage_days (
	org_id              text COLLATE "C" NOT NULL,
	day                 date NOT NULL,` + totalsCounters + `
	PRIMARY KEY (org_id, day)
);
CREATE TABLE svc_usage_models (
	org_id              text COLLATE "C" NOT NULL,
	day                 date NOT NULL,
	model               text COLLATE "C" NOT NULL,` + totalsCounters + `
	PRIMARY KEY (org_id, day, model)
);
CREATE TABLE svc_usage_workers (
	org_id              text COLLATE "C" NOT NULL,
	day                 date NOT NULL,
	worker_id           text COLLATE "C" NOT NULL,
	name                text NOT NULL,` + totalsCounters + `
	PRIMARY KEY (org_id, day, worker_id)
);

CREATE SEQUENCE svc_worker_events_seq;
-- event_key is the event's id, or for one without, a hash of its JSON:
-- what makes a re-sent event the same one.
CREATE TABLE svc_worker_events (
	org_id     text COLLATE "C" NOT NULL,
	event_key  text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL,
	created_ns bigint NOT NULL,
	seq        bigint NOT NULL DEFAULT nextval('svc_worker_events_seq'),
	worker_id  text COLLATE "C" NOT NULL,
	event_type text NOT NULL,
	payload    json NOT NULL,
	PRIMARY KEY (org_id, event_key)
);
CREATE INDEX svc_worker_events_org ON svc_worker_events (org_id, created_ns DESC, seq DESC);
CREATE INDEX svc_worker_events_age ON svc_worker_events (created_ns);

CREATE TABLE svc_power_workers (
	worker_id text COLLATE "C" PRIMARY KEY,
	through   bigint NOT NULL,
	meta      json
);
CREATE TABLE svc_power_buckets (
	worker_id text COLLATE "C" NOT NULL,
	res       integer NOT NULL,
	start     bigint NOT NULL,
	channel   bytea NOT NULL,
	joules    double precision NOT NULL,
	covered   double precision NOT NULL,
	peak      double precision NOT NULL,
	PRIMARY KEY (worker_id, res, start, channel)
);
CREATE INDEX svc_power_buckets_age ON svc_power_buckets (res, start);
`

// totalsCounters are the counters of every totals table, as version 2
// made them: a later version that adds one alters the tables rather
// than editing this.
const totalsCounters = `
	requests            bigint NOT NULL,
	succeeded           bigint NOT NULL,
	failed              bigint NOT NULL,
	cancelled           bigint NOT NULL,
	prompt_tokens       bigint NOT NULL,
	completion_tokens   bigint NOT NULL,
	total_tokens        bigint NOT NULL,
	reasoning_tokens    bigint NOT NULL,
	cached_tokens       bigint NOT NULL,
	images              bigint NOT NULL,
	request_duration_ms bigint NOT NULL,
	audio_seconds       double precision NOT NULL,
	energy_wh           double precision NOT NULL,`

// schemaSpeechSeconds is version 7: the totals count the audio speech
// requests made (a row carries it in data). Builds before it would add
// their totals without it, and fail to read a speech row's data, so it
// is also the oldest build that may use the database.
const schemaSpeechSeconds = `
ALTER TABLE svc_usage_days ADD COLUMN speech_seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE svc_usage_models ADD COLUMN speech_seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE svc_usage_workers ADD COLUMN speech_seconds double precision NOT NULL DEFAULT 0;
`

// schemaUnmeteredTokens is version 11: the totals count the tokens of
// rows that measured no energy, which the energy a thousand tokens leaves
// out. Totals from before it, and those a build before it adds, have
// none, and count all their tokens as metered, as those builds did; so
// the oldest build that may use the database stays where it was.
const schemaUnmeteredTokens = `
ALTER TABLE svc_usage_days ADD COLUMN IF NOT EXISTS unmetered_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE svc_usage_models ADD COLUMN IF NOT EXISTS unmetered_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE svc_usage_workers ADD COLUMN IF NOT EXISTS unmetered_tokens bigint NOT NULL DEFAULT 0;
`

// schemaWorkerEvents is version 8: a worker's events by time, for the
// newest of one worker (LastEvent, on a worker's first connect to a
// replica) and of each (RecentWorkers, on a claim), which the
// organisation's index would find only by reading its events back to
// them. Older builds do not need it.
const schemaWorkerEvents = `
CREATE INDEX svc_worker_events_worker ON svc_worker_events (org_id, worker_id, created_ns DESC, seq DESC);
`
