package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/svc-dev/svc/internal/harness"
)

// rentalEvery is the cluster-rental check's rental limit per key: longer
// than the check takes from the first POST to the last, so that the
// second POST falls in the first's window however slow the machine.
const rentalEvery = 5 * time.Minute

// clusterRental checks the rental limit and a running rental across the
// death of its organisation's home, on three replicas with the local
// provider. Every replica's provider shares one directory of machines,
// as the replicas of a real cluster share one cloud account: a machine
// one home created is one the next can see. 30 POSTs of one key are sent
// at once, 10 straight to each replica: exactly one may be answered
// other than 429 or 503, with a 202 that starts a rental, whichever
// replica it reached (one that is not the organisation's home forwards
// it there, or refuses it with 503 and Retry-After when it cannot). Once
// the rental runs, the organisation's home, which runs it, is killed;
// the rental's worker reconnects through the balancer and makes another
// replica the home, which must answer the same key's next POST 429,
// since the limit lives in the database, and list the rental still
// running, started when it was, its seconds billed counting on from the
// first home's, its worker back.
func clusterRental(ctx context.Context, h *rig, r *result) error {
	ttl := scaled(h, 5*time.Second, 10*time.Second)
	machines := filepath.Join(h.dir, "cluster-rental-machines")
	if err := os.MkdirAll(machines, 0o700); err != nil {
		return err
	}
	defer killLocalRentals(machines)
	c, err := startCluster(ctx, h, r, "cluster-rental", clusterSpec{replicas: 3, ttl: ttl, publicURL: true,
		args: []string{"--rental-providers", "local", "--local-boot-step", "50ms", "--rental-tick", "100ms",
			"--rental-every", rentalEvery.String()},
		prepare: func(data string) error {
			if err := os.MkdirAll(filepath.Join(data, "rentals"), 0o700); err != nil {
				return err
			}
			return os.Symlink(machines, filepath.Join(data, "rentals", "local"))
		},
	})
	if c == nil || err != nil {
		return err
	}
	defer c.close()
	l0, _ := c.leader(ctx)
	if l0 < 0 {
		return fmt.Errorf("no replica leads")
	}
	leader := c.replicas[l0]

	// The organisation can pay, and a key of its own for the check.
	for _, step := range []struct{ method, path, body string }{
		{"PATCH", "/api/v1/console/orgs/default", `{"payment_card_on_file": true}`},
		{"POST", "/api/v1/console/orgs/default/credit", `{"amount_gbp": 20}`},
	} {
		if st, body, err := consoleDo(ctx, leader.Data, step.method, step.path, step.body); err != nil || st >= 300 {
			return fmt.Errorf("console %s %s: %d %s %v", step.method, step.path, st, body, err)
		}
	}
	st, body, err := consoleDo(ctx, leader.Data, "POST", "/api/v1/console/orgs/default/keys",
		`{"user":"admin","name":"cluster-renter","permissions":["compute:write","inference:write","workers:read"]}`)
	if err != nil || st >= 300 {
		return fmt.Errorf("console: create a key: %d %s %v", st, body, err)
	}
	var created struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.Secret == "" {
		return fmt.Errorf("console: create a key: %s", body)
	}
	key := created.Secret
	known := time.Now()
	// The organisation's first request makes a replica that does not
	// lead its home, once the key is known there: the kill below then
	// takes the rental's home alone, and the cluster's leader stays.
	homed := c.replicas[(l0+1)%len(c.replicas)]
	var first int
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	err = harness.Poll(wctx, 50*time.Millisecond, func() bool {
		first, _, _, _ = rawDo(wctx, "GET", homed.URL+"/api/v1/compute/instances", key, "")
		return first == http.StatusOK
	})
	cancel()
	if err != nil {
		return fmt.Errorf("the organisation's first request, to %s: %d", homed.name, first)
	}
	if err := c.waitKeyKnown(ctx, key, 45*time.Second); err != nil {
		r.fail("%v", err)
		return err
	}
	r.figure("new key known to every replica", "%d ms after it was made on the leader", time.Since(known).Milliseconds())

	// 30 POSTs at once, 10 to each replica.
	const perReplica = 10
	rentBody := `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","name":"cluster-rental"}`
	type answer struct {
		replica int
		st      int
		body    []byte
		hdr     http.Header
		err     error
	}
	answers := make([]answer, 0, perReplica*len(c.replicas))
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, g := range c.replicas {
		for range perReplica {
			wg.Go(func() {
				<-gate
				st, b, hdr, err := rawDo(ctx, "POST", g.URL+"/api/v1/compute/instances", key, rentBody)
				mu.Lock()
				answers = append(answers, answer{i, st, b, hdr, err})
				mu.Unlock()
			})
		}
	}
	firstPost := time.Now()
	close(gate)
	wg.Wait()
	var accepted []answer
	count := map[string]int{}
	for _, a := range answers {
		name := c.replicas[a.replica].name
		if a.err != nil {
			r.fail("POST to %s: %v", name, a.err)
			count["error"]++
			continue
		}
		count[fmt.Sprintf("%d", a.st)]++
		if a.hdr.Get("X-Request-Id") == "" {
			r.fail("%s answered %d without X-Request-Id", name, a.st)
		}
		switch a.st {
		case http.StatusTooManyRequests:
			if a.hdr.Get("Retry-After") == "" {
				r.fail("%s answered 429 without Retry-After", name)
			}
		case http.StatusServiceUnavailable:
			// Only a replica that cannot forward to the home refuses.
			if err := unavailable(a.hdr, a.body); err != nil {
				r.fail("%s: %v", name, err)
			}
		default:
			accepted = append(accepted, a)
		}
	}
	r.figure("30 POSTs at once", "%s", kindList(count))
	if len(accepted) != 1 {
		var sts []string
		for _, a := range accepted {
			sts = append(sts, fmt.Sprintf("%s: %d", c.replicas[a.replica].name, a.st))
		}
		r.fail("%d of %d concurrent POSTs of one key were answered other than 429 or 503, want exactly 1: %s",
			len(accepted), len(answers), strings.Join(sts, ", "))
	}
	// The one let through started a rental, whichever replica it was sent
	// to: each forwards it to the organisation's home.
	var rental rentalState
	for _, a := range accepted {
		if a.st != http.StatusAccepted {
			r.fail("the POST let through was answered %d by %s, want 202: %s", a.st, c.replicas[a.replica].name, tail(string(a.body), 300))
			continue
		}
		if err := json.Unmarshal(a.body, &rental); err != nil || rental.ID == "" {
			return fmt.Errorf("the accepted rental: %s", a.body)
		}
	}
	if rental.ID == "" {
		return fmt.Errorf("no rental was started")
	}

	// The rental runs and bills before the kill.
	api := renter{url: c.lb.URL(), key: key}
	boot := time.Now()
	before, err := waitRental(ctx, api, rental.ID, 60*time.Second, func(v rentalState) bool {
		return v.Status == "running" && v.Connected && v.SecondsBilled >= 2
	})
	if err != nil {
		return fmt.Errorf("before the kill: %w", err)
	}
	r.figure("rental running", "%d ms after the POST; %d s billed before the kill", time.Since(boot).Milliseconds(), before.SecondsBilled)

	// Kill the organisation's home, which runs the rental.
	home := -1
	for i := range c.replicas {
		if v, err := c.health(ctx, i); err == nil && v.Cluster.Homes > 0 {
			home = i
		}
	}
	if home < 0 {
		return fmt.Errorf("no replica is the organisation's home")
	}
	if c.replicas[home] != homed {
		r.fail("the organisation's home is %s, not %s, where its first request claimed it", c.replicas[home].name, homed.name)
	}
	role := "home"
	if home == l0 {
		role = "home and leader"
	}
	killAt := time.Now()
	_ = c.replicas[home].Kill()
	r.figure("killed", "%s, the %s", c.replicas[home].name, role)
	if l, _ := c.leader(ctx); l != l0 {
		r.fail("the leader changed from %s when the home alone was killed", c.replicas[l0].name)
	}

	// The same key's next POST, through the balancer, within the first
	// one's window. A 503 until the organisation has a new home (or the
	// balancer has seen the kill) is retried.
	var again int
	var againBody []byte
	var againErr error
	wctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	_ = harness.Poll(wctx, 200*time.Millisecond, func() bool {
		again, againBody, _, againErr = api.do(wctx, "POST", "/api/v1/compute/instances", rentBody)
		return againErr == nil && again != http.StatusServiceUnavailable
	})
	cancel()
	since := time.Since(firstPost)
	switch {
	case againErr != nil:
		r.fail("after the failover the same key's POST, %v after its first, got no answer: %v", since.Round(time.Millisecond), againErr)
	case again != http.StatusTooManyRequests:
		r.fail("after the failover the same key's POST, %v after its first, was answered %d, want 429 (the limit is the database's, one POST per %v): %s",
			since.Round(time.Millisecond), again, rentalEvery, tail(string(againBody), 300))
	}
	r.figure("POST after the failover", "%d, %.1f s after the key's first", again, since.Seconds())

	// The rental at the new home: listed, still running, started when it
	// was, billed on from where it was, its worker back.
	after, err := waitRental(ctx, api, rental.ID, 60*time.Second, func(v rentalState) bool {
		return v.Status == "running" && v.Connected
	})
	if err != nil {
		r.fail("after the failover: %v", err)
		return nil
	}
	r.figure("rental's worker back", "%d ms after the kill", time.Since(killAt).Milliseconds())
	if st, b, _, err := api.do(ctx, "GET", "/api/v1/compute/instances", ""); err != nil || st != http.StatusOK || !bytes.Contains(b, []byte(rental.ID)) {
		r.fail("the new home's list of rentals does not hold %s: %d %s %v", rental.ID, st, tail(string(b), 300), err)
	}
	sleep(ctx, scaled(h, 3*time.Second, 10*time.Second))
	later, err := getRental(ctx, api, rental.ID)
	if err != nil {
		return err
	}
	switch {
	case before.StartedAt == nil || later.StartedAt == nil || !later.StartedAt.Equal(*before.StartedAt):
		r.fail("started_at was %v before the failover and is %v after", before.StartedAt, later.StartedAt)
	case later.Status != "running":
		r.fail("the rental is %s after the failover: %+v", later.Status, later)
	case later.SecondsBilled <= after.SecondsBilled || after.SecondsBilled < before.SecondsBilled:
		r.fail("seconds billed %d before the kill, %d after the failover, %d later: not counting on", before.SecondsBilled, after.SecondsBilled, later.SecondsBilled)
	default:
		// Billing is derived from started_at: while the rental runs, the
		// seconds billed are the seconds since it started.
		want := int64(time.Since(*later.StartedAt) / time.Second)
		if d := want - later.SecondsBilled; d < -2 || d > 2 {
			r.fail("%d s billed after the failover, but the rental started %d s ago", later.SecondsBilled, want)
		}
	}
	r.figure("seconds billed", "%d before the kill, %d once back at the new home, %d later (not reset)", before.SecondsBilled, after.SecondsBilled, later.SecondsBilled)

	// Stop it, so that the machine goes with the check.
	if st, b, _, err := api.do(ctx, "DELETE", "/api/v1/compute/instances/"+rental.ID, ""); err != nil || st != http.StatusOK {
		r.fail("stop the rental at the new home: %d %s %v", st, tail(string(b), 300), err)
	}
	c.crashes(r)
	return nil
}

