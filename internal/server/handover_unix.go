//go:build unix

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// handoverMsg goes with the socket, for the log of the server taking it.
type handoverMsg struct {
	Addr string `json:"addr"`
	PID  int    `json:"pid"`
}

// handover gives the public socket to every process of the server's user
// that connects to its unix socket: the server started to replace this
// one, which then accepts from the same queue. The socket is never closed
// between the two, so no connection is refused during a restart.
type handover struct {
	path string
	ln   net.Listener
	sock *net.TCPListener
	log  *slog.Logger
	wg   sync.WaitGroup
	stop chan struct{} // closed by close: the takers' watches end
	// mu serialises a give and a taker's exit, which both decide whether
	// the socket is this server's alone.
	mu sync.Mutex
	// holders counts the servers that took the socket and hold it still:
	// each is watched until it exits, where the system tells its pid.
	holders atomic.Int64
	// beforeGive runs before the socket is passed: what this server still
	// takes from it must stop, or it would take the new server's
	// connections. afterFail runs when no other server holds it after
	// all, the passing failed or its taker exited: the socket is this
	// server's alone again.
	beforeGive, afterFail func()
}

// startHandover serves the handover socket at path until close.
func startHandover(path string, sock *net.TCPListener, beforeGive, afterFail func(), log *slog.Logger) (*handover, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale handover socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on handover socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict handover socket: %w", err)
	}
	h := &handover{path: path, ln: &peerListener{Listener: ln, allow: sameUser, log: log}, sock: sock, log: log, stop: make(chan struct{}), beforeGive: beforeGive, afterFail: afterFail}
	h.wg.Go(h.serve)
	return h, nil
}

func (h *handover) serve() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		if err := h.give(c); err != nil {
			h.log.Warn("handover: could not pass the listening socket", "err", err)
		}
		_ = c.Close()
	}
}

func (h *handover) give(c net.Conn) (err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket")
	}
	msg, err := json.Marshal(handoverMsg{Addr: h.sock.Addr().String(), PID: os.Getpid()})
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.beforeGive != nil {
		h.beforeGive()
	}
	defer func() {
		if err != nil && h.afterFail != nil && h.holders.Load() == 0 {
			h.afterFail()
		}
	}()
	if err := uc.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	raw, err := h.sock.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix(msg, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	h.holders.Add(1)
	h.log.Info("handover: passed the listening socket to the server replacing this one", "addr", h.sock.Addr().String())
	if pid, ok := peerPID(c); ok {
		h.wg.Go(func() { h.watch(pid) })
	}
	return nil
}

// watch waits for the server of pid, which took the socket, to exit, or
// for close. A taker that exits early (its start failed after it took
// the socket) leaves the connections to this server again: it answers
// them while it drains, and takes the queue when it stops, rather than
// leave them to be reset.
func (h *handover) watch(pid int) {
	t := time.NewTicker(takerCheck)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		if processAlive(pid) {
			continue
		}
		h.log.Warn("handover: the server that took the listening socket exited; this one answers its connections again", "pid", pid)
		h.mu.Lock()
		if h.holders.Add(-1) == 0 && h.afterFail != nil {
			h.afterFail()
		}
		h.mu.Unlock()
		return
	}
}

// takerCheck is how often a taker of the socket is looked for.
const takerCheck = 250 * time.Millisecond

// processAlive reports whether a process of pid runs; one of another
// user (EPERM) does, and a zombie, which has exited but not been reaped
// (a taker started in the background of a container whose first process
// this server is), does not.
func processAlive(pid int) bool {
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// The state follows the command, which is in parentheses and may
		// hold any character, ')' included.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// handedOver reports whether a server has taken the socket and, as far as
// this one can tell, holds it still.
func (h *handover) handedOver() bool { return h.holders.Load() > 0 }

// close stops serving the handover socket and removes it.
func (h *handover) close() {
	_ = h.ln.Close()
	close(h.stop)
	h.wg.Wait()
	_ = os.Remove(h.path)
}

// takeOver asks the server serving the handover socket at path for its
// public socket. nil, with no error, when there is none to take: no
// server answers (it is an older build, or gone), or it listens on
// another address than addr.
func takeOver(path, addr string) (*net.TCPListener, *handoverMsg, error) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil, nil, nil
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	if err := uc.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 512)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("take over the listening socket: %w", err)
	}
	var msg handoverMsg
	if err := json.Unmarshal(buf[:n], &msg); err != nil {
		return nil, nil, fmt.Errorf("take over the listening socket: %w", err)
	}
	fds, err := unixRights(oob[:oobn])
	if err != nil {
		return nil, nil, fmt.Errorf("take over the listening socket: %w", err)
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return nil, nil, fmt.Errorf("take over the listening socket: %d sockets passed, want 1", len(fds))
	}
	ln, err := fileListener(fds[0], "handover")
	if err != nil {
		return nil, nil, fmt.Errorf("take over the listening socket: %w", err)
	}
	if !sameAddress(ln.Addr(), addr) {
		ln.Close()
		return nil, &msg, nil
	}
	return ln, &msg, nil
}

func unixRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}

// fileListener makes a TCP listener of fd, which it closes.
func fileListener(fd int, name string) (*net.TCPListener, error) {
	f := os.NewFile(uintptr(fd), name)
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("%s is not a TCP socket", name)
	}
	return tl, nil
}

// activated is the socket systemd passed by socket activation (LISTEN_PID
// and LISTEN_FDS, the first descriptor after stderr), or nil. systemd
// keeps it open across restarts of the service, so a restart refuses no
// connection either.
func activated() (*net.TCPListener, error) {
	if os.Getenv("LISTEN_PID") != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || n < 1 {
		return nil, nil
	}
	if n > 1 {
		return nil, fmt.Errorf("systemd passed %d sockets (LISTEN_FDS); svc serve takes one", n)
	}
	const first = 3
	ln, err := fileListener(first, "the socket systemd passed")
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	return ln, nil
}
