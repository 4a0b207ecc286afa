//go:build !unix

package server

import (
	"log/slog"
	"net"
)

type handoverMsg struct {
	Addr string
	PID  int
}

type handover struct{}

// startHandover has nothing to serve here: passing a socket to another
// process needs unix sockets.
func startHandover(string, *net.TCPListener, func(), func(), *slog.Logger) (*handover, error) {
	return &handover{}, nil
}

func (*handover) close() {}

func (*handover) handedOver() bool { return false }

func takeOver(string, string) (*net.TCPListener, *handoverMsg, error) { return nil, nil, nil }

func activated() (*net.TCPListener, error) { return nil, nil }
