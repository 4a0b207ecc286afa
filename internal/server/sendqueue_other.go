//go:build !linux

package server

import "net"

// Elsewhere the kernel's send queue is left as it is, and a stalled
// client is billed for every chunk its connection took.
func limitSendQueue(net.Conn, int) {}

func unacknowledged(net.Conn) (int, bool) { return 0, false }
