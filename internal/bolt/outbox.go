package bolt

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/usage"
)

// bucketOutbox holds, in cluster mode, what is on its way to the shared
// store: created by Store.Outbox, so that a single-host store never has it
// and its schema is what it always was.
var bucketOutbox = []byte("outbox")

// OutboxKind is what an outbox record holds. Its values are stored: they
// are only ever added to.
type OutboxKind uint8

const (
	// OutboxUsage is a usage row of an organisation.
	OutboxUsage OutboxKind = 1
	// OutboxEvent is a worker event of an organisation.
	OutboxEvent OutboxKind = 2
	// OutboxPower is a power report's additions of a worker.
	OutboxPower OutboxKind = 3
)

func (k OutboxKind) String() string {
	switch k {
	case OutboxUsage:
		return "usage row"
	case OutboxEvent:
		return "worker event"
	case OutboxPower:
		return "power report"
	}
	return fmt.Sprintf("outbox kind %d", uint8(k))
}

// Outbox keeps, in cluster mode, the usage rows, worker events and power
// reports the gateway records, on the local disk, until a shipper has
// written them to the shared store: the gateway never waits on the
// network, and nothing recorded is lost while the shared store is down.
//
// Records go through the same Writer as the single-host store's, so a
// burst costs one local transaction, a full disk keeps them in memory and
// retries, and the backlog bound refuses new inference (usage rows are
// never dropped; events and power reports are, at the bound).
//
// The bucket is keyed by a big-endian sequence taken from bbolt's
// per-bucket counter inside the commit: keys are contiguous and in the
// order recorded, rolled back with a failed commit, and never reused, so
// a shipper acknowledges a prefix by its last key. A value is
//
//	kind      1 byte, an OutboxKind
//	recorded  8 bytes, big-endian Unix ns of the call that recorded it
//	owner     uvarint length and the bytes: the org id (usage, event) or
//	          the worker id (power)
//	record    usage: the compact row (usagerow.go); event: its JSON, as
//	          the events bucket holds it; power: see appendOutboxPower
type Outbox struct {
	store *Store
	w     *Writer
	// committed is signalled after a commit that added records.
	committed chan struct{}
}

// Outbox returns the outbox writing through w, creating its bucket the
// first time.
func (s *Store) Outbox(w *Writer) (*Outbox, error) {
	err := s.db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketOutbox)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create outbox: %w", err)
	}
	return &Outbox{store: s, w: w, committed: make(chan struct{}, 1)}, nil
}

// Committed receives after a commit that added records, for the one
// shipper to wake; signals coalesce.
func (o *Outbox) Committed() <-chan struct{} { return o.committed }

func (o *Outbox) signal() {
	select {
	case o.committed <- struct{}{}:
	default:
	}
}

// outboxHeader is the fixed part of a value: kind and time.
const outboxHeader = 1 + 8

func outboxValue(kind OutboxKind, owner string, size int) []byte {
	b := make([]byte, 0, outboxHeader+binary.MaxVarintLen64+len(owner)+size)
	b = append(b, byte(kind))
	b = binary.BigEndian.AppendUint64(b, uint64(time.Now().UnixNano()))
	return appendString(b, owner)
}

// add queues v to be put under the bucket's next sequence.
func (o *Outbox) add(kind recordKind, v []byte) {
	o.w.add(kind, len(v)+8, func(tx *txn) error {
		b := tx.Bucket(bucketOutbox)
		// Keys only grow: pages split full, as the usage log's do.
		b.FillPercent = 0.95
		seq, err := b.NextSequence()
		if err != nil {
			return fmt.Errorf("outbox sequence: %w", err)
		}
		if err := b.Put(u64(seq), v); err != nil {
			return fmt.Errorf("put outbox record: %w", err)
		}
		tx.OnCommit(o.signal)
		return nil
	})
}

// RecordUsage queues a usage row, cleaned as package usage says; it
// never blocks and the row is never dropped (see Writer).
func (o *Outbox) RecordUsage(orgID string, row api.UsageRow) {
	usage.Clean(&row)
	v := outboxValue(OutboxUsage, orgID, 160)
	o.add(kindUsage, appendUsageRow(v, &row))
}

