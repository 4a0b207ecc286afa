package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	svcserver "github.com/svc-dev/svc/internal/server"
)

// TestAuthorizationMatrix sends every route of the route table, so a new
// route cannot be missed, with every kind of credential: none, a bad key,
// a revoked key, the key of a removed member, a key with each single
// permission, a member's and an operator's key, a worker token, and a
// second organisation's key against the first's resources. Every cell
// has the status the rules give, and the second organisation's lists
// never show the first's data.
func TestAuthorizationMatrix(t *testing.T) {
	dir := t.TempDir()
	s, admin := rentalGateway(t, dir)
	authorizationMatrix(t, s, s, admin, dir)
}

// TestAuthorizationMatrixThroughANonHomeReplica sends the matrix to a
// replica of a cluster that is neither the organisation's home nor the
// leader, which forwards what it lets through to the home: every cell must be
// what a single host answers.
func TestAuthorizationMatrixThroughANonHomeReplica(t *testing.T) {
	s, front, admin := startRentalPair(t)
	authorizationMatrix(t, s, front, admin, s.Data)
}

// authorizationMatrix sends the cells to front; s is the gateway whose
// console makes the credentials, and that links the worker.
func authorizationMatrix(t *testing.T, s, front *server, admin, dir string) {
	startWorker(t, s.URL, s.tokenFile(), "org1-box", "--engine", "sim=tps=0,ttft=0")
	workerID := s.workerNamed(admin, "org1-box", statusIs("healthy"))["worker_id"].(string)
	chat := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "org1 only", false), bearer(admin))
	if chat.Status != 200 {
		t.Fatalf("chat %d %s", chat.Status, chat.Body)
	}
	org1Row := chat.Header.Get("X-Request-Id")
	_, rental := rent(t, s, admin, `{"gpu_model_id":"sim-l4","tier_id":"uk-sovereign","name":"org1-rental"}`)
	if rental.ID == "" {
		t.Fatal("no rental to protect")
	}

	all := []string{"usage:read", "workers:read", "compute:write", "inference:write"}
	key := func(user, role string, perms ...string) string {
		s.console("POST", "/api/v1/console/users", fmt.Sprintf(`{"name":%q}`, user))
		if r := s.console("PUT", "/api/v1/console/orgs/default/members/"+user, fmt.Sprintf(`{"role":%q}`, role)); r.Status != 200 {
			t.Fatalf("member %s: %d %s", user, r.Status, r.Body)
		}
		r := s.console("POST", "/api/v1/console/orgs/default/keys",
			fmt.Sprintf(`{"user":%q,"name":"k","permissions":["%s"]}`, user, strings.Join(perms, `","`)))
		if r.Status != 201 {
			t.Fatalf("key for %s: %d %s", user, r.Status, r.Body)
		}
		return r.JSON(t)["secret"].(string)
	}
	type cred struct {
		name, secret string
		perms        []string // what it may do; nil: nothing
		role         string
	}
	creds := []cred{{name: "no key"}, {name: "bad key", secret: "svc_k_AAAAAAAAAAAA_" + strings.Repeat("x", 40)}}
	revoked := key("rev", "owner", all...)
	keysBody := s.console("GET", "/api/v1/console/orgs/default/keys", "").Body
	var keys struct {
		Keys []map[string]any `json:"keys"`
	}
	_ = json.Unmarshal(keysBody, &keys)
	for _, k := range keys.Keys {
		if k["user"] == "rev" {
			s.console("DELETE", "/api/v1/console/orgs/default/keys/"+k["id"].(string), "")
		}
	}
	creds = append(creds, cred{name: "revoked key", secret: revoked})
	gone := key("gone", "owner", all...)
	s.console("DELETE", "/api/v1/console/orgs/default/members/gone", "")
	creds = append(creds, cred{name: "removed member's key", secret: gone})
	for _, p := range all {
		creds = append(creds, cred{name: "only " + p, secret: key("only-"+strings.ReplaceAll(p, ":", "-"), "owner", p), perms: []string{p}, role: "owner"})
	}
	creds = append(creds,
		cred{name: "member", secret: key("mem", "member", all...), perms: all, role: "member"},
		cred{name: "operator", secret: key("op", "operator", all...), perms: all, role: "operator"})
	token, err := os.ReadFile(filepath.Join(dir, "worker.token"))
	if err != nil {
		t.Fatal(err)
	}
	creds = append(creds, cred{name: "worker token", secret: strings.TrimSpace(string(token))})

	// The second organisation, with an owner's key that may do everything.
	for _, step := range []struct{ method, path, body string }{
		{"POST", "/api/v1/console/orgs", `{"name":"acme","plan":"pro"}`},
		{"POST", "/api/v1/console/users", `{"name":"ann"}`},
		{"PUT", "/api/v1/console/orgs/acme/members/ann", `{"role":"owner"}`},
	} {
		s.console(step.method, step.path, step.body)
	}
	acme := s.console("POST", "/api/v1/console/orgs/acme/keys",
		fmt.Sprintf(`{"user":"ann","name":"k","permissions":["%s"]}`, strings.Join(all, `","`))).JSON(t)["secret"].(string)
	if front != s {
		// Another replica learns of the accounts made here within moments.
		eventually(t, 10*time.Second, "the front has the accounts made on the leader", func() bool {
			return front.do("GET", "/v1/models", "", bearer(acme)).Status == 200 &&
				front.do("GET", "/v1/models", "", bearer(revoked)).Status == 401 &&
				front.do("GET", "/v1/models", "", bearer(gone)).Status == 401
		})
	}

	fill := func(path string) string {
		r := strings.NewReplacer("{worker_id}", workerID, "{id}", rental.ID, "{org}", "default", "{user}", "nobody")
		return r.Replace(path)
	}
	cells := 0
	for _, rt := range svcserver.RouteTable() {
		if rt.Method == "DELETE" && strings.Contains(rt.Path, "/compute/instances/") {
			continue // sent last, below: it would stop the rental the others read
		}
		path := fill(rt.Path)
		body := ""
		if rt.Method == "POST" || rt.Method == "PATCH" || rt.Method == "PUT" {
			body = "{}"
		}
		for _, c := range creds {
			var hs []header
			if c.secret != "" {
				hs = append(hs, bearer(c.secret))
			}
			r := front.do(rt.Method, path, body, hs...)
			cells++
			allowed := rt.Permission != "" && slices.Contains(c.perms, rt.Permission) && (!rt.Operator || c.role != "member")
			switch {
			case rt.Access == "public":
				want := 200
				if r.Status != want {
					t.Errorf("%s %s with %s = %d, want %d", rt.Method, rt.Path, c.name, r.Status, want)
				}
			case rt.Access == "console":
				// A valid key is refused for what it asks (403); anything
				// that is not one is 401 as anywhere.
				if want := map[bool]int{true: 401, false: 403}[c.perms == nil]; r.Status != want {
					t.Errorf("%s %s with %s = %d, want %d", rt.Method, rt.Path, c.name, r.Status, want)
				}
			case rt.Access == "peer":
				// Only a request signed with the cluster's secret.
				if r.Status != 401 {
					t.Errorf("%s %s with %s = %d, want 401", rt.Method, rt.Path, c.name, r.Status)
				}
			case rt.Access == "worker":
				if c.name != "worker token" && r.Status != 401 {
					t.Errorf("the worker link with %s = %d, want 401", c.name, r.Status)
				}
			case allowed:
				if r.Status == 401 || r.Status == 403 {
					t.Errorf("%s %s with %s = %d %s, want it let through", rt.Method, rt.Path, c.name, r.Status, r.Body)
				}
			case c.perms == nil:
				if r.Status != 401 {
					t.Errorf("%s %s with %s = %d, want 401", rt.Method, rt.Path, c.name, r.Status)
				}
			default:
				if r.Status != 403 {
					t.Errorf("%s %s with %s = %d %s, want 403", rt.Method, rt.Path, c.name, r.Status, r.Body)
				}
			}
		}
		// The second organisation is let through, and sees none of the
		// first's resources.
		r := front.do(rt.Method, path, body, bearer(acme))
		cells++
		if rt.Access == "key" {
			if r.Status == 401 || r.Status == 403 {
				t.Errorf("%s %s with the second organisation's key = %d", rt.Method, rt.Path, r.Status)
			}
			if strings.Contains(rt.Path, "{") && rt.Method == "GET" && r.Status != 404 {
				t.Errorf("%s %s of the first organisation, read by the second = %d %s", rt.Method, path, r.Status, r.Body)
			}
			for _, foreign := range []string{workerID, rental.ID, org1Row, "org1-box"} {
				// A 404 may name the id it was asked for; anything else is
				// the first organisation's data.
				if rt.Method == "GET" && !strings.Contains(path, foreign) && strings.Contains(string(r.Body), foreign) {
					t.Errorf("%s %s shows the second organisation %s", rt.Method, path, foreign)
				}
			}
		}
	}
	// Stopping: the second organisation cannot, a member cannot, an
	// operator can.
	del := "/api/v1/compute/instances/" + rental.ID
	if r := front.do("DELETE", del, "", bearer(acme)); r.Status != 404 {
		t.Errorf("the second organisation stopping the first's rental = %d", r.Status)
	}
	for _, c := range creds {
		if c.role == "member" {
			if r := front.do("DELETE", del, "", bearer(c.secret)); r.Status != 403 {
				t.Errorf("a member stopping a rental = %d", r.Status)
			}
		}
	}
	if r := front.do("DELETE", del, "", bearer(admin)); r.Status != 200 {
		t.Errorf("the owner stopping the rental = %d %s", r.Status, r.Body)
	}
	t.Logf("%d routes, %d cells", len(svcserver.RouteTable()), cells)
}
