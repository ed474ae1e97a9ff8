// Package clock provides the lab's clocks. NAT mapping lifetimes and other
// lab-side timeouts read a Clock instead of time.Now so a test can jump hours
// ahead in an instant, while traffic itself keeps flowing in real time (the
// gVisor stacks and link impairments run on the time package's clock). Inside
// a testing/synctest bubble that clock, and so Real and Lab, is the bubble's
// virtual clock; see docs/VIRTUAL_TIME.md.
package clock

import (
	"sync/atomic"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Lab is the wall clock plus an offset that tests advance. Its zero value
// reads the wall clock. Safe for concurrent use.
type Lab struct {
	offset atomic.Int64 // nanoseconds added to the wall clock
}

// Now returns the wall clock plus every Advance so far.
func (c *Lab) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Advance moves the clock forward by d. Negative d is ignored: lab time
// never runs backwards.
func (c *Lab) Advance(d time.Duration) {
	if d > 0 {
		c.offset.Add(int64(d))
	}
}

// Offset reports how far the clock has been advanced in total.
func (c *Lab) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Manual is a clock that only moves when told to. Useful for pure-logic
// tests. Its zero value starts at the zero time; use NewManual for a start.
// Safe for concurrent use.
type Manual struct {
	now atomic.Int64 // unix nanoseconds
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual {
	m := &Manual{}
	m.now.Store(start.UnixNano())
	return m
}

// Now returns the manual time.
func (m *Manual) Now() time.Time { return time.Unix(0, m.now.Load()) }

// Advance moves the clock forward by d; negative d is ignored.
func (m *Manual) Advance(d time.Duration) {
	if d > 0 {
		m.now.Add(int64(d))
	}
}
