package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/pgtest"
)

const clusterTTL = "3s"

// startReplica runs `svc serve` as a replica of the cluster on db.
func startReplica(t *testing.T, db, dir string) *server {
	t.Helper()
	return startServerEnv(t, dir, []string{"SVC_STORE_URL=" + db}, "--lease-ttl", clusterTTL, "--rental-providers", "none")
}

// clusterDB is a fresh database on a throwaway PostgreSQL.
func clusterDB(t *testing.T) string {
	t.Helper()
	pg := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pg.CreateDB(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// startPair starts two replicas on a fresh database: a, which leads, and
// b, standing by.
func startPair(t *testing.T) (a, b *server, db string) {
	t.Helper()
	db = clusterDB(t)
	a = startReplica(t, db, "")
	a.waitLog("cluster: leading", 15*time.Second)
	b = startReplica(t, db, "")
	b.waitLog("cluster: standing by", 15*time.Second)
	return a, b, db
}

// dbConn is a connection of the test's own to the cluster's database, and
// a context bounding what the test asks of it; both end with the test.
func dbConn(t *testing.T, db string) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, conn
}

// eventually polls ok every 50 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startRentalPair starts two replicas on a fresh database: leader, which
// runs the local rental provider and leads, and other, standing by; key
// is the admin key of an organisation that can pay.
func startRentalPair(t *testing.T) (leader, other *server, key string) {
	t.Helper()
	db := clusterDB(t)
	leader, key = rentalGatewayEnv(t, t.TempDir(), []string{"SVC_STORE_URL=" + db}, "--lease-ttl", clusterTTL)
	leader.waitLog("cluster: leading", 15*time.Second)
	other = startReplica(t, db, "")
	other.waitLog("cluster: standing by", 15*time.Second)
	return leader, other, key
}

// startTrio starts three replicas on a fresh database; a leads.
func startTrio(t *testing.T) (a, b, c *server, db string) {
	t.Helper()
	a, b, db = startPair(t)
	c = startReplica(t, db, "")
	c.waitLog("cluster: standing by", 15*time.Second)
	return a, b, c, db
}

// Three replicas on one PostgreSQL all serve. Each organisation is homed
// where its first worker connected; a later worker of it that dials
// another replica is sent to the home, so one replica alone grants its
// slots; a request sent to any replica is served by the home, with one
// usage row under the id the client saw. Killed, a home (here also the
// leader) is replaced within the lease: its workers' reconnections home
// the organisation on a live replica, and the gap is measured; the other
// organisation is served throughout.
func TestClusterHomes(t *testing.T) {
	a, b, c, db := startTrio(t)
	key := a.adminKey()
	acmeKey, acmeTokens := secondOrg(t, b)

	for _, r := range []*server{a, b, c} {
		if got := r.do("GET", "/readyz", ""); got.Status != http.StatusOK {
			t.Fatalf("/readyz of %s = %d %s", r.URL, got.Status, got.Body)
		}
	}
	// default's first worker makes a its home; acme's makes b its home.
	startWorker(t, a.URL, a.tokenFile(), "d1", "--engine", "sim=ttft=0")
	startWorker(t, b.URL, acmeTokens, "x1", "--engine", "sim=ttft=0")
	// default's second worker dials c, a load balancer's pick, and is sent
	// to a; it returns to c when a is gone.
	w2 := launchWorker(t, c.URL, a.tokenFile(), "d2", "--engine", "sim=ttft=0")
	if rec := w2.waitLog("connected to the gateway", 15*time.Second); rec["gateway"] != a.URL {
		t.Fatalf("default's second worker connected to %v, want its home %s", rec["gateway"], a.URL)
	}
	// Every replica sees default's two workers: at its home, each once.
	for _, r := range []*server{a, b, c} {
		ws := r.workers(key)
		if len(ws) != 2 {
			t.Fatalf("default's workers seen through %s: %v", r.URL, ws)
		}
	}

	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	served := map[string][]string{} // org -> request ids
	for _, r := range []*server{a, b, c} {
		for org, k := range map[string]string{"default": key, "acme": acmeKey} {
			got := r.do("POST", "/v1/chat/completions", chat, bearer(k))
			want := map[string]string{"default": "d", "acme": "x"}[org]
			if got.Status != http.StatusOK || !strings.HasPrefix(got.Header.Get("X-Worker-Name"), want) {
				t.Fatalf("%s's chat through %s = %d %v %s", org, r.URL, got.Status, got.Header, got.Body)
			}
			served[org] = append(served[org], got.Header.Get("X-Request-Id"))
		}
		stream := r.do("POST", "/v1/chat/completions", `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, bearer(acmeKey))
		if data := sseData(stream.Body); stream.Status != http.StatusOK || len(data) < 2 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("acme's stream through %s = %d %s", r.URL, stream.Status, stream.Body)
		}
		served["acme"] = append(served["acme"], stream.Header.Get("X-Request-Id"))
	}
	// One row per request, under the id the client saw, whichever replica
	// the usage is read through.
	for org, k := range map[string]string{"default": key, "acme": acmeKey} {
		logs := c.do("GET", "/api/v1/usage/logs?limit=50", "", bearer(k))
		var rows []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(logs.Body, &rows); err != nil {
			t.Fatalf("%v\n%s", err, logs.Body)
		}
		ids := map[string]int{}
		for _, row := range rows {
			ids[row.ID]++
		}
		if len(rows) != len(served[org]) {
			t.Fatalf("%s: %d rows for %d requests:\n%s", org, len(rows), len(served[org]), logs.Body)
		}
		for _, id := range served[org] {
			if ids[id] != 1 {
				t.Fatalf("%s: request %s has %d rows", org, id, ids[id])
			}
		}
	}
	out, errOut, code := svc(t, []string{"SVC_STORE_URL=" + db}, "cluster", "status", "--json")
	if code != 0 {
		t.Fatalf("svc cluster status: %d %s", code, errOut)
	}
	var st api.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	homes := map[string]int{}
	for _, r := range st.Replicas {
		homes[r.AdvertiseURL] = r.Homes
	}
	if len(st.Homes) != 2 || homes[a.URL] != 1 || homes[b.URL] != 1 || homes[c.URL] != 0 {
		t.Fatalf("cluster status: %s", out)
	}

	// The leader and default's home dies.
	killed := time.Now()
	_ = a.Kill()
	var gap time.Duration
	var refused []string // the ids of default's 503s
	eventually(t, 20*time.Second, "default served again after its home died", func() bool {
		r := b.do("POST", "/v1/chat/completions", chat, bearer(key))
		if r.Status == http.StatusOK {
			gap = time.Since(killed)
			return true
		}
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Fatalf("default's chat while its home is replaced = %d %v %s", r.Status, r.Header, r.Body)
		}
		// One forwarded to the home as it died was the home's to record,
		// and went with it, as rows in its last commit window do; the
		// front records those it answered itself.
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(r.Body, &body) == nil && body.Error.Code != api.CodeWorkerLost {
			refused = append(refused, r.Header.Get("X-Request-Id"))
		}
		// Meanwhile acme, homed on b, is served throughout.
		if r := c.do("POST", "/v1/chat/completions", chat, bearer(acmeKey)); r.Status != http.StatusOK {
			t.Fatalf("acme's chat while default's home is replaced = %d %s", r.Status, r.Body)
		}
		return false
	})
	ttl, _ := time.ParseDuration(clusterTTL)
	t.Logf("re-homing: default served again %s after its home was killed (lease TTL %s)", gap.Round(10*time.Millisecond), ttl)
	if gap > ttl+5*time.Second {
		t.Errorf("default was served again %s after its home died, want within the TTL and 5 s", gap)
	}
	// Each 503 the front or the new home answered meanwhile has its one
	// usage row with its status, written by the replica that answered it.
	if len(refused) == 0 {
		t.Fatal("no 503 while default's home was replaced")
	}
	eventually(t, 10*time.Second, "a usage row for each 503 while default's home was replaced", func() bool {
		logs := c.do("GET", "/api/v1/usage/logs?limit=1000", "", bearer(key))
		var rows []struct {
			ID     string `json:"id"`
			Status int    `json:"status_code"`
		}
		if logs.Status != http.StatusOK || json.Unmarshal(logs.Body, &rows) != nil {
			return false
		}
		got := map[string][]int{}
		for _, row := range rows {
			got[row.ID] = append(got[row.ID], row.Status)
		}
		for _, id := range refused {
			if st := got[id]; len(st) != 1 || st[0] != http.StatusServiceUnavailable {
				t.Logf("request %s: rows with statuses %v", id, st)
				return false
			}
		}
		return true
	})
	// default's worker that came back (d1 dials only the dead home) has
	// the disconnect the dead home could not record, written by the new
	// home between the two connects.
	for _, w := range c.workers(key) {
		if w["status"] == "offline" {
			continue // d1, below
		}
		query := "?worker_id=" + w["worker_id"].(string)
		eventually(t, 10*time.Second, fmt.Sprintf("%s's disconnect between its two connects", w["worker_name"]), func() bool {
			return linkEvents(c.events(key, query)) == "connected disconnected connected"
		})
	}
	// b could not reach the dead home meanwhile: its /readyz and its
	// registration say so, for a while.
	if r := b.do("GET", "/readyz", ""); r.Status != http.StatusOK || !strings.Contains(string(r.Body), a.URL) {
		t.Fatalf("/readyz of b after its peer died = %d %s", r.Status, r.Body)
	}
	eventually(t, 5*time.Second, "svc cluster status naming the peer b could not reach", func() bool {
		out, _, code := svc(t, []string{"SVC_STORE_URL=" + db}, "cluster", "status", "--json")
		var st api.ClusterStatus
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		for _, r := range st.Replicas {
			if r.AdvertiseURL == b.URL && slices.Contains(r.UnreachablePeers, a.URL) {
				return true
			}
		}
		return false
	})
	// Another replica takes over the cluster's once-only duties.
	eventually(t, 15*time.Second, "a new leader", func() bool {
		return strings.Contains(b.Log().String(), "cluster: leading") || strings.Contains(c.Log().String(), "cluster: leading")
	})
	// d1, which dials only the dead home, is listed by the new home
	// offline, and gets its disconnect once the worker grace has passed.
	var d1 map[string]any
	eventually(t, 10*time.Second, "d1 listed offline by the new home", func() bool {
		for _, w := range c.workers(key) {
			if w["worker_name"] == "d1" && w["status"] == "offline" {
				d1 = w
				return true
			}
		}
		return false
	})
	eventually(t, 30*time.Second, "d1's disconnect after the grace", func() bool {
		return linkEvents(c.events(key, "?worker_id="+d1["worker_id"].(string))) == "disconnected connected"
	})
}

// A single host's store moves into a cluster's database whole: the counts
// agree, a second run changes nothing, and a replica started on it serves
// the same keys and reports the same usage.
func TestClusterMigrate(t *testing.T) {
	db := clusterDB(t)

	single := startServer(t, "", "--rental-providers", "none")
	key := single.adminKey()
	startWorker(t, single.URL, single.tokenFile(), "mw1", "--engine", "sim=ttft=0")
	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	for range 5 {
		if r := single.do("POST", "/v1/chat/completions", chat, bearer(key)); r.Status != http.StatusOK {
			t.Fatalf("chat = %d %s", r.Status, r.Body)
		}
	}
	before := single.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key)).JSON(t)
	if err := single.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("svc serve exited with %v", err)
	}

	for run := range 2 {
		out, errOut, code := svc(t, []string{"SVC_STORE_URL=" + db}, "cluster", "migrate", "--data", single.Data, "--json")
		if code != 0 {
			t.Fatalf("migrate run %d: exit %d\n%s\n%s", run+1, code, out, errOut)
		}
		var counts []struct {
			Kind             string
			Source, Database int
		}
		if err := json.Unmarshal([]byte(out), &counts); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got := map[string]int{}
		for _, c := range counts {
			if c.Source != c.Database {
				t.Errorf("run %d: %s: %d in the data directory, %d in the database", run+1, c.Kind, c.Source, c.Database)
			}
			got[c.Kind] = c.Database
		}
		if got["usage rows"] != 5 || got["organisations"] != 1 || got["api keys"] != 1 {
			t.Fatalf("run %d: counts %v", run+1, got)
		}
	}

	r := startReplica(t, db, "")
	r.waitLog("cluster: leading", 15*time.Second)
	after := r.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key))
	if after.Status != http.StatusOK {
		t.Fatalf("usage on the replica = %d %s", after.Status, after.Body)
	}
	for _, k := range []string{"requests", "succeeded", "prompt_tokens", "completion_tokens", "total_tokens"} {
		if a, b := before[k], after.JSON(t)[k]; a != b {
			t.Errorf("%s: %v on the single host, %v on the cluster", k, a, b)
		}
	}
}

// What a replica forwards to an organisation's home ends as on a single
// host: a client that goes away mid-request frees the home's worker slot
// and leaves a 499 row, and a stream whose home dies ends with the spec's
// error frame and [DONE], never as if it were complete.
func TestClusterForwardingEnds(t *testing.T) {
	a, b, _ := startPair(t)
	key := a.adminKey()
	w := launchWorker(t, a.URL, a.tokenFile(), "slow", "--engine", "sim=tps=20,ttft=0")
	w.waitLog("connected to the gateway", 15*time.Second)

	// A unary request the client abandons.
	reqCtx, abandon := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(reqCtx, "POST", b.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-chat","messages":[{"role":"user","content":"long"}],"max_tokens":100000}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	go func() {
		time.Sleep(time.Second)
		abandon()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the abandoned request was answered %s", resp.Status)
	}
	var logs, inflight reply
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs = a.do("GET", "/api/v1/usage/logs?limit=10", "", bearer(key))
		inflight = a.do("GET", "/api/v1/usage/inflight", "", bearer(key))
		if strings.Contains(string(logs.Body), `"status_code":499`) && strings.TrimSpace(string(inflight.Body)) == "[]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 499 row for the abandoned request, or its slot still held:\n%s\n%s", logs.Body, inflight.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A stream whose home is killed once it has begun.
	sreq, _ := http.NewRequest("POST", b.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"long"}],"max_tokens":100000}`))
	sreq.Header.Set("Authorization", "Bearer "+key)
	sreq.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(sreq)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream through the standby: %v %v", resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	_ = a.Kill()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the stream was cut rather than ended: %v", err)
	}
	data := sseData(rest)
	if len(data) < 2 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], api.CodeWorkerLost) {
		t.Fatalf("the stream ended with %q, want a worker_lost error frame and [DONE]", data[max(0, len(data)-2):])
	}
}

