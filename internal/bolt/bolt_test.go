package bolt

import (
	"errors"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
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
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema = %v", err)
	}
}
