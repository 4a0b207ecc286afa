// Package clock reads time for what a step of the system clock must not
// move: billing, deadlines and retention measure elapsed time on the
// monotonic clock, which is never stepped, and keep the wall clock for
// the instants they store and show. A Watch notices the steps and logs
// them.
package clock

import (
	"sync/atomic"
	"time"
)

// Clock reads the wall clock and the monotonic clock.
type Clock interface {
	// Now is the wall clock: the time of day as the system has it, which
	// an operator or NTP may step forward or back.
	Now() time.Time
	// Mono reads the monotonic clock. Only the difference between two
	// readings means anything: the time elapsed between them.
	Mono() time.Duration
}

// System is the system's clock.
func System() Clock { return system{start: time.Now()} }

type system struct{ start time.Time }

func (s system) Now() time.Time { return time.Now() }

// Mono is time.Since, which subtracts the monotonic readings of now and
// start.
func (s system) Mono() time.Duration { return time.Since(s.start) }

// Stepped is the system clock with a wall clock that can be stepped, for
// tests: Step moves Now and leaves Mono alone, as setting the system clock
// does. Under testing/synctest both follow the bubble's clock.
type Stepped struct {
	start  time.Time
	offset atomic.Int64
}

// NewStepped returns a Stepped reading the system clock until stepped.
func NewStepped() *Stepped { return &Stepped{start: time.Now()} }

// Now carries no monotonic reading, so that subtracting two readings
// measures the wall clock, stepped, as it would after a round trip
// through storage.
func (s *Stepped) Now() time.Time {
	return time.Now().Add(time.Duration(s.offset.Load())).Round(0)
}

func (s *Stepped) Mono() time.Duration { return time.Since(s.start) }

// Step moves the wall clock by d.
func (s *Stepped) Step(d time.Duration) { s.offset.Add(int64(d)) }

// Steady is a wall clock that is never stepped: the wall clock as read
// when the Steady was made, advanced by the monotonic clock since. The
// difference between two of its readings is the time that elapsed between
// them however the system clock was set meanwhile. Its readings move
// apart from the wall clock by every step, until a new Steady (the next
// start of the process) reads the wall clock afresh.
type Steady struct {
	c    Clock
	wall time.Time
	mono time.Duration
}

// NewSteady anchors a Steady at c's wall clock now.
func NewSteady(c Clock) *Steady {
	mono := c.Mono()
	return &Steady{c: c, wall: c.Now().UTC().Round(0), mono: mono}
}

// Now is the steady time, in UTC and without a monotonic reading.
func (s *Steady) Now() time.Time { return s.at(s.c.Mono()) }

func (s *Steady) at(mono time.Duration) time.Time { return s.wall.Add(mono - s.mono) }

// Skew is how far the wall clock is ahead of s (behind when negative):
// the sum of the steps since s was made.
func (s *Steady) Skew() time.Duration {
	mono := s.c.Mono()
	return s.c.Now().Round(0).Sub(s.at(mono))
}

// FromWall is the steady time of the instant the wall clock read as t,
// supposing the wall clock was not stepped since. It converts the
// timestamps other parts of the process took with the wall clock.
func (s *Steady) FromWall(t time.Time) time.Time {
	return t.UTC().Round(0).Add(-s.Skew())
}

// NotAhead is the wall clock held back to the steady time when a step set
// it ahead, and how far it is ahead (zero when it is not). A cut-off for
// deleting what has aged out is safe computed from it: a forward step
// cannot make anything due early, while a step back, which only defers
// deletion, is followed.
func (s *Steady) NotAhead() (time.Time, time.Duration) {
	mono := s.c.Mono()
	steady, wall := s.at(mono), s.c.Now().UTC().Round(0)
	if ahead := wall.Sub(steady); ahead > 0 {
		return steady, ahead
	}
	return wall, 0
}
