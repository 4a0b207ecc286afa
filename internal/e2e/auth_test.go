package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/harness"
)

// keyFor creates a member with role and a key with perms over the admin
// socket, returning the key's secret.
func keyFor(t *testing.T, s *server, user, role string, perms ...string) string {
	t.Helper()
	if r := s.console("POST", "/api/v1/console/users", fmt.Sprintf(`{"name":%q}`, user)); r.Status != 201 {
		t.Fatalf("create user: %d %s", r.Status, r.Body)
	}
	if r := s.console("PUT", "/api/v1/console/orgs/default/members/"+user, fmt.Sprintf(`{"role":%q}`, role)); r.Status != 200 {
		t.Fatalf("set member: %d %s", r.Status, r.Body)
	}
	body := fmt.Sprintf(`{"user":%q,"name":"test"}`, user)
	if perms != nil {
		body = fmt.Sprintf(`{"user":%q,"name":"test","permissions":["%s"]}`, user, strings.Join(perms, `","`))
	}
	r := s.console("POST", "/api/v1/console/orgs/default/keys", body)
	if r.Status != 201 {
		t.Fatalf("create key: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["secret"].(string)
}

// message reads an error body the way the spec tells clients to.
func message(t *testing.T, r reply) (msg, typ string) {
	t.Helper()
	m := r.JSON(t)
	if e, ok := m["error"].(map[string]any); ok {
		return e["message"].(string), e["type"].(string)
	}
	switch d := m["detail"].(type) {
	case string:
		return d, ""
	case map[string]any:
		e := d["error"].(map[string]any)
		return e["message"].(string), e["type"].(string)
	}
	t.Fatalf("no message in %s", r.Body)
	return "", ""
}

func TestAuthentication(t *testing.T) {
	s := startServer(t, "")
	admin := s.adminKey()
	revoked := keyFor(t, s, "leaver", "member")
	id := strings.Split(strings.TrimPrefix(revoked, "svc_k_"), "_")[0]
	if r := s.console("DELETE", "/api/v1/console/orgs/default/keys/"+id, ""); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}

	tests := []struct {
		name    string
		headers []header
		status  int
	}{
		{"no key", nil, 401},
		{"empty bearer", []header{{"Authorization", "Bearer "}}, 401},
		{"basic auth", []header{{"Authorization", "Basic YWRtaW46YWRtaW4="}}, 401},
		{"garbage", []header{bearer("sk-not-ours")}, 401},
		{"well-formed unknown", []header{bearer("svc_k_AAAAAAAAAAAA_" + strings.Repeat("A", 40))}, 401},
		{"revoked", []header{bearer(revoked)}, 401},
		{"bearer", []header{bearer(admin)}, 200},
		{"lower-case scheme", []header{{"Authorization", "bearer " + admin}}, 200},
		{"x-api-key", []header{{"x-api-key", admin}}, 200},
		{"x-api-key beside another scheme", []header{{"Authorization", "Basic YWRtaW46YWRtaW4="}, {"x-api-key", admin}}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do("GET", "/api/v1/workers/latest-version", "", tt.headers...)
			if r.Status != tt.status {
				t.Fatalf("status = %d, want %d: %s", r.Status, tt.status, r.Body)
			}
			if tt.status == 401 && r.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

func TestPermissions(t *testing.T) {
	s := startServer(t, "")
	usageOnly := keyFor(t, s, "reader", "member", "usage:read")
	member := keyFor(t, s, "renter", "member", "compute:write")
	operator := keyFor(t, s, "ops", "operator", "compute:write")
	defaults := keyFor(t, s, "dev", "member")

	tests := []struct {
		name, method, path, key string
		status                  int
		names                   string // text the message must contain
	}{
		{"usage key reads usage", "GET", "/api/v1/usage/logs", usageOnly, 200, ""},
		{"usage key on workers", "GET", "/api/v1/workers", usageOnly, 403, "workers:read"},
		{"usage key on worker events", "GET", "/api/v1/workers/events", usageOnly, 403, "workers:read"},
		{"usage key on power", "GET", "/api/v1/workers/w1/power", usageOnly, 403, "workers:read"},
		{"usage key on chat", "POST", "/v1/chat/completions", usageOnly, 403, "inference:write"},
		{"usage key on moderations", "POST", "/v1/moderations", usageOnly, 403, "inference:write"},
		{"usage key on rental", "GET", "/api/v1/compute/catalogue", usageOnly, 403, "compute:write"},
		{"default key lacks rental", "GET", "/api/v1/compute/spend", defaults, 403, "compute:write"},
		{"default key reads workers", "GET", "/api/v1/workers", defaults, 200, ""},
		{"default key may chat (no worker yet)", "POST", "/api/v1/chat/completions", defaults, 503, ""},
		{"rental key on usage", "GET", "/api/v1/usage/summary", member, 403, "usage:read"},
		{"member may read the catalogue", "GET", "/api/v1/compute/catalogue", member, 200, ""},
		{"member may not rent", "POST", "/api/v1/compute/instances", member, 403, "owner or operator"},
		{"member may not stop", "DELETE", "/api/v1/compute/instances/i1", member, 403, "owner or operator"},
		{"operator may rent (a chat body is not a rental)", "POST", "/api/v1/compute/instances", operator, 422, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "POST" {
				body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			}
			r := s.do(tt.method, tt.path, body, bearer(tt.key))
			if r.Status != tt.status {
				t.Fatalf("status = %d, want %d: %s", r.Status, tt.status, r.Body)
			}
			if tt.names == "" {
				return
			}
			if msg, _ := message(t, r); !strings.Contains(msg, tt.names) {
				t.Fatalf("message %q does not name %q", msg, tt.names)
			}
		})
	}
}

func TestConsoleEndpointsRefuseAPIKeys(t *testing.T) {
	s := startServer(t, "")
	admin := s.adminKey()
	paths := []struct{ method, path string }{
		{"GET", "/api/v1/console/orgs"},
		{"POST", "/api/v1/console/orgs"},
		{"GET", "/api/v1/console/orgs/default/keys"},
		{"POST", "/api/v1/console/orgs/default/keys"},
		{"PATCH", "/api/v1/console/orgs/default"},
		{"DELETE", "/api/v1/console/orgs/default/worker-tokens/x"},
		{"GET", "/api/v1/console/users"},
	}
	for _, p := range paths {
		t.Run(p.method+" "+p.path, func(t *testing.T) {
			// Even the unrestricted owner key is refused.
			r := s.do(p.method, p.path, `{}`, bearer(admin))
			if r.Status != 403 {
				t.Fatalf("with a key: %d %s", r.Status, r.Body)
			}
			if msg, _ := message(t, r); !strings.Contains(msg, "console") {
				t.Fatalf("message %q does not say it is console-only", msg)
			}
			// No key, or one that is not a key, is 401 as anywhere.
			for _, hs := range [][]header{nil, {bearer("nonsense")}, {bearer("svc_k_AAAAAAAAAAAA_" + strings.Repeat("A", 40))}} {
				if r := s.do(p.method, p.path, `{}`, hs...); r.Status != 401 {
					t.Fatalf("with %v: %d %s", hs, r.Status, r.Body)
				}
			}
		})
	}
	// The socket serves the console API only.
	r := s.console("GET", "/api/v1/usage/logs", "")
	if r.Status != 404 || !strings.Contains(string(r.Body), "console") {
		t.Fatalf("public route on the admin socket = %d %s", r.Status, r.Body)
	}
}

func TestErrorShapes(t *testing.T) {
	s := startServer(t, "")
	admin := s.adminKey()
	usageOnly := keyFor(t, s, "reader", "member", "usage:read")

	t.Run("plain detail on usage endpoints", func(t *testing.T) {
		m := s.do("GET", "/api/v1/workers", "", bearer(usageOnly)).JSON(t)
		if _, ok := m["detail"].(string); !ok || m["error"] != nil {
			t.Fatalf("body = %v", m)
		}
	})
	t.Run("compatible envelope on inference endpoints", func(t *testing.T) {
		r := s.do("POST", "/v1/chat/completions", `{}`)
		m := r.JSON(t)
		e, ok := m["error"].(map[string]any)
		if !ok || e["type"] != "authentication_error" || e["message"] != m["detail"] {
			t.Fatalf("body = %s", r.Body)
		}
		for _, k := range []string{"message", "type", "code", "param"} {
			if _, ok := e[k]; !ok {
				t.Errorf("error lacks %q", k)
			}
		}
	})
	t.Run("nested e2e_required", func(t *testing.T) {
		if r := s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e": true}`); r.Status != 200 {
			t.Fatalf("patch: %d %s", r.Status, r.Body)
		}
		defer s.console("PATCH", "/api/v1/console/orgs/default", `{"require_e2e": false}`)
		for _, p := range []string{"/v1/chat/completions", "/api/v1/embeddings", "/v1/rerank", "/api/v1/images/generations", "/v1/audio/transcriptions", "/v1/audio/speech"} {
			r := s.do("POST", p, `{}`, bearer(admin))
			d, _ := r.JSON(t)["detail"].(map[string]any)
			if r.Status != 403 || d == nil || d["error"].(map[string]any)["type"] != "e2e_required" {
				t.Fatalf("%s = %d %s", p, r.Status, r.Body)
			}
		}
		// Live audio has no encrypted form: the upgrade is refused, also
		// when it names the envelope's content type.
		for _, ct := range []string{"", e2ee.ContentType} {
			hs := []header{bearer(admin), {"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Sec-WebSocket-Version", "13"}, {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}}
			if ct != "" {
				hs = append(hs, header{"Content-Type", ct})
			}
			r := s.do("GET", "/v1/audio/transcriptions/live?model=stt-large-v3", "", hs...)
			d, _ := r.JSON(t)["detail"].(map[string]any)
			if r.Status != 403 || d == nil || d["error"].(map[string]any)["type"] != "e2e_required" {
				t.Fatalf("live transcription (content type %q) = %d %s", ct, r.Status, r.Body)
			}
		}
		// Moderation has no sealed form either, and a clear one carries the
		// content the organisation keeps from the gateway: it is refused,
		// with the moderation error's code header beside the nested shape.
		r := s.do("POST", "/v1/moderations", `{"model":"guard-a:1b","input":"hi"}`, bearer(admin))
		d, _ := r.JSON(t)["detail"].(map[string]any)
		if r.Status != 403 || d == nil || d["error"].(map[string]any)["type"] != "e2e_required" || r.Header.Get("X-Svc-Error-Code") != "e2e_required" {
			t.Fatalf("moderations = %d %v %s", r.Status, r.Header, r.Body)
		}
		// A sealed one is the moderation table's 400.
		r = s.do("POST", "/v1/moderations", `{}`, bearer(admin), header{"Content-Type", e2ee.ContentType})
		if r.Status != 400 || r.Header.Get("X-Svc-Error-Code") != "encrypted_input_not_supported" {
			t.Fatalf("sealed moderation = %d %v %s", r.Status, r.Header, r.Body)
		}
	})
	// Power history is no private inference: its plan gate's detail is a
	// string with plan_required in the envelope beside it, where the
	// encryption key's is nested.
	t.Run("plan gates on free", func(t *testing.T) {
		if r := s.do("GET", "/api/v1/workers/w1/power", "", bearer(admin)); r.Status == 403 {
			t.Fatalf("pro plan refused power: %s", r.Body)
		}
		s.console("PATCH", "/api/v1/console/orgs/default", `{"plan":"free"}`)
		defer s.console("PATCH", "/api/v1/console/orgs/default", `{"plan":"pro"}`)
		r := s.do("GET", "/api/v1/workers/w1/power", "", bearer(admin))
		body := r.JSON(t)
		e, _ := body["error"].(map[string]any)
		if d, _ := body["detail"].(string); r.Status != 403 || !strings.Contains(d, "Pro and Enterprise plans") || e == nil || e["type"] != "plan_required" {
			t.Fatalf("power on free = %d %s", r.Status, r.Body)
		}
		r = s.do("GET", "/api/v1/e2e/keys", "", bearer(admin))
		if d, _ := r.JSON(t)["detail"].(map[string]any); r.Status != 403 || d == nil || d["error"].(map[string]any)["type"] != "plan_required" {
			t.Fatalf("encryption keys on free = %d %s", r.Status, r.Body)
		}
	})
	t.Run("422 with field paths", func(t *testing.T) {
		tests := []struct {
			name, method, path, body string
			console                  bool
			fields                   []string
		}{
			{"enum in a list", "POST", "/api/v1/console/orgs/default/keys", `{"user":"admin","name":"k","permissions":["usage:read","root"]}`, true, []string{"permissions.1"}},
			{"wrong type", "POST", "/api/v1/console/orgs", `{"name": 5}`, true, []string{"name"}},
			{"unknown field", "POST", "/api/v1/console/orgs", `{"name":"x","colour":"red"}`, true, []string{"colour"}},
			{"missing", "POST", "/api/v1/console/orgs/default/keys", `{}`, true, []string{"name", "user"}},
			{"nested setting", "PATCH", "/api/v1/console/orgs/default", `{"monthly_budget_gbp": 1.234}`, true, []string{"monthly_budget_gbp"}},
			{"query range", "GET", "/api/v1/usage/logs?limit=0", "", false, []string{"limit"}},
			{"query enum", "GET", "/api/v1/usage/breakdown?sort=cost&days=400", "", false, []string{"days", "sort"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var r reply
				if tt.console {
					r = s.console(tt.method, tt.path, tt.body)
				} else {
					r = s.do(tt.method, tt.path, tt.body, bearer(admin))
				}
				if r.Status != 422 {
					t.Fatalf("status %d: %s", r.Status, r.Body)
				}
				m := r.JSON(t)
				e := m["error"].(map[string]any)
				if e["type"] != "invalid_request_error" || e["message"] != m["detail"] || m["detail"] == "" {
					t.Fatalf("body %s", r.Body)
				}
				errs := m["errors"].([]any)
				if len(errs) != len(tt.fields) {
					t.Fatalf("errors = %v, want fields %v", errs, tt.fields)
				}
				for i, f := range tt.fields {
					fe := errs[i].(map[string]any)
					if fe["field"] != f || fe["message"] == "" || fe["type"] == "" {
						t.Fatalf("errors[%d] = %v, want field %s", i, fe, f)
					}
				}
			})
		}
	})
	t.Run("malformed JSON is 400", func(t *testing.T) {
		for _, body := range []string{`{"name":`, `{name: "x"}`, `{"name":"x"} trailing`, ``} {
			r := s.console("POST", "/api/v1/console/orgs", body)
			if r.Status != 400 {
				t.Fatalf("%q: %d %s", body, r.Status, r.Body)
			}
		}
	})
	t.Run("unknown route hints at the prefix", func(t *testing.T) {
		for path, hint := range map[string]string{
			"/chat/completions":       "/api/v1/chat/completions",
			"/v1/usage/logs":          "/api/v1/usage/logs",
			"/api/v1/usage/logs/":     "/api/v1/usage/logs",
			"/openai/v1/models/x/y/z": "/api/v1",
		} {
			r := s.do("GET", path, "", bearer(admin))
			msg, typ := message(t, r)
			if r.Status != 404 || typ != "not_found_error" || !strings.Contains(msg, hint) {
				t.Fatalf("%s = %d %q", path, r.Status, msg)
			}
		}
	})
	t.Run("wrong method is 405 with Allow", func(t *testing.T) {
		r := s.do("DELETE", "/v1/chat/completions", "", bearer(admin))
		if r.Status != 405 || r.Header.Get("Allow") != "POST" {
			t.Fatalf("%d Allow=%q %s", r.Status, r.Header.Get("Allow"), r.Body)
		}
	})
	t.Run("oversized body is 413 before it is read", func(t *testing.T) {
		addr := strings.TrimPrefix(s.URL, "http://")
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", addr, admin, 40<<20)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	})
}

func TestPrefixAliases(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	for _, e := range []struct{ method, path string }{
		{"POST", "/chat/completions"},
		{"POST", "/embeddings"},
		{"POST", "/rerank"},
		{"POST", "/images/generations"},
		{"GET", "/models"},
		{"POST", "/audio/transcriptions"},
		{"POST", "/audio/speech"},
		{"POST", "/moderations"},
	} {
		t.Run(e.path, func(t *testing.T) {
			a := s.do(e.method, "/api/v1"+e.path, `{}`, bearer(key))
			b := s.do(e.method, "/v1"+e.path, `{}`, bearer(key))
			if a.Status == 404 || a.Status != b.Status || string(a.Body) != string(b.Body) {
				t.Fatalf("/api/v1: %d %s\n/v1: %d %s", a.Status, a.Body, b.Status, b.Body)
			}
			// Without a key both refuse the same way.
			if x, y := s.do(e.method, "/api/v1"+e.path, ""), s.do(e.method, "/v1"+e.path, ""); x.Status != 401 || y.Status != 401 {
				t.Fatalf("no key: %d / %d", x.Status, y.Status)
			}
		})
	}
}

// Moderation's errors send their code in X-Svc-Error-Code too, those of
// the key's check included.
func TestModerationAuthErrorsCarryTheirCode(t *testing.T) {
	s := startServer(t, "")
	usageOnly := keyFor(t, s, "reader", "member", "usage:read")
	body := `{"model":"guard-a:1b","input":"hi"}`
	for _, tt := range []struct {
		name   string
		hs     []header
		status int
		code   string
	}{
		{"no key", nil, 401, "missing_api_key"},
		{"no permission", []header{bearer(usageOnly)}, 403, "missing_permission"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do("POST", "/v1/moderations", body, tt.hs...)
			e, _ := r.JSON(t)["error"].(map[string]any)
			if r.Status != tt.status || e == nil || e["code"] != tt.code || r.Header.Get("X-Svc-Error-Code") != tt.code {
				t.Fatalf("%d %v %s", r.Status, r.Header, r.Body)
			}
		})
	}
	// Other routes keep the header for the codes that call for it.
	if r := s.do("POST", "/v1/chat/completions", body); r.Status != 401 || r.Header.Get("X-Svc-Error-Code") != "" {
		t.Fatalf("chat without a key: %d %v", r.Status, r.Header)
	}
}

// Revoking a worker token cuts the links made with it: a leaked token's
// worker stops serving at once, not when it next reconnects, its event
// says why, and its agent, refused on its return, stops. A worker on
// another token of the organisation serves on.
func TestRevokedWorkerTokenCutsItsLinks(t *testing.T) {
	s := startServer(t, "")
	key, tokenFile := secondOrg(t, s)
	leaked := launchWorker(t, s.URL, tokenFile, "leaked", "--engine", "sim=tps=0,ttft=0")
	other := s.console("POST", "/api/v1/console/orgs/acme/worker-tokens", `{"name":"other"}`).JSON(t)["secret"].(string)
	otherFile := filepath.Join(t.TempDir(), "other.token")
	if err := os.WriteFile(otherFile, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, s.URL, otherFile, "kept", "--engine", "sim=tps=0,ttft=0")
	w := s.workerNamed(key, "leaked", statusIs("healthy"))

	var id string
	for _, tok := range s.console("GET", "/api/v1/console/orgs/acme/worker-tokens", "").JSON(t)["worker_tokens"].([]any) {
		if tok := tok.(map[string]any); tok["name"] == "t" {
			id = tok["id"].(string)
		}
	}
	if r := s.console("DELETE", "/api/v1/console/orgs/acme/worker-tokens/"+id, ""); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	s.workerNamed(key, "leaked", statusIs("offline"))
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key),
		header{"X-Svc-Worker-Id", w["worker_id"].(string)}); r.Status == 200 {
		t.Fatalf("the worker of a revoked token served: %s", r.Body)
	}
	if !leaked.wait(30 * time.Second) {
		t.Fatal("the agent of a revoked token did not stop once refused")
	}
	// The gateway's log says both.
	if rec := s.waitLog("worker disconnected", 5*time.Second); rec["reason"] != "its worker token was revoked" {
		t.Fatalf("disconnect logged as %v", rec)
	}
	s.waitLog("a worker link was refused", 5*time.Second)
	// And the console's changes are on record.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Log().WaitLine(ctx, "the revocation", func(line string) bool {
		var rec map[string]any
		return json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "console" && rec["method"] == "DELETE" &&
			rec["path"] == "/api/v1/console/orgs/acme/worker-tokens/"+id && rec["status"] == float64(200)
	}); err != nil {
		t.Fatalf("%v:\n%s", err, s.Log())
	}
	var why []string
	if !harness.Eventually(10*time.Second, func() bool {
		why = why[:0]
		for _, ev := range s.events(key, "?event_type=disconnected&worker_id="+w["worker_id"].(string)) {
			why = append(why, fmt.Sprint(ev["detail"]))
		}
		return len(why) > 0
	}) || len(why) != 1 || why[0] != "its worker token was revoked" {
		t.Fatalf("disconnects %q, want one saying the token was revoked", why)
	}
	s.workerNamed(key, "kept", statusIs("healthy"))
}

