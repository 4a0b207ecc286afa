package e2e

import (
	"encoding/json"
	"testing"
)

// A script that sends a request and then reads the usage log finds its
// row at once, streamed or not, and the log and the totals agree.
func TestUsageReadsItsWrites(t *testing.T) {
	s, key := gateway(t)
	for i := range 20 {
		stream := i%2 == 1
		r := s.do("POST", "/v1/chat/completions", chatBody("sim-chat", "count me", stream), bearer(key))
		if r.Status != 200 {
			t.Fatalf("chat = %d %s", r.Status, r.Body)
		}
		var rows []map[string]any
		if err := json.Unmarshal(s.do("GET", "/api/v1/usage/logs?limit=1000", "", bearer(key)).Body, &rows); err != nil {
			t.Fatal(err)
		}
		sum := s.do("GET", "/api/v1/usage/summary?days=1", "", bearer(key)).JSON(t)
		if len(rows) != i+1 || rows[0]["id"] != r.Header.Get("X-Request-Id") || sum["requests"].(float64) != float64(i+1) {
			t.Fatalf("after request %d (stream %v): %d rows, newest %v, %v in the totals", i+1, stream, len(rows), rows[0]["id"], sum["requests"])
		}
	}
}
