package fleet

import (
	"testing"
	"time"
)

func TestPick(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		cands    []candidate
		affinity string
		want     int
	}{
		{"none", nil, "", -1},
		{"all full", []candidate{{id: "a", active: 1, max: 1}, {id: "b", active: 2, max: 2}}, "", -1},
		{"only free one", []candidate{{id: "a", active: 1, max: 1}, {id: "b", active: 0, max: 1}}, "", 1},
		{"least share in use", []candidate{{id: "a", active: 2, max: 4}, {id: "b", active: 1, max: 4}}, "", 1},
		{"share beats count", []candidate{{id: "a", active: 1, max: 8}, {id: "b", active: 1, max: 2}}, "", 0},
		{"idle longest on a tie", []candidate{{id: "a", max: 1, lastAssigned: t0.Add(time.Second)}, {id: "b", max: 1, lastAssigned: t0}}, "", 1},
		{"id breaks a full tie", []candidate{{id: "b", max: 1}, {id: "a", max: 1}}, "", 1},
		{"affinity wins when free", []candidate{{id: "a", active: 0, max: 4}, {id: "b", active: 3, max: 4}}, "b", 1},
		{"affinity skipped when full", []candidate{{id: "a", active: 0, max: 4}, {id: "b", active: 4, max: 4}}, "b", 0},
		{"unknown affinity", []candidate{{id: "a", max: 1}}, "zz", 0},
		{"zero slots never picked", []candidate{{id: "a", max: 0}}, "", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pick(tt.cands, tt.affinity); got != tt.want {
				t.Fatalf("pick = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		backlog, slots int
		avg            time.Duration
		want           time.Duration
	}{
		{0, 1, 0, time.Second},
		{0, 1, 200 * time.Millisecond, time.Second},
		{9, 1, time.Second, 10 * time.Second},
		{9, 5, time.Second, 2 * time.Second},
		{1000, 1, 10 * time.Second, 60 * time.Second},
		{3, 0, 2 * time.Second, 8 * time.Second},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.backlog, tt.slots, tt.avg); got != tt.want {
			t.Errorf("retryAfter(%d, %d, %v) = %v, want %v", tt.backlog, tt.slots, tt.avg, got, tt.want)
		}
	}
}
