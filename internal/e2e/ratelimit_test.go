package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
)

// rateLimited checks that r is the 429 of an organisation over its limit
// of perMinute requests a minute, in the compatible shape, and returns its
// Retry-After in seconds.
func rateLimited(t *testing.T, r reply, perMinute int) int {
	t.Helper()
	var body api.Body
	if r.Status != 429 || json.Unmarshal(r.Body, &body) != nil || body.Error == nil {
		t.Fatalf("got %d %s, want a 429 with the error envelope", r.Status, r.Body)
	}
	want := "This organisation's limit of " + strconv.Itoa(perMinute) + " requests a minute is reached; retry in "
	if body.Error.Type != api.TypeRateLimit || body.Error.Code == nil || *body.Error.Code != api.CodeRateLimited ||
		!strings.HasPrefix(body.Error.Message, want) || body.Detail != body.Error.Message {
		t.Fatalf("429 body %s, want type %s, code %s and a message starting %q", r.Body, api.TypeRateLimit, api.CodeRateLimited, want)
	}
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 60/perMinute || !strings.HasSuffix(body.Error.Message, "retry in "+strconv.Itoa(secs)+" s") {
		t.Fatalf("Retry-After %q with message %q, want 1 to %d s, as the message says", r.Header.Get("Retry-After"), body.Error.Message, 60/perMinute)
	}
	if r.Header.Get("X-Request-Id") == "" {
		t.Fatal("a 429 without X-Request-Id")
	}
	return secs
}

// An organisation's requests_per_minute holds its inference requests to
// that many a minute, in bursts of ten seconds' worth: past it a request
// is refused with 429 and Retry-After before its body is read, and gets
// its usage row. Other organisations, and the console and usage routes,
// are not held back; null gives the plan's default back, which on Pro is
// no limit.
func TestRateLimitPerOrganisation(t *testing.T) {
	s, key := gateway(t)
	acmeKey, _ := secondOrg(t, s)

	// Six a minute: a burst of one, then one every ten seconds.
	r := s.console("PATCH", "/api/v1/console/orgs/default", `{"requests_per_minute": 6}`)
	if r.Status != 200 || r.JSON(t)["settings"].(map[string]any)["requests_per_minute"] != 6.0 {
		t.Fatalf("PATCH = %d %s", r.Status, r.Body)
	}
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "first", false), bearer(key)); r.Status != 200 {
		t.Fatalf("first request = %d %s", r.Status, r.Body)
	}
	refused := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "second", false), bearer(key))
	rateLimited(t, refused, 6)

	// Refused before its body is read: a body that would be a 400 gets the
	// 429, on every inference route, moderation's code header included.
	rateLimited(t, s.do("POST", "/api/v1/embeddings", `{"model":`, bearer(key)), 6)
	mod := s.do("POST", "/v1/moderations", `{"input":"hi"}`, bearer(key))
	if rateLimited(t, mod, 6); mod.Header.Get("X-Svc-Error-Code") != api.CodeRateLimited {
		t.Errorf("moderation 429 X-Svc-Error-Code = %q", mod.Header.Get("X-Svc-Error-Code"))
	}

	// Counted apart from the capacity 429s.
	if m := s.do("GET", "/metrics", ""); !strings.Contains(string(m.Body), "\nsvc_rate_limited_requests_total 3\n") {
		t.Errorf("metrics after three refusals:\n%s", m.Body)
	}

	// The refusal has its usage row, with the status and message the
	// client saw.
	row := s.usageRow(key, refused.Header.Get("X-Request-Id"))
	if row["status_code"] != 429.0 || !strings.Contains(row["error_message"].(string), "limit of 6 requests a minute") {
		t.Fatalf("usage row of the refusal: %v", row)
	}

	// Another organisation, under the same limit, has its own bucket;
	// routes that are not inference are never counted.
	if r := s.console("PATCH", "/api/v1/console/orgs/acme", `{"requests_per_minute": 6}`); r.Status != 200 {
		t.Fatalf("PATCH acme = %d %s", r.Status, r.Body)
	}
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "acme", false), bearer(acmeKey)); r.Status == 429 {
		t.Fatalf("another organisation = %d %s", r.Status, r.Body)
	}
	for range 3 {
		if r := s.do("GET", "/api/v1/usage/logs", "", bearer(key)); r.Status != 200 {
			t.Fatalf("usage logs while limited = %d %s", r.Status, r.Body)
		}
	}

	// null: the Pro plan's default, no limit.
	r = s.console("PATCH", "/api/v1/console/orgs/default", `{"requests_per_minute": null}`)
	if r.Status != 200 || r.JSON(t)["settings"].(map[string]any)["requests_per_minute"] != nil {
		t.Fatalf("PATCH null = %d %s", r.Status, r.Body)
	}
	for i := range 20 {
		if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "after", false), bearer(key)); r.Status != 200 {
			t.Fatalf("request %d with the limit cleared = %d %s", i, r.Status, r.Body)
		}
	}

	// Out of range: 422 naming the field.
	r = s.console("PATCH", "/api/v1/console/orgs/default", `{"requests_per_minute": -1}`)
	if r.Status != 422 || !strings.Contains(string(r.Body), `"field":"requests_per_minute"`) {
		t.Fatalf("PATCH -1 = %d %s", r.Status, r.Body)
	}
}

// In a cluster an organisation's requests are counted at its home
// replica alone: one forwarded there by another replica uses the home's
// bucket, and a refusal made there comes back through the forwarding
// replica with its Retry-After and has one usage row, at the home, under
// the id the client saw.
func TestClusterRateLimitAtTheHome(t *testing.T) {
	home, front, _ := startPair(t)
	key := home.adminKey()
	startWorker(t, home.URL, home.tokenFile(), "rl-box", "--engine", "sim=tps=0,ttft=0")
	home.workerNamed(key, "rl-box", statusIs("healthy"))
	if r := home.console("PATCH", "/api/v1/console/orgs/default", `{"requests_per_minute": 6}`); r.Status != 200 {
		t.Fatalf("PATCH = %d %s", r.Status, r.Body)
	}
	if r := front.do("POST", "/v1/chat/completions", chatBody("sim-chat", "through the front", false), bearer(key)); r.Status != 200 {
		t.Fatalf("forwarded request = %d %s", r.Status, r.Body)
	}
	// The forwarded request took the home's one token.
	rateLimited(t, home.do("POST", "/v1/chat/completions", chatBody("sim-chat", "at the home", false), bearer(key)), 6)
	refused := front.do("POST", "/v1/chat/completions", chatBody("sim-chat", "through the front again", false), bearer(key))
	rateLimited(t, refused, 6)
	id := refused.Header.Get("X-Request-Id")
	if row := home.usageRow(key, id); row["status_code"] != 429.0 {
		t.Fatalf("usage row of the forwarded refusal: %v", row)
	}
	var rows []map[string]any
	_ = json.Unmarshal(home.do("GET", "/api/v1/usage/logs?limit=100", "", bearer(key)).Body, &rows)
	n := 0
	for _, row := range rows {
		if row["id"] == id {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d usage rows for the forwarded refusal %s, want 1", n, id)
	}
}
