package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestUnreachable(t *testing.T) {
	// A real connection refused: nothing listens on the port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, refused := pgconn.Connect(ctx, fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=2", addr.Port))
	if refused == nil {
		t.Fatal("connected to nothing")
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", fmt.Errorf("list worker events: %w", refused), true},
		{"connection cut under a query", fmt.Errorf("save rental: %w", &pgconnLike{io.ErrUnexpectedEOF}), true},
		{"a pooled connection found closed", fmt.Errorf("list worker events: %w", io.ErrUnexpectedEOF), true},
		{"a connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"server shutting down", &pgconn.PgError{Code: "57P01"}, true},
		{"not yet accepting", &pgconn.PgError{Code: "57P03"}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"other", errors.New("malformed row"), false},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// pgconnLike is how pgconn wraps what a connection met during a query.
type pgconnLike struct{ err error }

func (e *pgconnLike) Error() string     { return "failed to receive message: " + e.err.Error() }
func (e *pgconnLike) Unwrap() error     { return e.err }
func (e *pgconnLike) SafeToRetry() bool { return false }
