package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ListenAccounts calls changed for every change of account records any
// replica writes, until ctx ends. It listens on a connection of its own,
// outside the pool, and reconnects with backoff when it is lost; changed
// is also called once it listens, after every (re)connection, since a
// change may have been missed meanwhile. changed should not block long:
// notifications queue behind it. It returns nil when ctx ends.
func (s *Store) ListenAccounts(ctx context.Context, changed func()) error {
	return s.listen(ctx, AccountsChannel, changed)
}

const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

func (s *Store) listen(ctx context.Context, channel string, changed func()) error {
	backoff := listenBackoffMin
	for {
		listening, err := s.listenOnce(ctx, channel, changed)
		if ctx.Err() != nil {
			return nil
		}
		if listening {
			backoff = listenBackoffMin
		}
		s.log.Warn("store: listening for changes", "channel", channel, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listenOnce connects, listens and delivers notifications until the
// connection fails or ctx ends; listening reports whether it got as far
// as listening.
func (s *Store) listenOnce(ctx context.Context, channel string, changed func()) (listening bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.connCfg)
	if err != nil {
		return false, fmt.Errorf("connect: %s", Redact(err.Error()))
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	changed()
	for {
		// A database that vanished without closing the connection would
		// leave the wait hanging: every Store.listenPing without a notification,
		// the connection is checked.
		waitCtx, cancel := context.WithTimeout(ctx, s.listenPing)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			changed()
		case ctx.Err() != nil || conn.IsClosed() || !errors.Is(err, context.DeadlineExceeded):
			return true, err
		default:
			pingCtx, cancel := context.WithTimeout(ctx, s.listenPing)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		}
	}
}
