package relay

import "testing"

// wire is a connection in miniature: bytes taken, how many of them the
// client acknowledged, and where the last write's events ended.
type wire struct {
	written, acked int64
	last           []int64
}

// write takes a write of events of the given sizes.
func (w *wire) write(sizes ...int64) {
	w.last = w.last[:0]
	for _, n := range sizes {
		w.written += n
		w.last = append(w.last, w.written)
	}
}

func (w *wire) Ends(dst []int64) []int64 { return append(dst, w.last...) }
func (w *wire) Delivered() int64         { return w.acked }

func TestReceipts(t *testing.T) {
	// Each chunk is 100 bytes on the wire and adds 10 characters of text;
	// the client acknowledges all but the last behind chunks as they go.
	tests := []struct {
		name   string
		chunks int
		behind int   // -1: the writer cannot tell
		acked  int64 // at the end
		want   int
	}{
		{"nothing written", 0, 0, 0, 0},
		{"no delivery known: every chunk written", 5, -1, 0, 50},
		{"all acknowledged", 5, 0, 500, 50},
		{"a chunk acknowledged in part does not count", 5, 5, 450, 40},
		{"none acknowledged", 5, 5, 0, 0},
		{"a reader keeping up", 10000, 3, 100 * 9998, 10 * 9998},
		{"a client that stopped early", 10000, 200, 100 * 9800, 10 * 9800},
		{"stopped at the very start", 3000, 3000, 100 * 7, 10 * 7},
		{"far behind", 10000, 10000, 100 * 9000, 10 * 9000},
		{"further behind than is followed: never more than received", 10000, 10000, 100 * 3000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &wire{}
			r := receipts{}
			if tt.behind >= 0 {
				r.d = w
			}
			for i := 1; i <= tt.chunks; i++ {
				w.write(100)
				r.wrote([]int{10 * i})
				// A chunk without text adds no mark.
				r.wrote([]int{10 * i})
				if tt.behind >= 0 {
					w.acked = 100 * int64(max(0, i-tt.behind))
				}
				if len(r.pending) > maxMarks {
					t.Fatalf("%d chunks followed", len(r.pending))
				}
			}
			w.acked = tt.acked
			if got := r.received(); got != tt.want {
				t.Fatalf("received %d characters, want %d", got, tt.want)
			}
		})
	}
}

// A reader that keeps up costs a few marks, not one per chunk.
func TestReceiptsStaySmallForAReader(t *testing.T) {
	w := &wire{}
	r := receipts{d: w}
	for i := 1; i <= 100000; i++ {
		w.write(100)
		r.wrote([]int{i})
		w.acked = w.written - 500
	}
	if cap(r.pending) > 2*firstMarks {
		t.Fatalf("room for %d marks kept for a reader five chunks behind", cap(r.pending))
	}
}

// The events of one write count one by one: a client that acknowledged
// part of the write is billed for the events it received whole.
func TestReceiptsOfAWriteOfManyEvents(t *testing.T) {
	w := &wire{}
	r := receipts{d: w}
	w.write(100)
	r.wrote([]int{10})
	// Four chunks in one write, the second without text.
	w.write(100, 100, 100, 100)
	r.wrote([]int{20, 20, 30, 40})
	for acked, want := range map[int64]int{0: 0, 99: 0, 100: 10, 250: 20, 300: 20, 399: 20, 400: 30, 499: 30, 500: 40} {
		w.acked = acked
		r2 := r
		r2.pending = append([]mark(nil), r.pending...)
		if got := r2.received(); got != want {
			t.Errorf("%d bytes acknowledged: %d characters received, want %d", acked, got, want)
		}
	}
	// A write that put nothing on the wire: its text goes with the next.
	w.last = w.last[:0]
	r.wrote([]int{50})
	w.write(100)
	r.wrote([]int{60})
	w.acked = w.written
	if got := r.received(); got != 60 {
		t.Errorf("after a write of nothing: %d characters received, want 60", got)
	}
}