// A console path acts on the object it names: an id or name holding an
// encoded '/', or a '..', is refused rather than resolved into another
// organisation's object. From the CLI and over the socket alike.
func TestConsolePathTricks(t *testing.T) {
	s := startServer(t, "")
	if r := s.console("POST", "/api/v1/console/orgs", `{"name":"acme"}`); r.Status != 201 {
		t.Fatalf("org: %d %s", r.Status, r.Body)
	}
	victim := s.console("POST", "/api/v1/console/orgs/default/keys", `{"user":"admin","name":"victim"}`).JSON(t)["id"].(string)
	for _, path := range []string{
		"/api/v1/console/orgs/acme/keys/..%2F..%2Fdefault%2Fkeys%2F" + victim,
		"/api/v1/console/orgs/acme/keys/../../default/keys/" + victim,
		"/api/v1/console/orgs/acme%2Fkeys",
	} {
		if r := s.console("DELETE", path, ""); r.Status != 400 || !strings.Contains(string(r.Body), "Malformed path") {
			t.Errorf("DELETE %s = %d %s", path, r.Status, r.Body)
		}
	}
	if _, _, code := svc(t, nil, "admin", "--data", s.Data, "keys", "revoke", "../../default/keys/"+victim, "--org", "acme"); code == 0 {
		t.Error("svc admin revoked through a path trick")
	}
	for _, k := range s.console("GET", "/api/v1/console/orgs/default/keys", "").JSON(t)["keys"].([]any) {
		if k := k.(map[string]any); k["id"] == victim && k["revoked_at"] != nil {
			t.Fatalf("the victim key was revoked: %v", k)
		}
	}
	// The id itself still works.
	if r := s.console("DELETE", "/api/v1/console/orgs/default/keys/"+victim, ""); r.Status != 200 {
		t.Fatalf("revoke by id: %d %s", r.Status, r.Body)
	}
}
