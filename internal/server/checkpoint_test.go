package server

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/bolt"
	"github.com/svc-dev/svc/internal/fleet"
)

// A server that crashes with its fleet unchanged since the last record
// left a stamp of when it still ran with it, a tick before the crash: the
// next server lists the workers offline since the stamp, not since the
// record, which may be a minute older.
func TestCheckpointStampsTheFleetAlive(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := fleet.New(fleet.Config{})
	connectWorker(t, ctx, f, "org", 1, api.Model{ID: "m", Capabilities: []string{api.CapChat}, Engine: "sim"})
	const every = 20 * time.Millisecond
	var wg sync.WaitGroup
	wg.Go(func() { checkpointFleet(ctx, st, f, every, slog.New(slog.DiscardHandler)) })
	// A record, then stamps only: the fleet does not change.
	time.Sleep(15 * every)
	cancel() // the crash: no record as it stops
	wg.Wait()
	crashed := time.Now()

	var listed map[string][]fleet.Remembered
	if err := st.TakeListed(&listed); err != nil {
		t.Fatal(err)
	}
	alive, err := st.TakeAlive()
	if err != nil {
		t.Fatal(err)
	}
	ws := listed["org"]
	if len(ws) != 1 || !ws[0].Checkpoint || !ws[0].Connected {
		t.Fatalf("the record %+v", ws)
	}
	recorded := ws[0].OfflineSince
	if !alive.After(recorded.Add(5*every)) || alive.After(crashed) {
		t.Fatalf("the stamp at %v, the record at %v, the crash at %v", alive, recorded, crashed)
	}
	fleet.StillConnectedAt(listed, alive)
	if got := listed["org"][0]; !got.OfflineSince.Equal(alive) || !got.LastSeen.Equal(alive) {
		t.Fatalf("offline since %v, last seen %v; want the stamp's %v", got.OfflineSince, got.LastSeen, alive)
	}
	// Taken once: the next start finds none.
	if again, err := st.TakeAlive(); err != nil || !again.IsZero() {
		t.Fatalf("the stamp again: %v %v", again, err)
	}
}
