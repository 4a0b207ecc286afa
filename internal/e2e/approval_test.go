package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
)

// With require_worker_approval on, a new worker is listed and connected
// but serves nothing until `svc admin workers approve`; the approval is
// kept across a reconnect and a gateway restart.
func TestWorkerApproval(t *testing.T) {
	s := startServer(t, "")
	key := s.adminKey()
	if r := s.console("PATCH", "/api/v1/console/orgs/default", `{"require_worker_approval":true}`); r.Status != 200 ||
		r.JSON(t)["settings"].(map[string]any)["require_worker_approval"] != true {
		t.Fatalf("turning approval on = %d %s", r.Status, r.Body)
	}
	w := startWorker(t, s.URL, s.tokenFile(), "fresh", "--engine", "sim=tps=0,ttft=0")
	entry := s.workerNamed(key, "fresh", func(w map[string]any) bool { return w["approval_pending"] == true })
	if entry["status"] != "healthy" {
		t.Fatalf("pending worker entry %v", entry)
	}
	// No GPU here: the fields are there, and empty.
	if gpus, ok := entry["gpus"].([]any); !ok || len(gpus) != 0 || entry["gpu_count"] != float64(0) || entry["driver_version"] != nil {
		t.Fatalf("GPU fields of a worker without a GPU: gpus=%v gpu_count=%v driver_version=%v", entry["gpus"], entry["gpu_count"], entry["driver_version"])
	}
	ev := s.waitEvent(key, "?event_type=approval_pending", func(e map[string]any) bool { return e["worker_name"] == "fresh" })
	id := ev["worker_id"].(string)

	r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key))
	if msg, _ := message(t, r); r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(msg, "approval") {
		t.Fatalf("request for a pending worker's model = %d %v %s", r.Status, r.Header, r.Body)
	}
	if code := r.JSON(t)["error"].(map[string]any)["code"]; code != "approval_pending" {
		t.Fatalf("error code %v", code)
	}
	r = s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", true), bearer(key), header{"X-Svc-Worker-Id", id})
	if r.Status != 503 {
		t.Fatalf("streamed request pinned to a pending worker = %d %s", r.Status, r.Body)
	}

	out, errOut, code := svc(t, nil, "admin", "--data", s.Data, "workers", "approve", "fresh")
	if code != 0 || !strings.Contains(out, "Approved worker fresh ("+id+")") || !strings.Contains(out, "serves now") {
		t.Fatalf("svc admin workers approve = %d\n%s\n%s", code, out, errOut)
	}
	s.workerNamed(key, "fresh", func(w map[string]any) bool { return w["approval_pending"] == false })
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key)); r.Status != 200 {
		t.Fatalf("request after approval = %d %s", r.Status, r.Body)
	}
	ev = s.waitEvent(key, "?event_type=approved", func(e map[string]any) bool { return e["worker_id"] == id })
	if ev["actor"] != "svc admin" {
		t.Fatalf("approved event %v", ev)
	}
	// An unknown id is not approved ahead, nor a name no worker could
	// connect under; a name is.
	if _, _, code := svc(t, nil, "admin", "--data", s.Data, "workers", "approve", "wk_0000000000000000"); code == 0 {
		t.Fatal("approved an id no worker has")
	}
	// An empty --org (an unset $SVC_ORG in a script) is the caller's
	// mistake, told as such.
	if _, errOut, code := svc(t, nil, "admin", "--data", s.Data, "--org", "", "workers", "approve", "fresh"); code != 2 || !strings.Contains(errOut, "--org is empty") {
		t.Errorf("an empty --org = exit %d: %s", code, errOut)
	}
	for _, name := range []string{strings.Repeat("w", 129), "x\\u0001"} {
		if r := s.console("POST", "/api/v1/console/orgs/default/workers/approve", `{"worker":"`+name+`"}`); r.Status != 422 || !strings.Contains(string(r.Body), "worker name") {
			t.Errorf("approving %q = %d %s", name, r.Status, r.Body)
		}
	}
	out, errOut, code = svc(t, nil, "admin", "--data", s.Data, "--json", "workers", "approve", "later")
	var ahead struct {
		WorkerName string `json:"worker_name"`
		Connected  bool   `json:"connected"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ahead) != nil || ahead.WorkerName != "later" || ahead.Connected {
		t.Fatalf("approving a name ahead = %d\n%s\n%s", code, out, errOut)
	}

	// A new process of the worker is not asked again.
	if err := w.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	startWorker(t, s.URL, s.tokenFile(), "fresh", "--engine", "sim=tps=0,ttft=0")
	if r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key)); r.Status != 200 {
		t.Fatalf("request after the worker restarted = %d %s", r.Status, r.Body)
	}
	// Nor after the gateway restarts, while one never approved still waits.
	if err := s.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s = startServer(t, s.Data)
	startWorker(t, s.URL, s.tokenFile(), "fresh", "--engine", "sim=tps=0,ttft=0")
	startWorker(t, s.URL, s.tokenFile(), "stranger", "--engine", "sim=tps=0,ttft=0")
	s.workerNamed(key, "stranger", func(w map[string]any) bool { return w["approval_pending"] == true })
	s.workerNamed(key, "fresh", func(w map[string]any) bool { return w["approval_pending"] == false && w["status"] == "healthy" })
	for range 3 {
		r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "hi", false), bearer(key))
		if r.Status != 200 || r.Header.Get("X-Worker-Name") != "fresh" {
			t.Fatalf("after a gateway restart = %d %s %s", r.Status, r.Header.Get("X-Worker-Name"), r.Body)
		}
	}
	if n := len(s.events(key, "?event_type=approval_pending&worker_id="+id)); n != 1 {
		t.Fatalf("the approved worker was asked %d times", n)
	}
}
