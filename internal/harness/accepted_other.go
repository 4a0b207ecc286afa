//go:build !linux

package harness

import (
	"context"
	"net"
	"time"
)

// WaitAccepted gives the process at the other end of c a moment to accept
// it: only Linux says when it has, in /proc/net/tcp.
func WaitAccepted(ctx context.Context, c net.Conn) error {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
