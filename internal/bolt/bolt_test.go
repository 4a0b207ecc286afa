package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/api"
)

func TestSecondOpenFailsFast(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = Open(dir, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), "another svc serve") {
		t.Fatalf("message %q does not say what to do", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second Open took %v", d)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.Version()
		if err != nil || v != SchemaVersion() {
			t.Fatalf("Version = %d, %v; want %d", v, err, SchemaVersion())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenAtTheSchemaWritesNothing: a store already at this build's schema
// is opened without a write, so that a gateway comes back on a full disk.
func TestOpenAtTheSchemaWritesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("opening the store changed its file")
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(SchemaVersion()+1))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema = %v", err)
	}
}

// A server replacing another on the same directory waits for the lock and
// opens the store as soon as the other lets go.
func TestOpenWaitsForTheLockToBeReleased(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan string, 1)
	type opened struct {
		s   *Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := OpenContext(t.Context(), dir, Options{LockTimeout: time.Minute, Waiting: func(path string) { waiting <- path }})
		done <- opened{s, err}
	}()
	if path := <-waiting; !strings.HasSuffix(path, FileName) {
		t.Fatalf("Waiting got %q, want the database file", path)
	}
	select {
	case o := <-done:
		t.Fatalf("Open returned while the lock was held: %v", o.err)
	default:
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("Open after the lock was released = %v", o.err)
	}
	defer o.s.Close()
	if v, err := o.s.Version(); err != nil || v != SchemaVersion() {
		t.Fatalf("Version = %d, %v", v, err)
	}
}

func TestOpenStopsWaitingWhenTheContextEnds(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ctx, cancel := context.WithCancel(t.Context())
	_, err = OpenContext(ctx, dir, Options{LockTimeout: time.Hour, Waiting: func(string) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open = %v, want context.Canceled", err)
	}
}

func TestReturningIsTakenOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.TakeReturning(); err != nil || got != nil {
		t.Fatalf("TakeReturning on a new store = %v, %v", got, err)
	}
	want := map[string][]string{"org_a": {"wk_1", "wk_2"}}
	// A checkpoint is overwritten by the next, or by the record at the
	// stop.
	if err := s.SaveFleet(map[string][]string{"org_a": {"wk_0"}}, map[string]int{"org_a": 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveFleet(want, map[string]int{"org_a": 2}); err != nil {
		t.Fatal(err)
	}
	got, err := s.TakeReturning()
	if err != nil || len(got["org_a"]) != 2 || got["org_a"][1] != "wk_2" {
		t.Fatalf("TakeReturning = %v, %v; want %v", got, err, want)
	}
	if got, err := s.TakeReturning(); err != nil || got != nil {
		t.Fatalf("second TakeReturning = %v, %v; want nothing", got, err)
	}
	var listed map[string]int
	if err := s.TakeListed(&listed); err != nil || listed["org_a"] != 2 {
		t.Fatalf("TakeListed = %v, %v", listed, err)
	}
	listed = nil
	if err := s.TakeListed(&listed); err != nil || listed != nil {
		t.Fatalf("second TakeListed = %v, %v; want nothing", listed, err)
	}
}

// Schema 7 moves the seconds of audio that older builds recorded as a
// speech row's audio_seconds to its speech_seconds, in the row and in the
// totals, leaving transcriptions' as they are.
func TestMigrationMovesSpeechSeconds(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	// As an older build wrote them.
	u.Record("o", api.UsageRow{ID: "speech", CreatedAt: usageNow, StatusCode: 200, RequestType: api.RequestSpeech,
		Model: "tts", WorkerID: "wk_1", WorkerName: "box", AudioSeconds: ptr(1.5), AudioFormat: ptr("wav")})
	u.Record("o", api.UsageRow{ID: "heard", CreatedAt: usageNow, StatusCode: 200, RequestType: api.RequestAudio,
		Model: "stt", WorkerID: "wk_1", WorkerName: "box", AudioSeconds: ptr(4.0), AudioFormat: ptr("wav")})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(6)) }); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u = s.Usage(s.NewWriter(WriterOptions{}))
	rows, _ := u.Logs("o", UsageQuery{Limit: 10})
	for _, r := range rows {
		switch r.ID {
		case "speech":
			// audio_format is a transcription's: null for speech.
			if r.AudioSeconds != nil || r.AudioFormat != nil || r.SpeechSeconds == nil || *r.SpeechSeconds != 1.5 {
				t.Errorf("speech row %+v", r)
			}
		case "heard":
			if r.AudioSeconds == nil || *r.AudioSeconds != 4 || r.AudioFormat == nil || *r.AudioFormat != "wav" || r.SpeechSeconds != nil {
				t.Errorf("transcription row %+v", r)
			}
		}
	}
	sum, _ := u.Summary("o", 1, usageNow)
	if sum.AudioSeconds != 4 || sum.SpeechSeconds != 1.5 || sum.Requests != 2 {
		t.Fatalf("summary %+v", sum)
	}
	b, _ := u.Breakdown("o", 1, "requests", usageNow)
	for _, m := range b.Models {
		if m.Model == "tts" && (m.AudioSeconds != 0 || m.SpeechSeconds != 1.5) {
			t.Errorf("the speech model's totals %+v", m)
		}
	}
	for _, wk := range b.Workers {
		if wk.AudioSeconds != 4 || wk.SpeechSeconds != 1.5 {
			t.Errorf("the worker's totals %+v", wk)
		}
	}
	if v, _ := s.Version(); v != SchemaVersion() {
		t.Fatalf("schema %d", v)
	}
}

