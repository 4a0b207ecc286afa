//go:build !unix

package server

import "net"

// Elsewhere a departed client is noticed on the next failed write.
func probeable(net.Conn) bool { return false }

func peerClosed(net.Conn) bool { return false }