// RecordEvent queues a worker event; at the backlog's bound it is
// dropped and counted (see Writer).
func (o *Outbox) RecordEvent(orgID string, ev api.WorkerEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		o.w.log.Error("worker event not stored", "err", err)
		return
	}
	o.add(kindEvent, append(outboxValue(OutboxEvent, orgID, len(data)), data...))
}

// AddPower queues a power report's additions, as Power.Add does: the
// deltas, the worker's through (0: unchanged) and its channels (nil:
// unchanged). A worker id that is empty or holds a 0x00, or a delta of a
// resolution without a layer, drops the report, as Power.Add does, so
// that both stores refuse the same reports.
func (o *Outbox) AddPower(workerID string, deltas []powerlog.Delta, through int64, meta *powerlog.Meta) {
	if workerID == "" || strings.IndexByte(workerID, 0) >= 0 {
		o.w.log.Error("power report dropped: bad worker id", "worker", workerID)
		return
	}
	for _, d := range deltas {
		if _, err := powerBucket(d.Res); err != nil {
			o.w.log.Error("power report dropped", "worker", workerID, "err", err)
			return
		}
	}
	var metaJSON []byte
	if meta != nil {
		var err error
		if metaJSON, err = json.Marshal(powerMeta{Machine: meta.Machine, Channels: meta.Channels}); err != nil {
			o.w.log.Error("power channels not stored", "worker", workerID, "err", err)
			metaJSON = nil
		}
	}
	v := outboxValue(OutboxPower, workerID, 64+len(metaJSON))
	o.add(kindPower, appendOutboxPower(v, deltas, through, metaJSON))
}

// appendOutboxPower encodes a report's additions: uvarint count of
// deltas, each its varint resolution and start, uvarint count of sums,
// each its key (uvarint length, bytes) and joules, covered seconds and
// peak watts (f64); then varint through; then the channels' JSON
// (uvarint length, 0 for none: JSON is never empty).
func appendOutboxPower(b []byte, deltas []powerlog.Delta, through int64, metaJSON []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(deltas)))
	for _, d := range deltas {
		b = binary.AppendVarint(b, d.Res)
		b = binary.AppendVarint(b, d.Start)
		b = binary.AppendUvarint(b, uint64(len(d.Sums)))
		for _, s := range d.Sums {
			b = binary.AppendUvarint(b, uint64(len(s.Key)))
			b = append(b, s.Key...)
			b = appendFloat(b, s.Joules)
			b = appendFloat(b, s.Covered)
			b = appendFloat(b, s.Peak)
		}
	}
	b = binary.AppendVarint(b, through)
	b = binary.AppendUvarint(b, uint64(len(metaJSON)))
	return append(b, metaJSON...)
}

// OutboxItem is one record read back from the outbox.
type OutboxItem struct {
	Seq  uint64
	Kind OutboxKind
	// At is when it was recorded.
	At time.Time
	// OrgID is the organisation of a usage row or event.
	OrgID string

	// Row is a usage row, and RowData its compact encoding, which
	// DecodeUsageRow reads back as Row.
	Row     api.UsageRow
	RowData []byte

	// Event is a worker event, and EventJSON its encoding.
	Event     api.WorkerEvent
	EventJSON []byte

	// Power is a power report's additions.
	Power PowerAddition

	// Err is set when the record could not be read: a shipper skips it
	// rather than stop at it for ever.
	Err error
}

// PowerAddition is what Power.Add was handed.
type PowerAddition struct {
	WorkerID string
	Deltas   []powerlog.Delta
	// Through is 0 when it leaves the stored one as it is.
	Through int64
	// Meta is nil when it leaves the stored channels as they are.
	Meta *powerlog.Meta
}

var errBadOutbox = errors.New("malformed outbox record")

// decodeOutbox reads one record; its slices are copies.
func decodeOutbox(k, v []byte) OutboxItem {
	it := OutboxItem{}
	if len(k) == 8 {
		it.Seq = binary.BigEndian.Uint64(k)
	}
	if len(k) != 8 || len(v) < outboxHeader {
		it.Err = errBadOutbox
		return it
	}
	it.Kind = OutboxKind(v[0])
	it.At = time.Unix(0, int64(binary.BigEndian.Uint64(v[1:]))).UTC()
	d := rowDecoder{b: v[outboxHeader:]}
	owner := d.string()
	if d.bad {
		it.Err = errBadOutbox
		return it
	}
	rest := d.b
	switch it.Kind {
	case OutboxUsage:
		it.OrgID = owner
		it.RowData = append([]byte(nil), rest...)
		it.Row, it.Err = decodeUsageRow(it.RowData)
	case OutboxEvent:
		it.OrgID = owner
		it.EventJSON = append([]byte(nil), rest...)
		if err := json.Unmarshal(it.EventJSON, &it.Event); err != nil {
			it.Err = fmt.Errorf("%w: %w", errBadOutbox, err)
		}
	case OutboxPower:
		it.Power, it.Err = decodeOutboxPower(owner, rest)
	default:
		it.Err = fmt.Errorf("%w: unknown kind %d", errBadOutbox, v[0])
	}
	return it
}

