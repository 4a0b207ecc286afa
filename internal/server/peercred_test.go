package server

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPeerListenerRefusesOtherUsers runs the admin socket's check with a
// rule that refuses the test's own uid, since a test cannot connect as
// another user: the refused connection is closed unread and logged, and
// the next admitted one is served.
func TestPeerListenerRefusesOtherUsers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peer credentials are read on Linux only")
	}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var admit atomic.Bool
	var logs bytes.Buffer
	pl := &peerListener{Listener: ln, allow: func(uint32) bool { return admit.Load() },
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()

	refused, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	_ = refused.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := refused.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("refused peer read %d bytes, err %v; want the connection closed", n, err)
	}

	admit.Store(true)
	ok, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("admitted peer was not accepted after a refusal")
	}
	// The refusal was logged before the accept loop went on to the
	// admitted connection, which the channel orders before this read.
	if got := logs.String(); !strings.Contains(got, "refused a connection from another user") {
		t.Errorf("refusal not logged: %q", got)
	}
}

// TestSameUser admits the server's user and root, who can read the data
// directory anyway, and no one else.
func TestSameUser(t *testing.T) {
	if !sameUser(0) {
		t.Error("root refused")
	}
	if !sameUser(uint32(os.Geteuid())) {
		t.Error("the server's own user refused")
	}
	if os.Geteuid() != 65534 && sameUser(65534) {
		t.Error("uid 65534 admitted")
	}
}
