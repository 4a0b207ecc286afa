package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// WaitAccepted waits until the process at the other end of c, a TCP
// connection over IPv4, has accepted it: until then the connection sits in
// the listener's queue, and a server that shuts down drops it instead of
// serving it. The kernel lists a queued connection with no inode, and an
// accepted one with its socket's.
func WaitAccepted(ctx context.Context, c net.Conn) error {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok || local.IP.To4() == nil || remote.IP.To4() == nil {
		return fmt.Errorf("harness: %v is not a TCP connection over IPv4", c.RemoteAddr())
	}
	// The server's side of c: its address first, ours second, as
	// /proc/net/tcp prints them.
	key := procAddr(remote) + " " + procAddr(local)
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	var found bool
	err := Poll(ctx, 5*time.Millisecond, func() bool {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 9 && f[1]+" "+f[2] == key {
				found = true
				return f[9] != "0"
			}
		}
		return false
	})
	if err != nil && !found {
		return fmt.Errorf("harness: the connection to %v is not in /proc/net/tcp: %w", c.RemoteAddr(), err)
	}
	if err != nil {
		return fmt.Errorf("harness: the connection to %v was not accepted: %w", c.RemoteAddr(), err)
	}
	return nil
}

// procAddr is a as /proc/net/tcp prints it: the address's four bytes as
// the host reads them as a number, then the port, in hex.
func procAddr(a *net.TCPAddr) string {
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(a.IP.To4()), a.Port)
}
