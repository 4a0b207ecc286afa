package bolt

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"syscall"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/powerlog"
	"github.com/svc-dev/svc/internal/usage"
)

// outboxOn opens the outbox of a store whose commits go through a disk.
func outboxOn(t *testing.T, o WriterOptions) (*Store, *Writer, *disk, *Outbox) {
	t.Helper()
	s, w, d := faultyWriter(t, o)
	box, err := s.Outbox(w)
	if err != nil {
		t.Fatal(err)
	}
	return s, w, d, box
}

func peekAll(t *testing.T, box *Outbox) []OutboxItem {
	t.Helper()
	items, err := box.Peek(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Err != nil {
			t.Fatalf("record %d: %v", it.Seq, it.Err)
		}
	}
	return items
}

// Every kind comes back as it was recorded, in the order recorded, under
// contiguous sequences; a usage row cleaned as the usage log cleans it,
// its encoding the usage log's.
func TestOutboxKeepsWhatIsRecordedInOrder(t *testing.T) {
	_, w, _, box := outboxOn(t, WriterOptions{Every: time.Hour})
	rng := rand.New(rand.NewPCG(3, 4))
	rows := usageRows(rng, "org", 50)
	rows[0].TokensPerSecond = ptr(math.Inf(1)) // dropped by cleaning
	ev := api.WorkerEvent{ID: "e1", WorkerID: "w-01", WorkerName: "one", EventType: api.EventConnected,
		Detail: ptr("hi"), Metadata: map[string]any{"a": "b"}, CreatedAt: usageNow}
	meta := &powerlog.Meta{Channels: testChannels, Machine: "sum"}
	deltas := []powerlog.Delta{
		{Res: 60, Start: at(0).Unix(), Sums: sums("cpu", reading{1, 2, 3}, "gpu0", reading{4, 5, 6})},
		{Res: 3600, Start: at(0).Unix(), Sums: sums("system", reading{0.5, 60, 7})},
	}
	type want struct {
		kind OutboxKind
		org  string
		row  *api.UsageRow
	}
	var wants []want
	for i := range rows {
		box.RecordUsage("org", rows[i])
		wants = append(wants, want{OutboxUsage, "org", &rows[i]})
		if i == 10 {
			box.RecordEvent("org-b", ev)
			wants = append(wants, want{kind: OutboxEvent, org: "org-b"})
			box.AddPower("w-01", deltas, at(1).UnixNano(), meta)
			box.AddPower("w-02", nil, 0, nil)
			wants = append(wants, want{kind: OutboxPower}, want{kind: OutboxPower})
		}
	}
	start := time.Now()
	flush(t, w)
	items := peekAll(t, box)
	if len(items) != len(wants) {
		t.Fatalf("%d records, %d recorded", len(items), len(wants))
	}
	for i, it := range items {
		wt := wants[i]
		if it.Seq != items[0].Seq+uint64(i) || it.Kind != wt.kind || it.OrgID != wt.org {
			t.Fatalf("record %d: seq %d, %v of %q; want %v of %q", i, it.Seq, it.Kind, it.OrgID, wt.kind, wt.org)
		}
		if it.At.Before(start.Add(-time.Minute)) || it.At.After(time.Now()) {
			t.Errorf("record %d recorded at %v", i, it.At)
		}
		switch it.Kind {
		case OutboxUsage:
			r := *wt.row
			usage.Clean(&r)
			if !reflect.DeepEqual(it.Row, r) {
				t.Errorf("record %d: row %+v, want %+v", i, it.Row, r)
			}
			if back, err := DecodeUsageRow(it.RowData); err != nil || !reflect.DeepEqual(back, it.Row) {
				t.Errorf("record %d: its encoding reads back as %+v, %v", i, back, err)
			}
		case OutboxEvent:
			got := it.Event
			if got.ID != ev.ID || got.EventType != ev.EventType || *got.Detail != *ev.Detail || !got.CreatedAt.Equal(ev.CreatedAt) ||
				got.Metadata["a"] != "b" {
				t.Errorf("event %+v, want %+v", got, ev)
			}
		}
	}
	p1, p2 := items[12].Power, items[13].Power
	if !reflect.DeepEqual(p1, PowerAddition{WorkerID: "w-01", Deltas: deltas, Through: at(1).UnixNano(), Meta: meta}) {
		t.Errorf("power addition %+v", p1)
	}
	if p2.WorkerID != "w-02" || len(p2.Deltas) != 0 || p2.Through != 0 || p2.Meta != nil {
		t.Errorf("power addition without windows %+v", p2)
	}
	if n, oldest, err := box.Depth(); err != nil || n != len(wants) || oldest != items[0].At {
		t.Errorf("Depth = %d, %v, %v", n, oldest, err)
	}
}