// A rental runs at its organisation's home, which here does not lead:
// asked for through the leader, it is placed by the home, starts billing
// when its worker connects there, is ready once the worker serves the
// model it installed, and is stopped there, its worker's link closed.
func TestClusterRentalAtTheHome(t *testing.T) {
	db := clusterDB(t)
	env := []string{"SVC_STORE_URL=" + db}
	leader, key := rentalGatewayEnv(t, t.TempDir(), env, "--lease-ttl", clusterTTL)
	leader.waitLog("cluster: leading", 15*time.Second)
	home := startServerEnv(t, t.TempDir(), env, "--lease-ttl", clusterTTL, "--local-boot-step", "150ms", "--rental-tick", "100ms")
	killRentalWorkers(t, home.Data)
	home.waitLog("cluster: standing by", 15*time.Second)
	// The organisation's first worker makes home its home.
	startWorker(t, home.URL, leader.tokenFile(), "own-box", "--engine", "sim=tps=0,ttft=0")

	r, v := rent(t, leader, key, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","models":["qwen3-8b-q4"],"name":"far-rental"}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("rent through the leader = %d %s", r.Status, r.Body)
	}
	v, _, _ = leader.waitRental(key, v.ID, ready)
	// The home placed the machine, and its worker is linked there, with
	// the organisation's own.
	if ms, _ := filepath.Glob(filepath.Join(home.Data, "rentals", "local", "*", "pid")); len(ms) != 1 {
		t.Fatalf("machines the home placed: %v", ms)
	}
	if ms, _ := filepath.Glob(filepath.Join(leader.Data, "rentals", "local", "*", "pid")); len(ms) != 0 {
		t.Fatalf("machines the leader placed: %v", ms)
	}
	if ws := home.workers(key); len(ws) != 2 {
		t.Fatalf("workers at the home: %v", ws)
	}
	if r := leader.do("DELETE", "/api/v1/compute/instances/"+v.ID, "", bearer(key)); r.Status != http.StatusOK {
		t.Fatalf("stop through the leader = %d %s", r.Status, r.Body)
	}
	eventually(t, 15*time.Second, "the rental's worker gone from the home", func() bool {
		for _, w := range home.workers(key) {
			if w["worker_name"] == "far-rental" && w["status"] != "offline" {
				return false
			}
		}
		return true
	})
	billedRight(t, leader.rental(key, v.ID))
}

