package pgstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/pgstore"
	"github.com/svc-dev/svc/internal/pgtest"
	"github.com/svc-dev/svc/internal/store"
	"github.com/svc-dev/svc/internal/usage"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { pg.Main(m) }

func open(t testing.TB, url string) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, pgstore.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func exec(t testing.TB, s *pgstore.Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestMigrationsAreIdempotent(t *testing.T) {
	url := pg.CreateDB(t)
	for range 3 {
		s := open(t, url)
		if got := s.SchemaVersion(); got != pgstore.SchemaVersion() {
			t.Fatalf("schema %d, want %d", got, pgstore.SchemaVersion())
		}
		s.Close()
	}
	s := open(t, url)
	var version, minReader, leaders int
	if err := s.Pool().QueryRow(context.Background(),
		"SELECT version, min_reader, (SELECT count(*) FROM svc_leader) FROM svc_schema").Scan(&version, &minReader, &leaders); err != nil {
		t.Fatal(err)
	}
	if version != pgstore.SchemaVersion() || minReader < 1 || minReader > version || leaders != 1 {
		t.Fatalf("version %d, min_reader %d, %d leader rows", version, minReader, leaders)
	}
}

// Replicas starting together on an empty database all migrate it without
// an error, once.
func TestConcurrentOpenOnEmptyDatabase(t *testing.T) {
	url := pg.CreateDB(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			s, err := pgstore.Open(context.Background(), pgstore.Options{URL: url})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
}

// A build refuses a schema that a newer build marked unreadable to it,
// and accepts one that is newer but still readable.
func TestRefusesNewerSchema(t *testing.T) {
	url := pg.CreateDB(t)
	s := open(t, url)
	latest := pgstore.SchemaVersion()
	exec(t, s, "UPDATE svc_schema SET version = $1, min_reader = $2", latest+1, latest)
	s2 := open(t, url)
	if got := s2.SchemaVersion(); got != latest+1 {
		t.Fatalf("schema %d, want %d", got, latest+1)
	}
	exec(t, s, "UPDATE svc_schema SET version = $1, min_reader = $1", latest+1)
	_, err := pgstore.Open(context.Background(), pgstore.Options{URL: url})
	if !errors.Is(err, pgstore.ErrSchemaTooNew) {
		t.Fatalf("opened a schema needing a newer build: %v", err)
	}
	t.Log(err)
}

func TestPasswordFile(t *testing.T) {
	url := pg.CreateDB(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		mode    os.FileMode
		content string
		wantErr string
	}{
		{"private", 0o600, "secret\n", ""},
		{"private, no newline", 0o400, "secret", ""},
		{"group readable", 0o640, "secret\n", "readable by others"},
		{"world readable", 0o644, "secret\n", "readable by others"},
		{"empty", 0o600, "\n", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			// The test server trusts every local connection, so a password
			// that was read is simply not checked.
			s, err := pgstore.Open(context.Background(), pgstore.Options{URL: url, PasswordFile: path})
			if s != nil {
				s.Close()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, secret string }{
		{"postgres://svc:hunter2@db:5432/svc?sslmode=disable", "hunter2"},
		{"host=db user=svc password=hunter2 dbname=svc", "hunter2"},
		{"host=db password = 'hunter 2' dbname=svc", "hunter 2"},
		{`failed to connect to "postgres://svc:hunter2@db/svc": refused`, "hunter2"},
	} {
		if got := pgstore.Redact(tc.in); strings.Contains(got, tc.secret) {
			t.Errorf("Redact(%q) = %q", tc.in, got)
		}
	}
	if got := pgstore.Redact("postgres://svc@db/svc"); got != "postgres://svc@db/svc" {
		t.Errorf("changed a URL without a password: %q", got)
	}
}

// A password in the URL never appears in an error.
func TestOpenErrorHidesPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := pgstore.Open(ctx, pgstore.Options{URL: "postgres://svc:hunter2@127.0.0.1:1/svc?sslmode=disable&connect_timeout=1"})
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error shows the password: %v", err)
	}
}

// Clock follows the database's clock, whatever the local one says.
func TestClockFollowsDatabase(t *testing.T) {
	s := open(t, pg.CreateDB(t))
	now := time.Now()
	// A database an hour ahead, read with a 2 s round trip.
	s.ObserveDBNow(now.Add(time.Hour+time.Second), now, now.Add(2*time.Second))
	if d := s.Clock().Now().Sub(time.Now().Add(time.Hour)); d < -time.Second || d > time.Second {
		t.Fatalf("clock off the database's by %v", d)
	}
	db, err := s.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Clock().Now().Sub(db); d < 0 || d > time.Second {
		t.Fatalf("clock %v after the database's reading", d)
	}
}

// newServer is a server of the test's own, for tests that stop it.
func newServer(t *testing.T) *pgtest.Server { return pgtest.New(t) }

// Migration 9 moves the seconds of audio that builds before schema 7
// recorded as a speech row's audio_seconds to its speech_seconds, in the
// row and in its totals, leaving a transcription's and a newer speech
// row's as they are.
func TestMigrationMovesSpeechSeconds(t *testing.T) {
	url := pg.CreateDB(t)
	s := open(t, url)
	l := newLocal(t, s, t.TempDir(), nil, nil)
	at := shipNow.Add(-time.Hour)
	for _, r := range []api.UsageRow{
		// As a build before schema 7 wrote them, then as this one does.
		{ID: "old-speech", RequestType: api.RequestSpeech, Model: "tts", AudioSeconds: ptr(1.5)},
		{ID: "heard", RequestType: api.RequestAudio, Model: "stt", AudioSeconds: ptr(4.0)},
		{ID: "new-speech", RequestType: api.RequestSpeech, Model: "tts", SpeechSeconds: ptr(2.0)},
	} {
		r.CreatedAt, r.StatusCode, r.WorkerID, r.WorkerName = at, 200, "wk_1", "box"
		l.Usage.Record("o", r)
	}
	l.sync(t)
	l.stop(t)
	exec(t, s, "UPDATE svc_schema SET version = 8")
	s.Close()

	s = open(t, url)
	if v := s.SchemaVersion(); v != pgstore.SchemaVersion() {
		t.Fatalf("schema %d", v)
	}
	l = newLocal(t, s, t.TempDir(), nil, nil)
	rows, err := l.Usage.Logs("o", store.UsageQuery{Limit: 10})
	if err != nil || len(rows) != 3 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		audio, speech := r.AudioSeconds, r.SpeechSeconds
		switch {
		case r.ID == "old-speech" && (audio != nil || speech == nil || *speech != 1.5),
			r.ID == "new-speech" && (audio != nil || speech == nil || *speech != 2),
			r.ID == "heard" && (audio == nil || *audio != 4 || speech != nil):
			t.Errorf("row %s: audio %v, speech %v", r.ID, audio, speech)
		}
	}
	sum, err := usage.Summary(l.Usage, "o", 2, shipNow)
	if err != nil || sum.AudioSeconds != 4 || sum.SpeechSeconds != 3.5 || sum.Requests != 3 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	b, err := usage.Breakdown(l.Usage, "o", 2, "requests", shipNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range b.Models {
		if m.Model == "tts" && (m.AudioSeconds != 0 || m.SpeechSeconds != 3.5) {
			t.Errorf("the speech model's totals %+v", m)
		}
	}
	if len(b.Workers) != 1 || b.Workers[0].AudioSeconds != 4 || b.Workers[0].SpeechSeconds != 3.5 {
		t.Errorf("the worker's totals %+v", b.Workers)
	}
}
