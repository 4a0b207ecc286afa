package pgstore

import (
	"sync/atomic"
	"time"
)

// dbClock is the local clock corrected by the last measured offset to the
// database's clock.
type dbClock struct {
	start  time.Time
	offset atomic.Int64 // nanoseconds the database is ahead
}

func newDBClock() *dbClock { return &dbClock{start: time.Now()} }

// Now carries no monotonic reading: the offset may change between two
// readings, and their difference must include the change, as it would for
// the same instants read back from the database.
func (c *dbClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.offset.Load()))
}

func (c *dbClock) Mono() time.Duration { return time.Since(c.start) }

func (c *dbClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

func (c *dbClock) observe(dbNow, sentAt, recvAt time.Time) {
	if recvAt.Before(sentAt) {
		return
	}
	mid := sentAt.Round(0).Add(recvAt.Sub(sentAt) / 2)
	c.offset.Store(int64(dbNow.Sub(mid)))
}
