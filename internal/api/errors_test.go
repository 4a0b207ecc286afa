package api

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorOf(t *testing.T) {
	refusal := &Error{Kind: KindCapacity, Message: "busy"}
	cases := []struct {
		name string
		err  error
		same *Error // the *Error expected back itself, if any
		kind Kind
	}{
		{"an *Error", refusal, refusal, KindCapacity},
		{"a wrapped *Error", fmt.Errorf("acquire: %w", refusal), refusal, KindCapacity},
		{"a deadline", context.DeadlineExceeded, nil, KindTimeout},
		{"a wrapped deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), nil, KindTimeout},
		{"anything else", errors.New("disk on fire"), nil, KindInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ErrorOf(c.err)
			if c.same != nil && got != c.same {
				t.Fatalf("ErrorOf(%v) = %p, want the error it carries, %p", c.err, got, c.same)
			}
			if got.Kind != c.kind {
				t.Fatalf("ErrorOf(%v).Kind = %v, want %v", c.err, got.Kind, c.kind)
			}
			if c.same == nil && !errors.Is(got, c.err) {
				t.Fatalf("ErrorOf(%v) = %v, which lost its cause", c.err, got)
			}
		})
	}
}

func BenchmarkErrorOf(b *testing.B) {
	err := error(&Error{Kind: KindCapacity, Message: "busy"})
	for b.Loop() {
		if ErrorOf(err) == nil {
			b.Fatal("nil")
		}
	}
}