// A replica told to stop releases its homes and sends its workers away:
// an idle one reconnects through its configured gateway at once and
// serves there while the stopping replica still finishes a long stream
// on another, which ends whole.
func TestClusterDrainSendsWorkersAway(t *testing.T) {
	a, b, _ := startPair(t)
	key := a.adminKey()
	startWorker(t, a.URL, a.tokenFile(), "busy", "--engine", "sim=tps=20,ttft=0")
	idle := launchWorker(t, b.URL, a.tokenFile(), "idle", "--engine", "sim=ttft=0")
	if rec := idle.waitLog("connected to the gateway", 15*time.Second); rec["gateway"] != a.URL {
		t.Fatalf("the idle worker connected to %v, want the home %s", rec["gateway"], a.URL)
	}
	var busyID string
	for _, w := range a.workers(key) {
		if w["worker_name"] == "busy" {
			busyID, _ = w["worker_id"].(string)
		}
	}
	if busyID == "" {
		t.Fatal("no worker busy")
	}
	req, _ := http.NewRequest("POST", a.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"long"}],"max_tokens":100}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Svc-Worker-Id", busyID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the long stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// A connection made to the stopping replica now is answered at once,
	// 503, so that a load balancer moves on; it is not left queued until
	// the replica exits.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	for deadline := time.Now().Add(5 * time.Second); ; {
		r, err := fresh.Get(a.URL + "/readyz")
		if err != nil {
			t.Fatalf("a new connection to the stopping replica, its stream still running: %v", err)
		}
		r.Body.Close()
		if r.StatusCode == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopping replica answers a new connection %d", r.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	idle.waitLog("reconnecting through the configured gateway", 10*time.Second)
	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	eventually(t, 10*time.Second, "the organisation served at its new home during the drain", func() bool {
		r := b.do("POST", "/v1/chat/completions", chat, bearer(key))
		return r.Status == http.StatusOK && r.Header.Get("X-Worker-Name") == "idle"
	})
	t.Logf("the organisation served at its new home %s after the SIGTERM", time.Since(stopped).Round(time.Millisecond))
	if a.wait(0) {
		t.Fatal("the stopping replica exited before its stream ended")
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the long stream was cut: %v", err)
	}
	if data := sseData(rest); len(data) < 2 || data[len(data)-1] != "[DONE]" || strings.Contains(strings.Join(data, "\n"), `"error"`) {
		t.Fatalf("the long stream ended with %q", data[max(0, len(data)-2):])
	}
	if !a.wait(15 * time.Second) {
		t.Fatal("the stopping replica did not exit after its stream")
	}
}