func decodeOutboxPower(workerID string, v []byte) (PowerAddition, error) {
	p := PowerAddition{WorkerID: workerID}
	d := rowDecoder{b: v}
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return p, errBadOutbox
	}
	p.Deltas = make([]powerlog.Delta, 0, n)
	for range n {
		dl := powerlog.Delta{Res: d.varint(), Start: d.varint()}
		m := d.uvarint()
		if d.bad || m > uint64(len(d.b)) {
			return p, errBadOutbox
		}
		dl.Sums = make([]powerlog.Sum, 0, m)
		for range m {
			key := []byte(d.string())
			f := powerlog.Figures{Joules: d.float(), Covered: d.float(), Peak: d.float()}
			dl.Sums = append(dl.Sums, powerlog.Sum{Key: key, Figures: f})
		}
		p.Deltas = append(p.Deltas, dl)
	}
	p.Through = d.varint()
	meta := d.string()
	if d.bad || len(d.b) != 0 {
		return p, errBadOutbox
	}
	if meta != "" {
		var m powerMeta
		if err := json.Unmarshal([]byte(meta), &m); err != nil {
			return p, fmt.Errorf("%w: channels: %w", errBadOutbox, err)
		}
		p.Meta = &powerlog.Meta{Channels: m.Channels, Machine: m.Machine}
	}
	for _, dl := range p.Deltas {
		for _, s := range dl.Sums {
			if !finiteNonNeg(s.Joules) || !finiteNonNeg(s.Covered) || !finiteNonNeg(s.Peak) {
				return p, fmt.Errorf("%w: a figure is not a finite, non-negative number", errBadOutbox)
			}
		}
	}
	return p, nil
}

// Peek returns up to max of the oldest records, oldest first. A record
// that cannot be read is returned with its Err set.
func (o *Outbox) Peek(max int) ([]OutboxItem, error) {
	var out []OutboxItem
	err := o.store.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
			out = append(out, decodeOutbox(k, v))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// Ack deletes the records up to and including lastSeq: they are in the
// shared store. It writes directly rather than through the writer, as
// pruning does: its transaction is short and the writer's commits wait
// for it briefly.
func (o *Outbox) Ack(lastSeq uint64) error {
	err := o.store.db.Update(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		// Deleting at the cursor moves it to the next key.
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= lastSeq; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("acknowledge outbox records: %w", err)
	}
	return nil
}

// Depth is how many records wait in the outbox and when the oldest was
// recorded (zero when none waits). Keys are contiguous (see Outbox), so
// this reads two keys however deep it is.
func (o *Outbox) Depth() (records int, oldest time.Time, err error) {
	err = o.store.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		fk, fv := c.First()
		if fk == nil {
			return nil
		}
		lk, _ := c.Last()
		records = int(binary.BigEndian.Uint64(lk) - binary.BigEndian.Uint64(fk) + 1)
		if len(fv) >= outboxHeader {
			oldest = time.Unix(0, int64(binary.BigEndian.Uint64(fv[1:]))).UTC()
		}
		return nil
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read outbox: %w", err)
	}
	return records, oldest, nil
}

// Last is the sequence of the newest record committed, 0 when none
// waits: what a shipper must have shipped for everything committed so
// far to be in the shared store.
func (o *Outbox) Last() (uint64, error) {
	var last uint64
	err := o.store.db.View(func(tx *bbolt.Tx) error {
		if k, _ := tx.Bucket(bucketOutbox).Cursor().Last(); len(k) == 8 {
			last = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read outbox: %w", err)
	}
	return last, nil
}

// Writer is the writer the outbox's records go through, for a caller to
// wait for them to be committed (Writer.Sync) or tell its backlog.
func (o *Outbox) Writer() *Writer { return o.w }
