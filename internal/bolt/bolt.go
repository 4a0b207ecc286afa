// Package bolt is svc's storage on bbolt: every bucket, key encoding and
// schema migration lives here. Only `svc serve` opens the file.
package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrSchemaTooNew is a data directory a newer release migrated past what
// this build reads: it cannot open it, and restarting will not help.
var ErrSchemaTooNew = errors.New("bolt: the data directory is from a newer release")

// FileName is the database file inside the data directory.
const FileName = "svc.db"

// ErrLocked means another process holds the database open.
var ErrLocked = errors.New("the database is locked by another process")

// Bucket names, in one place.
var (
	bucketMeta         = []byte("meta")
	bucketOrgs         = []byte("orgs")
	bucketUsers        = []byte("users")
	bucketMembers      = []byte("members")
	bucketKeys         = []byte("api_keys")
	bucketWorkerTokens = []byte("worker_tokens")
	bucketLastUsed     = []byte("last_used")
	bucketEvents       = []byte("worker_events")
	bucketUsageRows    = []byte("usage_rows")
	bucketUsageDays    = []byte("usage_days")
	bucketUsageModels  = []byte("usage_models")
	bucketUsageWorkers = []byte("usage_workers")
	bucketPower60      = []byte("power_60")
	bucketPower300     = []byte("power_300")
	bucketPower3600    = []byte("power_3600")
	bucketPowerThrough = []byte("power_through")
	bucketPowerChans   = []byte("power_channels")
	bucketRentals      = []byte("rentals")
	// bucketRentLimits is made by the first rental request counted
	// (RentLimiter), not by a migration: a store that never rents has none.
	bucketRentLimits = []byte("rent_limits")

	keySchemaVersion = []byte("schema_version")
)

// migration moves the schema from version-1 to version.
type migration struct {
	version uint64
	name    string
	apply   func(tx *bbolt.Tx) error
}

// migrations run in order at start-up; append, never edit.
func migrations() []migration {
	return []migration{
		{1, "accounts", func(tx *bbolt.Tx) error {
			return createBuckets(tx, bucketOrgs, bucketUsers, bucketMembers, bucketKeys, bucketWorkerTokens, bucketLastUsed)
		}},
		{2, "worker events", func(tx *bbolt.Tx) error { return createBuckets(tx, bucketEvents) }},
		{3, "usage", func(tx *bbolt.Tx) error {
			return createBuckets(tx, bucketUsageRows, bucketUsageDays, bucketUsageModels, bucketUsageWorkers)
		}},
		{4, "power history", func(tx *bbolt.Tx) error {
			return createBuckets(tx, bucketPower60, bucketPower300, bucketPower3600, bucketPowerThrough, bucketPowerChans)
		}},
		{5, "rentals", func(tx *bbolt.Tx) error { return createBuckets(tx, bucketRentals) }},
		// Rows from now on are in the compact layout (usagerow.go), which
		// a build before it cannot read. Nothing is rewritten: the version
		// is there so that such a build refuses the store at start rather
		// than failing every usage listing.
		{6, "compact usage rows", func(*bbolt.Tx) error { return nil }},
		// Rows and totals from now on count the speech made
		// (speech_seconds: a row bit and totals version 3), which a build
		// before them takes for a broken row and resets totals over. The
		// version makes such a build refuse the store; the speech rows of
		// builds that counted the audio made as audio_seconds have it moved.
		{7, "speech seconds", moveSpeechSeconds},
		// Totals from now on count the tokens of rows without energy
		// (totals version 4), whose longer value a build before them reads
		// as broken. Nothing is rewritten: older totals read as having
		// none, and the version makes such a build refuse the store.
		{8, "unmetered tokens", func(*bbolt.Tx) error { return nil }},
	}
}

// SchemaVersion is the version this build migrates to.
func SchemaVersion() uint64 {
	m := migrations()
	return m[len(m)-1].version
}

func createBuckets(tx *bbolt.Tx, names ...[]byte) error {
	for _, n := range names {
		if _, err := tx.CreateBucketIfNotExists(n); err != nil {
			return fmt.Errorf("create bucket %s: %w", n, err)
		}
	}
	return nil
}

// Store is the open database.
type Store struct {
	db *bbolt.DB
}

// Options tune Open.
type Options struct {
	// LockTimeout bounds the wait for another process's lock: a server
	// replacing another on the same directory waits for it to finish its
	// drain and close the store. 0 is one second.
	LockTimeout time.Duration
	// Waiting, when set, is called once if the lock is held when Open
	// starts waiting for it, so that the wait can be told.
	Waiting func(path string)
}

// lockPoll is how often a held lock is tried again: the time a
// replacement may lose after its predecessor lets go.
const lockPoll = 10 * time.Millisecond

// Open opens (creating if needed) the database in dir and migrates it.
func Open(dir string, opts Options) (*Store, error) {
	return OpenContext(context.Background(), dir, opts)
}

