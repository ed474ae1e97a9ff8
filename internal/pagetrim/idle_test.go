package pagetrim

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIdle: a release once settled, then one after each collection that
// follows the one before by Quiet or more, never after one that follows
// it sooner; Idle returns when ctx ends.
func TestIdle(t *testing.T) {
	var releases atomic.Int32
	release := func() (Stats, error) { releases.Add(1); return Stats{}, nil }
	var clock atomic.Int64 // seconds since the test's epoch
	epoch := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return epoch.Add(time.Duration(clock.Load()) * time.Second) }

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { idle(ctx, Config{Settle: time.Millisecond, Quiet: time.Minute}, release, now) })
	defer wg.Wait()
	defer cancel()

	require.Eventually(t, func() bool { return releases.Load() == 1 }, 10*time.Second, time.Millisecond)
	// Collections in quick succession: a busy process's.
	for range 5 {
		runtime.GC()
	}
	clock.Add(59)
	runtime.GC()
	time.Sleep(50 * time.Millisecond) // nothing to poll for: nothing must happen
	assert.Equal(t, int32(1), releases.Load(), "collections less than Quiet apart")

	// A collection a minute or more after the one before: an idle process's.
	clock.Add(60)
	require.Eventually(t, func() bool {
		runtime.GC()
		return releases.Load() == 2
	}, 10*time.Second, 10*time.Millisecond)
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int32(2), releases.Load(), "the next collection follows at once")
}

// TestIdleEndsBeforeSettling: a ctx that ends first leaves nothing
// released.
func TestIdleEndsBeforeSettling(t *testing.T) {
	var calls atomic.Int32
	count := func() (Stats, error) { calls.Add(1); return Stats{}, nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	idle(ctx, Config{Settle: time.Hour}, count, time.Now)
	assert.Zero(t, calls.Load())
}