// Ack deletes a prefix; sequences keep growing past acknowledged records,
// across a reopen, so a shipper's position never names a new record.
func TestOutboxAckAndSequences(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{Every: time.Hour})
	box, err := s.Outbox(w)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		box.RecordUsage("org", tokenRow(fmt.Sprint("r", i), usageNow))
	}
	flush(t, w)
	items := peekAll(t, box)
	last, err := box.Last()
	if err != nil || last != items[9].Seq {
		t.Fatalf("Last = %d, %v; want %d", last, err, items[9].Seq)
	}
	if err := box.Ack(items[3].Seq); err != nil {
		t.Fatal(err)
	}
	rest := peekAll(t, box)
	if len(rest) != 6 || rest[0].Row.ID != "r4" {
		t.Fatalf("after Ack: %d records, first %q", len(rest), rest[0].Row.ID)
	}
	if n, _, _ := box.Depth(); n != 6 {
		t.Errorf("Depth = %d after acknowledging 4 of 10", n)
	}
	if err := box.Ack(last); err != nil {
		t.Fatal(err)
	}
	if n, oldest, err := box.Depth(); n != 0 || !oldest.IsZero() || err != nil {
		t.Errorf("Depth = %d, %v, %v when empty", n, oldest, err)
	}
	if l, _ := box.Last(); l != 0 {
		t.Errorf("Last = %d when empty", l)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w = s.NewWriter(WriterOptions{Every: time.Hour})
	if box, err = s.Outbox(w); err != nil {
		t.Fatal(err)
	}
	box.RecordUsage("org", tokenRow("after", usageNow))
	flush(t, w)
	again := peekAll(t, box)
	if len(again) != 1 || again[0].Seq != last+1 {
		t.Fatalf("after reopening: %+v, want one record of sequence %d", again, last+1)
	}
}

// A single-host store never has an outbox bucket: its file is what it
// always was.
func TestOutboxBucketOnlyWhenAsked(t *testing.T) {
	s, w, _ := faultyWriter(t, WriterOptions{})
	has := func() bool {
		var ok bool
		_ = s.db.View(func(tx *bbolt.Tx) error { ok = tx.Bucket(bucketOutbox) != nil; return nil })
		return ok
	}
	if has() {
		t.Fatal("a new store has an outbox")
	}
	if _, err := s.Outbox(w); err != nil || !has() {
		t.Fatalf("Outbox: %v, bucket made: %v", err, has())
	}
}

// While the disk is full the records wait in the writer's backlog, bound
// as the usage log's are: rows kept, events and power reports dropped at
// the bound. Once space returns they are written once each, in order, and
// a commit reported failed that was written is not written again.
func TestOutboxThroughAFailingDisk(t *testing.T) {
	_, w, d, box := outboxOn(t, WriterOptions{Every: time.Hour, Backlog: 5 * (recordOverhead + 100)})
	d.setFull(true)
	for i := range 20 {
		box.RecordUsage("org", tokenRow(fmt.Sprint("r", i), usageNow))
	}
	box.RecordEvent("org", api.WorkerEvent{ID: "dropped", CreatedAt: usageNow})
	box.AddPower("w", nil, 1, nil)
	if err := w.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on a full disk: %v", err)
	}
	select {
	case <-box.Committed():
		t.Fatal("a failed commit signalled the shipper")
	default:
	}
	b := w.Backlog()
	if !b.Refusing || b.UsageRows != 20 || b.DroppedEvents != 1 || b.DroppedPower != 1 || !b.Failing {
		t.Fatalf("at the bound: %+v", b)
	}
	if items := peekAll(t, box); len(items) != 0 {
		t.Fatalf("%d records written to a full disk", len(items))
	}
	d.setFull(false)
	d.writeThenFail = 1
	if err := w.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush whose fsync fails: %v", err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if b := w.Backlog(); b.UsageRows != 0 || b.Bytes != 0 || b.Failing {
		t.Fatalf("after space returned: %+v", b)
	}
	items := peekAll(t, box)
	if len(items) != 20 {
		t.Fatalf("%d records written, 20 recorded", len(items))
	}
	for i, it := range items {
		if it.Row.ID != fmt.Sprint("r", i) {
			t.Fatalf("record %d is %q", i, it.Row.ID)
		}
	}
	select {
	case <-box.Committed():
	default:
		t.Error("a commit did not signal the shipper")
	}
}

// A record that cannot be read is handed out with its error, and the
// ones after it are read: a shipper is never stuck on it.
func TestOutboxMalformedRecord(t *testing.T) {
	s, w, _, box := outboxOn(t, WriterOptions{Every: time.Hour})
	box.RecordUsage("org", tokenRow("a", usageNow))
	flush(t, w)
	for _, v := range [][]byte{{byte(OutboxUsage)}, {9, 0, 0, 0, 0, 0, 0, 0, 0, 0}, append([]byte{byte(OutboxPower), 0, 0, 0, 0, 0, 0, 0, 0, 1, 'w'}, 0xff)} {
		err := s.db.Update(func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucketOutbox)
			seq, _ := b.NextSequence()
			return b.Put(u64(seq), v)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	box.RecordUsage("org", tokenRow("b", usageNow))
	flush(t, w)
	items, err := box.Peek(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 5 || items[0].Err != nil || items[4].Err != nil || items[4].Row.ID != "b" {
		t.Fatalf("items %+v", items)
	}
	for _, it := range items[1:4] {
		if it.Err == nil {
			t.Errorf("malformed record %d read without an error: %+v", it.Seq, it)
		}
	}
}

// Reports a Power store would drop are dropped by the outbox too.
func TestOutboxDropsPowerReportsPowerDrops(t *testing.T) {
	_, w, _, box := outboxOn(t, WriterOptions{Every: time.Hour})
	box.AddPower("", nil, 1, nil)
	box.AddPower("a\x00b", nil, 1, nil)
	box.AddPower("w", []powerlog.Delta{{Res: 120, Start: 0}}, 1, nil)
	flush(t, w)
	if items := peekAll(t, box); len(items) != 0 {
		t.Fatalf("%d bad reports kept", len(items))
	}
}
