package pgtest_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/svc-dev/svc/internal/pgtest"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { pg.Main(m) }

func exec(t *testing.T, url, sql string) []*pgconn.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return res
}

// Every CreateDB is a database of its own on one shared server.
func TestSharedDatabasesAreSeparate(t *testing.T) {
	a, b := pg.CreateDB(t), pg.CreateDB(t)
	if a == b {
		t.Fatalf("two databases with one URL %s", a)
	}
	exec(t, a, "CREATE TABLE x (v int); INSERT INTO x VALUES (1)")
	exec(t, b, "CREATE TABLE x (v int)")
	if got := exec(t, b, "SELECT count(*) FROM x")[0].Rows[0][0]; string(got) != "0" {
		t.Fatalf("second database sees %s rows of the first", got)
	}
	if first := pg.Server(t); pg.Server(t) != first {
		t.Fatal("Shared started a second server")
	}
}

// A server of a test's own survives a kill and a clean stop with its data,
// on the same URL.
func TestKillAndRestartKeepData(t *testing.T) {
	s := pgtest.New(t)
	ctx := context.Background()
	url, err := s.CreateDB(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, url, "CREATE TABLE x (v int); INSERT INTO x VALUES (7)")
	pid := s.Pid()
	if pid == 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("Pid() = %d, not a live process", pid)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || s.Pid() != 0 {
		t.Fatalf("running after Kill (Pid() = %d)", s.Pid())
	}
	if c, err := pgconn.Connect(ctx, url); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a killed server")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := exec(t, url, "SELECT v FROM x")[0].Rows[0][0]; string(got) != "7" {
		t.Fatalf("after a kill: %s, want 7", got)
	}
	if err := s.Restart(); err != nil { // a clean stop, then start
		t.Fatal(err)
	}
	if got := exec(t, url, "SELECT v FROM x")[0].Rows[0][0]; string(got) != "7" {
		t.Fatalf("after a restart: %s, want 7", got)
	}
}

// A cluster directory given to Start is reused by the next Start.
func TestStartReusesDirectory(t *testing.T) {
	// Not t.TempDir: its parent is private to root, and the server may run
	// as another user, who must be able to enter it.
	parent, err := os.MkdirTemp("", "pgtest-reuse-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "pg")
	s, err := pgtest.Start(dir)
	if err != nil {
		if err == pgtest.ErrNoPostgres {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	url, err := s.CreateDB(context.Background(), "keep")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, url, "CREATE TABLE x (v int)")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := pgtest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	exec(t, s2.URL("keep"), "SELECT v FROM x")
}
