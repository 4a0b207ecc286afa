package pgstore

import (
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err is the database being out of reach
// (down, restarting, the network to it cut, or refusing connections)
// rather than a fault of the query: a failure the caller may retry once
// it is back, which a cluster's replica answers with 503. pgx hands some
// of these back bare (a pooled connection found closed is io.EOF), so a
// lost connection of any kind counts: the caller asks only of errors from
// code that talks to the database and nothing else.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	// pgconn's own errors about its connection (a closed or busy one)
	// say whether a retry is safe.
	var conn interface{ SafeToRetry() bool }
	switch {
	case errors.As(err, &ce), pgconn.Timeout(err), errors.As(err, &conn), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.As(err, &pe):
		// Class 08 is a connection exception; 57P01-57P03 are the server
		// shutting down or not yet accepting connections.
		return len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03")
	}
	return false
}
