package cli

import (
	"context"
	"testing"
	"time"
)

// The wait for the replaced server's store follows its drain unless set,
// and a start grace of 0 turns the grace off rather than taking the
// fleet's default.
func TestServeRestartFlags(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		storeWait time.Duration
		grace     time.Duration
		usage     bool
	}{
		{name: "defaults", storeWait: 45 * time.Second, grace: 10 * time.Second},
		{name: "follows the drain", args: []string{"--drain-timeout", "5s"}, storeWait: 20 * time.Second, grace: 10 * time.Second},
		{name: "env", env: map[string]string{"SVC_STORE_WAIT": "2m", "SVC_START_GRACE": "3s"}, storeWait: 2 * time.Minute, grace: 3 * time.Second},
		{name: "no grace", args: []string{"--start-grace", "0"}, storeWait: 45 * time.Second, grace: -1},
		{name: "negative wait", args: []string{"--store-wait", "-1s"}, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"HOME": "/h"}
			for k, v := range tt.env {
				env[k] = v
			}
			var got ServeOptions
			cmd := NewCmdServe(testFactory(env), func(_ context.Context, o *ServeOptions) error { got = *o; return nil })
			err := run(cmd, tt.args...)
			if tt.usage {
				if exitCode(err) != exitUsage {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w := storeWait(&got); w != tt.storeWait {
				t.Errorf("store wait = %v, want %v", w, tt.storeWait)
			}
			if g := startGrace(got.StartGrace); g != tt.grace {
				t.Errorf("start grace = %v, want %v", g, tt.grace)
			}
		})
	}
}