// Workers of an organisation without a home dial every replica at once:
// the replicas race to claim it, one wins, and every worker ends linked
// to that one, so one replica alone grants the organisation's slots.
func TestClusterOneHomeUnderRace(t *testing.T) {
	a, b, c, _ := startTrio(t)
	_, tokens := secondOrg(t, a)
	replicas := []*server{a, b, c}
	var ws []*workerProc
	for i := range 6 {
		ws = append(ws, launchWorker(t, replicas[i%3].URL, tokens, fmt.Sprintf("race-%d", i), "--engine", "sim=ttft=0"))
	}
	home := ""
	for _, w := range ws {
		rec := w.waitLog("connected to the gateway", 20*time.Second)
		got, _ := rec["gateway"].(string)
		if home == "" {
			home = got
		}
		if got != home {
			t.Fatalf("workers linked to %s and %s", home, got)
		}
	}
	for _, r := range replicas {
		h := r.do("GET", "/healthz", "").JSON(t)["cluster"].(map[string]any)
		if n := h["homes"].(float64); (r.URL == home) != (n == 1) {
			t.Fatalf("%s is the home of %v organisations; the workers linked to %s", r.URL, n, home)
		}
	}
}

// peerStream sends one HTTP/1.1 request on a replica link, as a peer
// forwarding it under id, and returns the answer.
func peerStream(t *testing.T, sess *link.Session, id, req string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := sess.Open(ctx, peer.AppendRequest(nil, id, []byte("192.0.2.7:4242")), []byte(req))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			t.Fatalf("the stream failed after %q: %v", body.String(), err)
		}
		if f.Type == link.TypeEnd {
			break
		}
		body.Write(f.Payload)
	}
	resp, err := http.ReadResponse(bufio.NewReader(&body), nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, body.String())
	}
	return resp
}

