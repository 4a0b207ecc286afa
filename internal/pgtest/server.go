// Package pgtest runs throwaway PostgreSQL servers from the distribution's
// binaries, for tests and for the reliability harness: initdb into a
// directory, start on a free loopback port, create databases, stop, kill
// and restart. Postgres refuses to run as root, so when the process is root
// the server runs as the `postgres` system user (or `nobody`).
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoPostgres means no PostgreSQL server binary is installed.
var ErrNoPostgres = errors.New("no PostgreSQL server binary under /usr/lib/postgresql/*/bin")

// Superuser is the database role initdb creates and every URL connects as.
const Superuser = "postgres"

// BinDir is the bin directory of the newest PostgreSQL installed under
// /usr/lib/postgresql (Debian's layout), or of the one on PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestVer := "", -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v <= bestVer {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			best, bestVer = d, v
		}
	}
	if best != "" {
		return best, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNoPostgres
}

// Server is one running (or stopped) PostgreSQL server. Its methods are
// safe for concurrent use.
type Server struct {
	dir     string // holds data/, sock/ and postgres.log
	removed bool   // dir was made by Start and is removed by Close
	bin     string
	port    int
	cred    *syscall.Credential // nil when not root

	mu   sync.Mutex
	proc *process // nil while stopped
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait returned
	err  error         // cmd.Wait's result, set before done is closed
}

// Start initialises a database cluster in dir (made if missing; a new
// temporary directory, removed by Close, when dir is "") and starts a
// server on a free loopback port. A dir that already holds a cluster is
// started as it is, so a harness can keep data across processes.
func Start(dir string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if dir == "" {
		if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		s.removed = true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := s.setup(); err != nil {
		s.cleanDir()
		return nil, err
	}
	// The port is chosen free and then handed to postgres, so another
	// process may take it in between: try a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err == nil {
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		if attempt == 4 {
			s.cleanDir()
			return nil, err
		}
	}
}

func (s *Server) cleanDir() {
	if s.removed {
		_ = os.RemoveAll(s.dir)
	}
}

// setup picks the user to run as, hands it the directory and runs initdb
// unless the data directory exists.
func (s *Server) setup() error {
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			return err
		}
		s.cred = cred
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	if err := os.MkdirAll(s.sockDir(), 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(s.sockDir(), int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	cmd := exec.Command(filepath.Join(s.bin, "initdb"),
		"--pgdata", s.dataDir(), "--username", Superuser, "--auth", "trust",
		"--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions")
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		if s.cred != nil && errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("pgtest: initdb as uid %d cannot enter %s (every parent directory must be searchable by it): %w", s.cred.Uid, s.dir, err)
		}
		return fmt.Errorf("pgtest: initdb: %w: %s", err, tail(out))
	}
	return nil
}

// unprivileged is the credential of the postgres system user, or of nobody.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pgtest: running as root and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) sockDir() string { return filepath.Join(s.dir, "sock") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// Dir is the directory holding the cluster.
func (s *Server) Dir() string { return s.dir }

// Port is the TCP port the server listens on, the same across restarts.
func (s *Server) Port() int { return s.port }

// SocketDir is the directory of the server's unix socket.
func (s *Server) SocketDir() string { return s.sockDir() }

// URL is the connection URL of database db as the superuser, over TCP.
func (s *Server) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// start runs the postmaster and waits until it accepts connections.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, 2)
	cmd := exec.Command(filepath.Join(s.bin, "postgres"),
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", s.sockDir(),
		"-c", "listen_addresses=127.0.0.1",
		// Durability is the operating system's: tests never survive a
		// power cut, and a killed server loses nothing the page cache
		// holds. Commits still wait for their WAL write, so a kill loses
		// no committed transaction.
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		"-c", "shared_buffers=32MB",
		// Segments inside the data directory go with it, even after a kill.
		"-c", "dynamic_shared_memory_type=mmap",
		"-c", "log_min_messages=warning",
	)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// Its own process group, so that a terminal's signals meant for the
	// tests do not reach it; and killed with this process, so that a test
	// binary that dies leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p); err != nil {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		out, _ := os.ReadFile(s.logPath())
		if int64(len(out)) > logStart {
			out = out[logStart:]
		}
		return fmt.Errorf("pgtest: postgres on port %d: %w: %s", s.port, err, tail(out))
	}
	s.proc = p
	return nil
}

func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		attempt, stop := context.WithTimeout(ctx, time.Second)
		c, err := pgconn.Connect(attempt, s.URL("postgres"))
		stop()
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down cleanly (fast shutdown: sessions are ended,
// a checkpoint is written). Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	return s.halt(syscall.SIGINT, 30*time.Second)
}

// Kill sends SIGKILL to the postmaster and its backends, as a crash of
// the host would; Restart then runs crash recovery.
func (s *Server) Kill() error {
	return s.halt(syscall.SIGKILL, 0)
}

func (s *Server) halt(sig syscall.Signal, grace time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	pid := p.cmd.Process.Pid
	var backends []int
	if sig == syscall.SIGKILL {
		// Each backend is a session of its own, out of the postmaster's
		// group, and would otherwise outlive it until it noticed.
		backends = children(pid)
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgtest: signal postgres: %w", err)
	}
	for _, b := range backends {
		_ = syscall.Kill(b, syscall.SIGKILL)
	}
	if grace > 0 {
		select {
		case <-p.done:
			return nil
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-p.done
	return nil
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(stat[i+1:])
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(string(fields[1])); err == nil && ppid == pid {
				out = append(out, child)
			}
		}
	}
	return out
}

// Restart stops the server if it is running and starts it again on the
// same port and data.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	// A killed server's backends may take a moment to go; postgres refuses
	// to start while they hold its shared memory.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err = s.start(); err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pid is the postmaster's process id, 0 while the server is stopped. Its
// backends are its children: a harness that measures the server's CPU
// time reads them from /proc.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Running reports whether the server process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Close stops the server and, when Start made its directory, removes it.
func (s *Server) Close() error {
	err := s.Stop()
	s.cleanDir()
	return err
}

// CreateDB creates an empty database and returns its URL.
func (s *Server) CreateDB(ctx context.Context, name string) (string, error) {
	c, err := pgconn.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	defer c.Close(context.Background())
	// template0 holds nothing a test may have added to template1.
	sql := "CREATE DATABASE " + quoteIdent(name) + " TEMPLATE template0"
	if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return s.URL(name), nil
}

// DropDB drops a database, ending its sessions.
func (s *Server) DropDB(ctx context.Context, name string) error {
	c, err := pgconn.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)").ReadAll(); err != nil {
		return fmt.Errorf("pgtest: drop database %s: %w", name, err)
	}
	return nil
}

func quoteIdent(s string) string {
	return `"` + string(bytes.ReplaceAll([]byte(s), []byte(`"`), []byte(`""`))) + `"`
}

func tail(b []byte) string {
	const max = 2000
	b = bytes.TrimSpace(b)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
