package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/api"
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

// A cluster of two replicas on one PostgreSQL: the first leads and serves,
// the standby refuses the API naming it and sends workers there; an
// account made on the standby is usable on the leader at once; killed,
// the leader is replaced by the standby within the lease, the worker
// follows, and the usage it had served is in the database for the new
// leader to report.
func TestClusterFailover(t *testing.T) {
	a, b, db := startPair(t)
	key := a.adminKey()

	if r := a.do("GET", "/readyz", ""); r.Status != http.StatusOK {
		t.Fatalf("leader /readyz = %d %s", r.Status, r.Body)
	}
	// A balancer should send requests to the leader: the standby is not
	// ready, though it forwards what reaches it.
	if r := b.do("GET", "/readyz", ""); r.Status != http.StatusServiceUnavailable || r.JSON(t)["leader_url"] != a.URL {
		t.Fatalf("standby /readyz = %d %s, want 503 naming %s", r.Status, r.Body, a.URL)
	}
	if r := b.do("GET", "/healthz", ""); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"role":"standby"`) {
		t.Fatalf("standby /healthz = %d %s", r.Status, r.Body)
	}

	// The worker dials the standby and is sent to the leader.
	w := launchWorker(t, b.URL, a.tokenFile(), "cw1", "--engine", "sim=ttft=0")
	rec := w.waitLog("connected to the gateway", 15*time.Second)
	if rec["gateway"] != a.URL {
		t.Fatalf("the worker connected to %v, want the leader %s", rec["gateway"], a.URL)
	}

	chat := `{"model":"sim-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	served := 0
	for range 3 {
		if r := a.do("POST", "/v1/chat/completions", chat, bearer(key)); r.Status != http.StatusOK {
			t.Fatalf("chat on the leader = %d %s", r.Status, r.Body)
		}
		served++
	}
	// Sent to the standby, a chat is forwarded to the leader and served
	// by its worker; the request id is the usage row's, and a stream
	// arrives whole.
	r := b.do("POST", "/v1/chat/completions", chat, bearer(key))
	if r.Status != http.StatusOK || r.Header.Get("X-Worker-Name") != "cw1" || r.Header.Get("X-Request-Id") == "" {
		t.Fatalf("chat on the standby = %d %v %s\n%s\n%s", r.Status, r.Header, r.Body, b.Log(), a.Log())
	}
	served++
	forwardedID := r.Header.Get("X-Request-Id")
	stream := b.do("POST", "/v1/chat/completions", `{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, bearer(key))
	if data := sseData(stream.Body); stream.Status != http.StatusOK || len(data) < 2 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream on the standby = %d %s", stream.Status, stream.Body)
	}
	served++
	// Without a valid key the standby answers itself.
	if r := b.do("POST", "/v1/chat/completions", chat, bearer("svc_k_nope_nope")); r.Status != http.StatusUnauthorized {
		t.Fatalf("a bad key on the standby = %d %s", r.Status, r.Body)
	}

	// A key made on the standby's console works on the leader at once.
	cr := b.console("POST", "/api/v1/console/orgs/default/keys", `{"name":"made-on-standby","user":"admin"}`)
	if cr.Status != http.StatusCreated && cr.Status != http.StatusOK {
		t.Fatalf("create a key on the standby = %d %s", cr.Status, cr.Body)
	}
	newKey, _ := cr.JSON(t)["secret"].(string)
	if newKey == "" {
		t.Fatalf("no key in %s", cr.Body)
	}
	eventually(t, 5*time.Second, "the leader accepts the key made on the standby", func() bool {
		return a.do("GET", "/v1/models", "", bearer(newKey)).Status == http.StatusOK
	})

	// The leader's usage is shipped before it is read.
	if r := a.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key)); r.Status != http.StatusOK || r.JSON(t)["requests"] != float64(served) {
		t.Fatalf("usage on the leader = %d %s, want %d requests", r.Status, r.Body, served)
	}
	if logs := b.do("GET", "/api/v1/usage/logs?limit=50", "", bearer(key)); !strings.Contains(string(logs.Body), `"id":"`+forwardedID+`"`) {
		t.Fatalf("no usage row %s for the forwarded request:\n%s", forwardedID, logs.Body)
	}

	killed := time.Now()
	_ = a.Kill() // its exit status is the kill's
	// Until it leads, the standby cannot reach the dead leader: it says
	// so, with a time to retry after.
	if r := b.do("POST", "/v1/chat/completions", chat, bearer(key)); r.Status != http.StatusServiceUnavailable ||
		r.Header.Get("X-Svc-Error-Code") != api.CodeStandby || r.Header.Get("Retry-After") == "" {
		t.Fatalf("chat on the standby with its leader dead = %d %v %s", r.Status, r.Header, r.Body)
	}
	b.waitLog("cluster: leading", 15*time.Second)
	took := time.Since(killed)
	ttl, _ := time.ParseDuration(clusterTTL)
	// The lease lapses within the TTL; the standby claims it at the
	// renewal after the one that saw it lapsed (renewals every TTL/5).
	if took > ttl+ttl/5*2+2*time.Second {
		t.Errorf("the standby led %s after the kill, want within the lease and two renewals", took)
	}
	t.Logf("failover: the standby led %s after the leader was killed", took.Round(10*time.Millisecond))
	eventually(t, 15*time.Second, "the worker back on the new leader", func() bool {
		return b.do("POST", "/v1/chat/completions", chat, bearer(key)).Status == http.StatusOK
	})
	served++
	// The tries refused while the worker reconnected have rows too.
	if r := b.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key)); r.Status != http.StatusOK || r.JSON(t)["succeeded"] != float64(served) {
		t.Fatalf("usage on the new leader = %d %s, want %d succeeded", r.Status, r.Body, served)
	}

	// The old leader comes back as a standby.
	a2 := startReplica(t, db, a.Data)
	a2.waitLog("cluster: standing by", 15*time.Second)
	out, errOut, code := svc(t, []string{"SVC_STORE_URL=" + db}, "cluster", "status", "--json")
	if code != 0 {
		t.Fatalf("svc cluster status: %d %s", code, errOut)
	}
	var st api.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if st.Leader == nil || st.Leader.AdvertiseURL != b.URL || st.Leader.Epoch != 2 || len(st.Replicas) != 2 {
		t.Fatalf("cluster status = %s", out)
	}
	if err := a2.stop(syscall.SIGTERM); err != nil {
		t.Errorf("standby exited with %v", err)
	}
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

// What a standby forwards ends as on a single host: a client that goes
// away mid-request frees the leader's worker slot and leaves a 499 row,
// and a stream whose leader dies ends with the spec's error frame and
// [DONE], never as if it were complete.
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

	// A stream whose leader is killed once it has begun.
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
