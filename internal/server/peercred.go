package server

import (
	"log/slog"
	"net"
	"os"
)

// peerListener accepts only connections whose peer allow admits. The
// admin socket's modes already keep other users out; this holds even if
// the data directory or the socket is opened up by mistake, because any
// console request can mint an unrestricted key.
type peerListener struct {
	net.Listener
	allow func(uid uint32) bool
	log   *slog.Logger
}

// sameUser admits the server's own user and root, who can read the data
// directory anyway.
func sameUser(uid uint32) bool {
	return uid == 0 || int64(uid) == int64(os.Geteuid())
}

// Accept returns the next admitted connection; refused ones are closed
// and logged, and never end the accept loop.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, known, err := peerUID(c)
		switch {
		case err != nil:
			l.log.Warn("admin socket: refused a connection whose peer could not be identified", "err", err)
		case !known || l.allow(uid):
			return c, nil
		default:
			l.log.Warn("admin socket: refused a connection from another user", "uid", uid)
		}
		_ = c.Close()
	}
}
