package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/client"
)

// A socket that refuses the user gets advice about the user, not about
// whether the server runs.
func TestAdminConnectHints(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &client.ConnectError{Target: "/srv/svc/admin.sock", Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}}
	}
	for _, tc := range []struct {
		err  error
		hint string
	}{
		{dial(syscall.EACCES), "admits only the user svc serve runs as"},
		{dial(syscall.ENOENT), "Is svc serve running on this host"},
		{dial(syscall.ECONNREFUSED), "Is svc serve running on this host"},
	} {
		o := &AdminOptions{Socket: "/srv/svc/admin.sock"}
		err := o.withClient(&cobra.Command{}, func(context.Context, *client.Client) error { return tc.err })
		var h *hintError
		if !errors.As(err, &h) || !strings.Contains(h.hint, tc.hint) {
			t.Errorf("%v: hint %v, want %q", tc.err, err, tc.hint)
		}
	}
}