// rentalState is the part of a rental the check reads.
type rentalState struct {
	ID            string     `json:"id"`
	Status        string     `json:"status"`
	Connected     bool       `json:"connected"`
	StartedAt     *time.Time `json:"started_at"`
	StoppedAt     *time.Time `json:"stopped_at"`
	SecondsBilled int64      `json:"seconds_billed"`
	Error         *string    `json:"error"`
}

// renter is the check's key's client through the balancer. Each request
// goes on a new connection, as the balancer places connections, not
// requests: a connection it gave a replica that could not yet reach the
// organisation's new home would keep going there. (cluster-crash judges
// what a client that keeps its connections sees.)
type renter struct{ url, key string }

func (a renter) do(ctx context.Context, method, path, body string) (int, []byte, http.Header, error) {
	return rawDo(ctx, method, a.url+path, a.key, body)
}

func getRental(ctx context.Context, a renter, id string) (rentalState, error) {
	var v rentalState
	st, b, _, err := a.do(ctx, "GET", "/api/v1/compute/instances/"+id, "")
	if err != nil {
		return v, err
	}
	if st != http.StatusOK {
		return v, fmt.Errorf("rental %s: status %d: %s", id, st, tail(string(b), 300))
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("rental %s: %w", id, err)
	}
	return v, nil
}

