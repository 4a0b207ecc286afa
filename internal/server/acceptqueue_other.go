//go:build !linux

package server

import "net"

// takeAcceptQueue takes nothing here: the queue goes with the listener.
func takeAcceptQueue(net.Listener) []net.Conn { return nil }
