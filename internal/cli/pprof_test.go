package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// The profiling endpoints' address is logged, with a warning when it is
// not loopback.
func TestPprofAddressIsLogged(t *testing.T) {
	for _, tc := range []struct{ addr, level string }{{"127.0.0.1:0", "INFO"}, {":0", "WARN"}} {
		var buf bytes.Buffer
		stop, err := servePprof(context.Background(), tc.addr, slog.New(slog.NewTextHandler(&buf, nil)))
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if out := buf.String(); !strings.Contains(out, "level="+tc.level) || !strings.Contains(out, "profiling endpoints") {
			t.Fatalf("%s logged %q, want a %s line", tc.addr, out, tc.level)
		}
	}
}
