//go:build !linux

package server

import "net"

// peerUID is not known here: the socket's and the directory's modes are
// the only guard.
func peerUID(net.Conn) (uid uint32, known bool, err error) { return 0, false, nil }
