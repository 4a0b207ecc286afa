package pgstore

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

// Records are flushed a full batch at a time as they come, and what is
// left when done; an error of flush is returned where it happened.
func TestBatches(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		n       int
		failAt  int // the flush that fails, counting from 1; 0: none
		want    [][]int
		wantErr bool
	}{
		{"none", 0, 0, nil, false},
		{"less than a batch", 1, 0, [][]int{{0}}, false},
		{"whole batches", 4, 0, [][]int{{0, 1}, {2, 3}}, false},
		{"and the rest", 5, 0, [][]int{{0, 1}, {2, 3}, {4}}, false},
		{"a full batch fails", 5, 2, [][]int{{0, 1}, {2, 3}}, true},
		{"the rest fails", 5, 3, [][]int{{0, 1}, {2, 3}, {4}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][]int
			b := newBatches(func(items []int) error {
				got = append(got, slices.Clone(items))
				if len(got) == tt.failAt {
					return boom
				}
				return nil
			})
			b.size = 2
			var err error
			for i := 0; i < tt.n && err == nil; i++ {
				err = b.add(i)
			}
			if err == nil {
				err = b.done()
			}
			if !reflect.DeepEqual(got, tt.want) || errors.Is(err, boom) != tt.wantErr {
				t.Fatalf("flushed %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
			if err == nil {
				if err := b.done(); err != nil || len(got) != len(tt.want) {
					t.Fatalf("done again flushed %v, %v", got, err)
				}
			}
		})
	}
}