// dialPeer opens a replica link to the replica at base, whose id is to,
// proving secret, or says why the handshake failed.
func dialPeer(t *testing.T, base, to, secret string) (*link.Session, error) {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+peer.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := link.WebSocket(ws, link.DefaultKeepalive())
	sess := link.NewSession(link.Options{Role: link.Gateway})
	if _, err := peer.Dial(conn, []byte(secret), peer.Hello{From: "e2e-peer", To: to, SessionID: "e2e"}, sess.RecvState); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if _, err := sess.Attach(conn, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(nil) })
	return sess, nil
}

// Requests are forwarded only on replica links, whose peers prove they
// hold the cluster's secret: a link with another secret is refused, and
// the forwarding header of old means nothing. A request a peer forwards
// is served by the organisation's home under the peer's id, and refused
// by any other replica before it runs (503 not_home), never forwarded
// again.
func TestClusterForwardedRequestRules(t *testing.T) {
	a, b, db := startPair(t)
	key := a.adminKey()
	startWorker(t, a.URL, a.tokenFile(), "fw1", "--engine", "sim=ttft=0")
	ctx, conn := dbConn(t, db)
	var secret string
	if err := conn.QueryRow(ctx, "SELECT secret FROM svc_cluster").Scan(&secret); err != nil {
		t.Fatal(err)
	}
	replicaID := func(s *server) string {
		return s.do("GET", "/healthz", "").JSON(t)["cluster"].(map[string]any)["replica_id"].(string)
	}
	aID, bID := replicaID(a), replicaID(b)
	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	request := func(host string) string {
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\nConnection: close\r\n\r\n%s", host, key, len(chat), chat)
	}

	// Another secret: refused before anything crosses.
	if _, err := dialPeer(t, a.URL, aID, "not the secret"); !errors.Is(err, peer.ErrProof) {
		t.Fatalf("a link with another secret: %v, want the home's proof refused", err)
	}
	// A link meant for another replica: refused.
	if _, err := dialPeer(t, a.URL, bID, secret); !errors.Is(err, peer.ErrRefused) {
		t.Fatalf("a link to a meant for b: %v", err)
	}
	// At the home: served under the forwarded id.
	toA, err := dialPeer(t, a.URL, aID, secret)
	if err != nil {
		t.Fatal(err)
	}
	r := peerStream(t, toA, "fwd-at-home", request("a"))
	if r.StatusCode != http.StatusOK || r.Header.Get("X-Request-Id") != "fwd-at-home" {
		t.Fatalf("a forwarded request at the home = %d %v", r.StatusCode, r.Header)
	}
	// Elsewhere: refused before it runs, not forwarded on.
	toB, err := dialPeer(t, b.URL, bID, secret)
	if err != nil {
		t.Fatal(err)
	}
	r = peerStream(t, toB, "fwd-elsewhere", request("b"))
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("X-Svc-Error-Code") != api.CodeNotHome ||
		r.Header.Get("X-Svc-Not-Home") != "1" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a forwarded request at a replica not the home = %d %v", r.StatusCode, r.Header)
	}
	// The forwarding header of old, even signed with the secret: an
	// ordinary request, forwarded to the home under an id of b's own.
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("forged"))
	got := b.do("POST", "/v1/chat/completions", chat, bearer(key), header{"X-Svc-Forward", "forged." + hex.EncodeToString(m.Sum(nil))})
	if got.Status != http.StatusOK || got.Header.Get("X-Request-Id") == "forged" || got.Header.Get("X-Worker-Name") != "fw1" {
		t.Fatalf("a request with the old forwarding header = %d %v %s", got.Status, got.Header, got.Body)
	}
	// A row for what ran, under its id; none for the refusal, which the
	// home never saw.
	logs := a.do("GET", "/api/v1/usage/logs?limit=50", "", bearer(key))
	if !strings.Contains(string(logs.Body), `"id":"fwd-at-home"`) || strings.Contains(string(logs.Body), `"id":"fwd-elsewhere"`) ||
		!strings.Contains(string(logs.Body), `"id":"`+got.Header.Get("X-Request-Id")+`"`) {
		t.Fatalf("usage rows:\n%s", logs.Body)
	}
}