// OpenContext is Open that stops waiting for another process's lock when
// ctx ends.
func OpenContext(ctx context.Context, dir string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	path := filepath.Join(dir, FileName)
	deadline := time.Now().Add(opts.LockTimeout)
	var db *bbolt.DB
	var err error
	for waited := false; ; waited = true {
		db, err = openFile(path, &bbolt.Options{
			// One try: bbolt's own retries sleep 50 ms between tries and
			// cannot be stopped; this loop tries more often and can.
			Timeout: time.Nanosecond,
			// Reserve address space up front so the file rarely needs a remap,
			// which would wait for every open read transaction.
			InitialMmapSize: 256 << 20,
			FreelistType:    bbolt.FreelistMapType,
		})
		if !errors.Is(err, bolterrors.ErrTimeout) {
			break
		}
		if !waited && opts.Waiting != nil {
			opts.Waiting(path)
		}
		wait := min(lockPoll, time.Until(deadline))
		if wait <= 0 {
			return nil, fmt.Errorf("open %s: %w (is another svc serve using this data directory? waited %s)",
				path, ErrLocked, opts.LockTimeout)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("open %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrateGuarded(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// migrateGuarded is migrate, with a panic of bbolt's on a damaged page as
// the error that says so.
func (s *Store) migrateGuarded() (err error) {
	defer s.GuardPanic(&err)
	return s.migrate()
}

// ErrDamaged is a database file that cannot be read: its pages are not
// what bbolt wrote, after a disk fault or an edit by hand.
var ErrDamaged = errors.New("the database file is damaged")

// damaged is ErrDamaged for cause, saying what to do.
func damaged(cause any) error {
	return fmt.Errorf("%w (%v): restore it from a backup of the data directory, or move it away to start with an empty one", ErrDamaged, cause)
}

// openFile is bbolt.Open, with the panic bbolt raises for a damaged file
// (a freelist or meta page that is not one) as an error that names the
// file and what to do, rather than a crash and its stack. (The process
// exits then: a file left locked by the recovered open is released with
// it.)
func openFile(path string, opts *bbolt.Options) (db *bbolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, damaged(p)
		}
	}()
	return bbolt.Open(path, 0o600, opts)
}

// Damaged checks every page of the store, for a caller that caught a
// panic of bbolt's reading or writing it: the first fault found, as
// ErrDamaged, or nil when the file is whole and the panic was another's.
// It reads the whole file, so it is for a panic, not for every start.
func (s *Store) Damaged() error {
	var first error
	err := s.db.View(func(tx *bbolt.Tx) error {
		for e := range tx.Check() {
			if first == nil {
				first = e
			}
		}
		return nil
	})
	switch {
	case first != nil:
		return damaged(first)
	case err != nil:
		return damaged(err)
	}
	return nil
}

// GuardPanic, deferred, turns a panic of the goroutine that deferred it
// into *err when Damaged finds the file damaged (bbolt panics on a page
// that is not what it wrote, as a server's start reads them); any other
// panic goes on.
func (s *Store) GuardPanic(err *error) {
	p := recover()
	if p == nil {
		return
	}
	if derr := s.Damaged(); derr != nil {
		*err = derr
		return
	}
	panic(p)
}

// Close closes the database; pending transactions finish first.
func (s *Store) Close() error { return s.db.Close() }

// Path is the database file.
func (s *Store) Path() string { return s.db.Path() }

func (s *Store) migrate() error {
	// A store already at this build's schema is opened without a write:
	// a gateway must come back on a full disk, where it serves with its
	// usage rows held in memory, and an update would need a free page.
	if cur, err := s.Version(); err == nil && cur == SchemaVersion() {
		return nil
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return fmt.Errorf("create meta bucket: %w", err)
		}
		var cur uint64
		if v := meta.Get(keySchemaVersion); v != nil {
			cur = binary.BigEndian.Uint64(v)
		}
		if cur > SchemaVersion() {
			return fmt.Errorf("%w: database schema version %d is newer than this build understands (%d); upgrade svc", ErrSchemaTooNew, cur, SchemaVersion())
		}
		for _, m := range migrations() {
			if m.version <= cur {
				continue
			}
			if err := m.apply(tx); err != nil {
				return fmt.Errorf("migrate to schema %d (%s): %w", m.version, m.name, err)
			}
			cur = m.version
		}
		return meta.Put(keySchemaVersion, u64(cur))
	})
}

// Version reads the stored schema version.
func (s *Store) Version() (uint64, error) {
	var v uint64
	err := s.db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil // a new store
		}
		if b := meta.Get(keySchemaVersion); b != nil {
			v = binary.BigEndian.Uint64(b)
		}
		return nil
	})
	return v, err
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func putJSON(b *bbolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put(key, data)
}

// eachJSON decodes every value of bucket name into a fresh T.
func eachJSON[T any](tx *bbolt.Tx, name []byte, fn func(T)) error {
	return tx.Bucket(name).ForEach(func(k, v []byte) error {
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("decode %s/%s: %w", name, k, err)
		}
		fn(x)
		return nil
	})
}

// EnsureDir creates the data directory readable only by its owner. One
// made beforehand (by mkdir, a package, a volume mount) loses its group
// and other access: the database and the credential files go in it.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, perm&0o700); err != nil {
			return fmt.Errorf("restrict data directory %s (mode %04o) to its owner: %w", dir, perm, err)
		}
	}
	return nil
}
