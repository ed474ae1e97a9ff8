package clock

import (
	"testing"
	"time"
)

func TestLabAdvance(t *testing.T) {
	var c Lab
	before := time.Now()
	c.Advance(2 * time.Hour)
	c.Advance(-time.Hour) // ignored
	got := c.Now().Sub(before)
	if got < 2*time.Hour || got > 2*time.Hour+time.Minute {
		t.Fatalf("after Advance(2h) the lab clock is %v ahead, want ~2h", got)
	}
	if c.Offset() != 2*time.Hour {
		t.Fatalf("Offset = %v, want 2h", c.Offset())
	}
}

func TestManual(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewManual(start)
	m.Advance(90 * time.Second)
	if got := m.Now().Sub(start); got != 90*time.Second {
		t.Fatalf("manual clock moved %v, want 90s", got)
	}
}