// An organisation whose home_region names a region is homed on a replica
// there: its worker, dialling a replica of another region, is sent on,
// and its requests reaching that other replica are forwarded there. An
// organisation already homed elsewhere when it asks for a region moves:
// its home gives it up and sends its workers away, and they land in the
// region.
func TestClusterHomeRegion(t *testing.T) {
	db := clusterDB(t)
	env := []string{"SVC_STORE_URL=" + db}
	us := startServerEnv(t, "", env, "--lease-ttl", clusterTTL, "--rental-providers", "none", "--region", "us-east")
	us.waitLog("cluster: leading", 15*time.Second)
	eu := startServerEnv(t, "", env, "--lease-ttl", clusterTTL, "--rental-providers", "none", "--region", "eu-west")
	eu.waitLog("cluster: standing by", 15*time.Second)
	key := us.adminKey()
	acmeKey, acmeTokens := secondOrg(t, us)
	if r := us.console("PATCH", "/api/v1/console/orgs/acme", `{"home_region":"eu-west"}`); r.Status != http.StatusOK {
		t.Fatalf("set acme's home_region: %d %s", r.Status, r.Body)
	}
	if r := us.console("PATCH", "/api/v1/console/orgs/acme", `{"home_region":"EU West"}`); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("an invalid home_region: %d %s", r.Status, r.Body)
	}
	// The setting reaches eu through the database; until then eu would
	// home acme where its worker lands, which is eu anyway.
	x1 := launchWorker(t, us.URL, acmeTokens, "x1", "--engine", "sim=ttft=0")
	if rec := x1.waitLog("connected to the gateway", 15*time.Second); rec["gateway"] != eu.URL {
		t.Fatalf("acme's worker connected to %v, want %s in its home_region", rec["gateway"], eu.URL)
	}
	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	for _, r := range []*server{us, eu} {
		if got := r.do("POST", "/v1/chat/completions", chat, bearer(acmeKey)); got.Status != http.StatusOK || got.Header.Get("X-Worker-Name") != "x1" {
			t.Fatalf("acme's chat through %s = %d %v %s", r.URL, got.Status, got.Header, got.Body)
		}
	}

	// default is homed in us by its worker, then asks for eu-west.
	d1 := startWorker(t, us.URL, us.tokenFile(), "d1", "--engine", "sim=ttft=0")
	if got := eu.do("POST", "/v1/chat/completions", chat, bearer(key)); got.Status != http.StatusOK {
		t.Fatalf("default's chat through eu = %d %s", got.Status, got.Body)
	}
	if r := us.console("PATCH", "/api/v1/console/orgs/default", `{"home_region":"eu-west"}`); r.Status != http.StatusOK {
		t.Fatalf("set default's home_region: %d %s", r.Status, r.Body)
	}
	moved := time.Now()
	eventually(t, 20*time.Second, "default's worker in eu-west", func() bool {
		return strings.Contains(d1.Log().String(), `"msg":"connected to the gateway","gateway":"`+eu.URL+`"`)
	})
	t.Logf("default moved to its home_region %s after the setting changed", time.Since(moved).Round(10*time.Millisecond))
	eventually(t, 10*time.Second, "default served in eu-west through us", func() bool {
		got := us.do("POST", "/v1/chat/completions", chat, bearer(key))
		return got.Status == http.StatusOK && got.Header.Get("X-Worker-Name") == "d1"
	})
	out, errOut, code := svc(t, env, "cluster", "status", "--json")
	if code != 0 {
		t.Fatalf("svc cluster status: %d %s", code, errOut)
	}
	var st api.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	regions := map[string]string{}
	for _, r := range st.Replicas {
		regions[r.ID] = r.Region
	}
	for _, h := range st.Homes {
		if !h.Alive || regions[h.ReplicaID] != "eu-west" || h.Misplaced {
			t.Fatalf("home %+v outside eu-west: %s", h, out)
		}
	}
	if len(st.Homes) != 2 {
		t.Fatalf("homes: %s", out)
	}
}

// workerWall stands in front of a replica on a network where workers
// cannot reach it but replicas can: it drops worker link requests that
// did not come through a replica's splice, and passes everything else to
// the replica.
type workerWall struct {
	ln      net.Listener
	backend atomic.Pointer[string]
	dropped atomic.Int64
	spliced atomic.Int64
	wg      sync.WaitGroup
}

func newWorkerWall(t *testing.T) *workerWall {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &workerWall{ln: ln}
	w.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.wg.Go(func() { w.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		w.wg.Wait()
	})
	return w
}

func (w *workerWall) URL() string { return "http://" + w.ln.Addr().String() }

func (w *workerWall) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.URL.Path == "/api/v1/workers/connect" {
		if req.Header.Get("X-Svc-Spliced") == "" {
			w.dropped.Add(1)
			return
		}
		w.spliced.Add(1)
	}
	addr := w.backend.Load()
	if addr == nil {
		return
	}
	up, err := net.Dial("tcp", *addr)
	if err != nil {
		return
	}
	defer up.Close()
	if err := req.Write(up); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, br)
		_ = up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	<-done
}

// A worker that cannot reach its organisation's home, only the replica it
// dialled (a network that lets workers reach only the load balancer), is
// redirected, finds the home unreachable, and asks again for its link to
// be spliced through: the home serves it as its own, and requests through
// either replica reach it.
func TestClusterSplicedWorker(t *testing.T) {
	db := clusterDB(t)
	env := []string{"SVC_STORE_URL=" + db}
	wall := newWorkerWall(t)
	a := startServerEnv(t, "", env, "--lease-ttl", clusterTTL, "--rental-providers", "none", "--advertise-url", wall.URL())
	a.waitLog("cluster: leading", 15*time.Second)
	backend := strings.TrimPrefix(a.URL, "http://")
	wall.backend.Store(&backend)
	b := startReplica(t, db, "")
	b.waitLog("cluster: standing by", 15*time.Second)
	key := a.adminKey()
	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	// The organisation's first request makes a its home.
	if got := a.do("POST", "/v1/chat/completions", chat, bearer(key)); got.Status == http.StatusOK {
		t.Fatalf("a chat with no worker anywhere was served: %s", got.Body)
	}
	w := launchWorker(t, b.URL, a.tokenFile(), "d1", "--engine", "sim=ttft=0")
	if rec := w.waitLog("connected to the gateway", 20*time.Second); rec["gateway"] != b.URL {
		t.Fatalf("the worker connected through %v, want %s", rec["gateway"], b.URL)
	}
	if !strings.Contains(w.Log().String(), "asking it to splice") || wall.dropped.Load() == 0 || wall.spliced.Load() != 1 {
		t.Fatalf("dropped %d, spliced %d; worker log:\n%s", wall.dropped.Load(), wall.spliced.Load(), w.Log())
	}
	if ws := a.workers(key); len(ws) != 1 || ws[0]["worker_name"] != "d1" {
		t.Fatalf("workers at the home: %v", ws)
	}
	for _, r := range []*server{a, b} {
		for _, body := range []string{chat, `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":8}`} {
			got := r.do("POST", "/v1/chat/completions", body, bearer(key))
			if got.Status != http.StatusOK || got.Header.Get("X-Worker-Name") != "d1" {
				t.Fatalf("chat through %s = %d %v %s", r.URL, got.Status, got.Header, got.Body)
			}
		}
	}
}