// TestDamagedFileIsAnError: a file whose pages were overwritten is an
// error that says what to do, not a panic.
func TestDamagedFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xa5, 0x3c, 0x7e, 0x19}, 1024)
	for off := int64(8192); off < 8192*40; off += 4096 {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("Open of a damaged file = %v, want ErrDamaged saying what to do", err)
	}

	// Part of a page damaged, which bbolt finds only when it reads or
	// writes the page.
	for _, d := range []struct {
		kind  string // of the page damaged: a live leaf, or the freelist
		at, n int64
	}{{"leaf", 16, 64}, {"leaf", 200, 3000}, {"freelist", 16, 200}} {
		dir := t.TempDir()
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		page := int64(-1)
		// Read in a read-only transaction: a commit, even of nothing,
		// moves the freelist.
		err = s.db.View(func(tx *bbolt.Tx) error {
			for id := 2; page < 0; id++ {
				info, err := tx.Page(id)
				if err != nil || info == nil {
					return fmt.Errorf("no %s page: %v", d.kind, err)
				}
				if info.Type == d.kind {
					page = int64(id)
				}
			}
			return nil
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(page), uint64(d.at)))
		junk := make([]byte, d.n)
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		if _, err := f.WriteAt(junk, page*4096+d.at); err != nil {
			t.Fatal(err)
		}
		f.Close()
		// Found as the file opens, or when bbolt panics on the page as a
		// start reads the store under GuardPanic (as server.Run does),
		// which checks the file.
		s, err = Open(dir, Options{})
		if err == nil {
			err = func() (err error) {
				defer s.GuardPanic(&err)
				panic("bbolt on a damaged page")
			}()
			s.Close()
		}
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("%s page %d damaged at %d: %v, want ErrDamaged", d.kind, page, d.at, err)
		}
	}
}

// TestGuardPanicPassesOnOthers: a panic while the file is whole is not
// the file's: it goes on.
func TestGuardPanicPassesOnOthers(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer func() {
		if p := recover(); p != "a bug" {
			t.Fatalf("recovered %v, want the panic passed on", p)
		}
	}()
	_ = func() (err error) {
		defer s.GuardPanic(&err)
		panic("a bug")
	}()
	t.Fatal("the panic was swallowed")
}

// A speech row that a store migrated before kept its audio_format reads
// without it.
func TestSpeechRowReadsWithoutAudioFormat(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{})
	u := s.Usage(w)
	u.Record("o", api.UsageRow{ID: "speech", CreatedAt: usageNow, StatusCode: 200, RequestType: api.RequestSpeech,
		Model: "tts", SpeechSeconds: ptr(1.5), AudioFormat: ptr("wav")})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rows, err := u.Logs("o", UsageQuery{Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].AudioFormat != nil || rows[0].SpeechSeconds == nil {
		t.Fatalf("rows %+v, %v", rows, err)
	}
}