// waitRental polls a rental through g until ok; answers other than 200
// (a 503 while the organisation has no live home) are polled through.
func waitRental(ctx context.Context, a renter, id string, timeout time.Duration, ok func(rentalState) bool) (rentalState, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var v rentalState
	var last error
	err := harness.Poll(wctx, 100*time.Millisecond, func() bool {
		got, err := getRental(wctx, a, id)
		if err != nil {
			last = err
			return false
		}
		v, last = got, nil
		return ok(v)
	})
	if err != nil {
		return v, fmt.Errorf("rental %s not there within %v: last seen %+v (%v)", id, timeout, v, last)
	}
	return v, nil
}

// unavailable checks a replica's 503 refusal of an API request, which it
// makes when it cannot forward it to the organisation's home: a JSON
// detail and Retry-After.
func unavailable(hdr http.Header, body []byte) error {
	var e struct {
		Detail any `json:"detail"`
	}
	switch {
	case json.Unmarshal(body, &e) != nil || e.Detail == nil:
		return fmt.Errorf("503 without a JSON detail: %s", tail(string(body), 200))
	case hdr.Get("Retry-After") == "":
		return fmt.Errorf("503 without Retry-After: %s", tail(string(body), 200))
	}
	return nil
}

// waitKeyKnown waits until every replica authenticates key: a replica
// that does not answers 401.
func (c *cluster) waitKeyKnown(ctx context.Context, key string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var unknown []string
	err := harness.Poll(wctx, 50*time.Millisecond, func() bool {
		unknown = nil
		for _, g := range c.replicas {
			if st, _, _, err := rawDo(wctx, "GET", g.URL+"/v1/models", key, ""); err != nil || st == http.StatusUnauthorized {
				unknown = append(unknown, g.name)
			}
		}
		return len(unknown) == 0
	})
	if err != nil {
		return fmt.Errorf("a key made on the leader is unknown to %s after %v", strings.Join(unknown, ", "), timeout)
	}
	return nil
}

// rawDo sends one request with key on a connection of its own and
// returns the whole answer.
func rawDo(ctx context.Context, method, url, key, body string) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Close = true
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// consoleDo sends a console request on a replica's admin socket.
func consoleDo(ctx context.Context, data, method, path, body string) (int, []byte, error) {
	sock := filepath.Join(data, "admin.sock")
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://svc"+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// killLocalRentals kills the workers local rentals left running in dir:
// they outlive their gateways by design, as a cloud machine would.
func killLocalRentals(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "*", "pid"))
	for _, f := range pids {
		b, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}