// A live transcription reaching a replica that is not the organisation's
// home is spliced there: the session runs at the home, its request id is
// the home's usage row's, and a key offered as a subprotocol (a browser's
// way) passes through.
func TestClusterLiveTranscription(t *testing.T) {
	a, b, _ := startPair(t)
	key := a.adminKey()
	startWorker(t, a.URL, a.tokenFile(), "audio-box", append([]string{"--engine", "sim=tps=0,ttft=0,rtf=0"}, audioAliases...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := websocket.Dialer{Subprotocols: []string{"svc.live", "svc-key." + key}}
	ws, resp, err := d.DialContext(ctx, liveURL(b, "/v1", "model=stt-large-v3-turbo&sample_rate=16000"), nil)
	if err != nil {
		t.Fatalf("dial through the replica that is not the home: %v %v", err, resp)
	}
	defer ws.Close()
	started := readEvent(t, ws)
	id := resp.Header.Get("X-Request-Id")
	if started.Type != "session.started" || started.RequestID != id || ws.Subprotocol() != "svc.live" {
		t.Fatalf("first event %+v, request id %q, subprotocol %q", started, id, ws.Subprotocol())
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, pcmTone(3, 16000)); err != nil {
		t.Fatal(err)
	}
	if ev := endAndFinal(t, ws); ev.Type != "transcript.final" || ev.Duration != 3 {
		t.Fatalf("final %+v", ev)
	}
	row := b.usageRow(key, id)
	if row["audio_seconds"] != 3.0 || row["status_code"] != 200.0 || row["worker_name"] != "audio-box" {
		t.Fatalf("usage row %v", row)
	}
	// A bad key is refused at the front, before anything is spliced.
	bad := websocket.Dialer{Subprotocols: []string{"svc.live", "svc-key.svc_k_bogus"}}
	if _, resp, err := bad.DialContext(ctx, liveURL(b, "/v1", "model=stt-large-v3-turbo&sample_rate=16000"), nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad key through the front: %v %v", err, resp)
	}
}

// A replica whose database a newer release migrates past what it can use,
// while it runs, stops, saying why, rather than go on reading and writing
// rows in a shape it does not know; started again, it refuses at once.
func TestClusterReplicaStopsOnANewerSchema(t *testing.T) {
	db := clusterDB(t)
	r := startReplica(t, db, "")
	r.waitLog("cluster: leading", 15*time.Second)
	ctx, conn := dbConn(t, db)
	// What a newer release's migration leaves.
	if _, err := conn.Exec(ctx, "UPDATE svc_schema SET version = version + 1, min_reader = version + 1"); err != nil {
		t.Fatal(err)
	}
	rec := r.waitLog("cluster: this replica can no longer use the database", 15*time.Second)
	if !strings.Contains(fmt.Sprint(rec["err"]), "upgrade svc") {
		t.Errorf("the log does not say what to do: %v", rec)
	}
	if !r.wait(15 * time.Second) {
		t.Fatal("the replica did not stop")
	}
	// Status 6, which its systemd unit does not restart on.
	var ee *exec.ExitError
	if err := r.Err(); !errors.As(err, &ee) || ee.ExitCode() != 6 {
		t.Errorf("the replica stopped with %v, want exit status 6", err)
	}
	_, errOut, code := svc(t, []string{"SVC_STORE_URL=" + db}, "serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0", "--rental-providers", "none")
	if code != 6 || !strings.Contains(errOut, "newer than this build") {
		t.Fatalf("a new start: exit %d\n%s", code, errOut)
	}
}

// A worker token revoked on one replica cuts the links made with it at the
// replica that holds them, the organisation's home.
func TestClusterRevokedWorkerToken(t *testing.T) {
	db := clusterDB(t)
	a := startServerEnv(t, "", []string{"SVC_STORE_URL=" + db}, "--lease-ttl", clusterTTL, "--rental-providers", "none")
	a.waitLog("cluster: leading", 15*time.Second)
	b := startReplica(t, db, "")
	b.waitLog("cluster: standing by", 15*time.Second)
	key := a.adminKey()
	// The organisation's first request makes a its home.
	if got := a.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key)); got.Status == http.StatusOK {
		t.Fatalf("a chat with no worker anywhere was served: %s", got.Body)
	}
	tok := b.console("POST", "/api/v1/console/orgs/default/worker-tokens", `{"name":"leak"}`).JSON(t)
	file := filepath.Join(t.TempDir(), "leak.token")
	if err := os.WriteFile(file, []byte(tok["secret"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	w := launchWorker(t, a.URL, file, "l1", "--engine", "sim=ttft=0")
	w.waitLog("connected to the gateway", 20*time.Second)
	a.workerNamed(key, "l1", statusIs("healthy"))
	if r := b.console("DELETE", "/api/v1/console/orgs/default/worker-tokens/"+tok["id"].(string), ""); r.Status != http.StatusOK {
		t.Fatalf("revoke on the other replica: %d %s", r.Status, r.Body)
	}
	a.workerNamed(key, "l1", statusIs("offline"))
	if !w.wait(30 * time.Second) {
		t.Fatal("the agent of a revoked token did not stop once refused")
	}
}

// A replica started from a copy of another's data directory (replica.id
// and all) is found out: the copy drains and exits with status 7, giving
// up nothing held under the id, and the first keeps leading and its
// organisation's home.
func TestClusterCopiedDataDirectory(t *testing.T) {
	db := clusterDB(t)
	a := startReplica(t, db, "")
	a.waitLog("cluster: leading", 15*time.Second)
	key := a.adminKey()
	// The organisation's first request makes a its home.
	a.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key))
	ctx, conn := dbConn(t, db)
	var id, homeBefore string
	var epoch int64
	if err := conn.QueryRow(ctx, "SELECT replica_id, epoch FROM svc_leader").Scan(&id, &epoch); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT replica_id FROM svc_org_homes").Scan(&homeBefore); err != nil || homeBefore != id {
		t.Fatalf("the organisation's home is %q (%v), want the leader %q", homeBefore, err, id)
	}
	copied := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(a.Data, "replica.id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, "replica.id"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startReplica(t, db, copied)
	rec := b.waitLog("cluster: draining and stopping", 15*time.Second)
	if msg := fmt.Sprint(rec["err"]); !strings.Contains(msg, a.URL) || !strings.Contains(msg, "replica.id") {
		t.Errorf("the log names neither the other replica nor what to do: %v", rec)
	}
	if !b.wait(15 * time.Second) {
		t.Fatal("the copy did not stop")
	}
	var ee *exec.ExitError
	if err := b.Err(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("the copy stopped with %v, want exit status 7", err)
	}
	a.waitLog("cluster: another process registers under this replica's id", 5*time.Second)
	// The copy gave up nothing: a still leads under its epoch, and is
	// still the organisation's home.
	var leader, home string
	var now int64
	if err := conn.QueryRow(ctx, "SELECT replica_id, epoch FROM svc_leader").Scan(&leader, &now); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT replica_id FROM svc_org_homes").Scan(&home); err != nil {
		t.Fatal(err)
	}
	if leader != id || now != epoch || home != id {
		t.Fatalf("after the copy stopped: leader %s at epoch %d, home %s; want %s at %d, home unchanged", leader, now, home, id, epoch)
	}
	if got := a.do("GET", "/v1/models", "", bearer(key)); got.Status != http.StatusOK {
		t.Fatalf("the first replica after the copy stopped: %d %s", got.Status, got.Body)
	}
}

