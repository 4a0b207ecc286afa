package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a missing
// PostgreSQL from a skipped test into a failed one (CI sets it to 1).
const RequireEnv = "SVC_REQUIRE_POSTGRES"

// unavailable skips t, or fails it when PostgreSQL is required.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoPostgres) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("no PostgreSQL (%v); set %s=1 to fail instead", err, RequireEnv)
	}
	t.Fatalf("PostgreSQL: %v", err)
}

// New starts a server of t's own, closed when t ends: for tests that stop,
// kill or restart it. Tests that only need a database share one server
// through Shared.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start("")
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	return s
}

// Shared is one server for a whole test package, started by the first test
// that asks for a database and stopped by Main when the package's tests
// end. A package declares one and runs its tests through it:
//
//	var pg pgtest.Shared
//
//	func TestMain(m *testing.M) { pg.Main(m) }
//
//	func TestX(t *testing.T) { url := pg.CreateDB(t) ... }
type Shared struct {
	mu     sync.Mutex
	inMain bool
	srv    *Server
	err    error // why the server could not start; not retried
	n      atomic.Int64
}

// Main runs the package's tests and then stops the server. Returning from
// TestMain makes the test binary exit with m.Run's status.
func (sh *Shared) Main(m *testing.M) {
	sh.mu.Lock()
	sh.inMain = true
	sh.mu.Unlock()
	code := m.Run()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.srv != nil {
		if err := sh.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop PostgreSQL:", err)
			if code == 0 {
				os.Exit(1)
			}
		}
		sh.srv = nil
	}
	if code != 0 {
		os.Exit(code)
	}
}

// Server returns the shared server, starting it on first use.
func (sh *Shared) Server(t testing.TB) *Server {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.inMain {
		t.Fatal("pgtest.Shared needs the package's TestMain to call its Main, which stops the server")
	}
	if sh.srv == nil && sh.err == nil {
		sh.srv, sh.err = Start("")
	}
	if sh.err != nil {
		unavailable(t, sh.err)
	}
	return sh.srv
}

// CreateDB creates a database of t's own on the shared server and returns
// its URL; the database is dropped when t ends.
func (sh *Shared) CreateDB(t testing.TB) string {
	t.Helper()
	srv := sh.Server(t)
	name := fmt.Sprintf("t%d_%s", sh.n.Add(1), dbName(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, err := srv.CreateDB(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.DropDB(ctx, name); err != nil {
			t.Logf("drop test database: %v", err)
		}
	})
	return url
}

var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// dbName keeps a database name readable in the server's log and within
// the 63 bytes PostgreSQL allows.
func dbName(test string) string {
	s := notIdent.ReplaceAllString(strings.ToLower(test), "_")
	if len(s) > 50 {
		s = s[:50]
	}
	return s
}