// A home frozen for longer than its registration lasts (a paused VM, a
// stopped process) is replaced while it sleeps: its worker links to the
// replica its operator gave it and is homed there. Woken, the old home
// learns from the database that it lost the organisation, and records
// nothing of what its timers made meanwhile of the link it held, nor of
// sending the worker away: the worker's history ends at its connect to
// the new home.
func TestClusterFrozenHome(t *testing.T) {
	a, b, _ := startPair(t)
	key := a.adminKey()
	// A first request through a makes it default's home.
	a.do("POST", "/v1/chat/completions", `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`, bearer(key))
	w := launchWorker(t, b.URL, a.tokenFile(), "d1", "--engine", "sim=ttft=0")
	if rec := w.waitLog("connected to the gateway", 15*time.Second); rec["gateway"] != a.URL {
		t.Fatalf("the worker connected to %v, want its home %s", rec["gateway"], a.URL)
	}
	id := a.workerNamed(key, "d1", func(w map[string]any) bool { return w["status"] == "healthy" })["worker_id"].(string)
	history := func() string {
		var types []string
		for _, e := range b.events(key, "?worker_id="+id) {
			types = append(types, e["event_type"].(string))
		}
		return strings.Join(types, " ")
	}
	// The worker's connect is in the database, for the new home to read.
	eventually(t, 10*time.Second, "the connect shipped", func() bool { return history() == api.EventConnected })
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = a.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	b.waitLog("cluster: this replica is now an organisation's home", 60*time.Second)
	b.workerNamed(key, "d1", func(w map[string]any) bool { return w["status"] == "healthy" })
	// The new home records the end the old one could not, before its
	// connect.
	want := "connected disconnected connected"
	eventually(t, 10*time.Second, "the new home's events shipped", func() bool { return history() == want })
	thaw()
	a.waitLog("cluster: another replica took an organisation's home", 15*time.Second)
	a.waitLog("cluster: sent away the workers of an organisation homed elsewhere now", 15*time.Second)
	// Whatever a recorded by then is committed to its outbox within the
	// writer's 100 ms, and shipped once the outbox reads empty.
	zero := 0
	eventually(t, 15*time.Second, "a's outbox shipped", func() bool {
		m := a.do("GET", "/metrics", "")
		if m.Status == http.StatusOK && regexp.MustCompile(`(?m)^svc_outbox_records 0$`).Match(m.Body) {
			zero++
		} else {
			zero = 0
		}
		return zero >= 5
	})
	if got := history(); got != want {
		t.Fatalf("d1's events, newest first: %s; want %s", got, want)
	}
	if ws := b.workers(key); len(ws) != 1 || ws[0]["status"] != "healthy" {
		t.Fatalf("workers after the old home woke: %v", ws)
	}
}
