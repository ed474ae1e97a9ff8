package runner

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
)

// TestResourcesCountsTheBubble: in a bubble, Resources counts that
// bubble's goroutines, not the process's (the test framework, other
// bubbles).
func TestResourcesCountsTheBubble(t *testing.T) {
	outside := make(chan struct{})
	defer close(outside)
	for range 50 {
		go func() { <-outside }() // not in the bubble: must not count
	}
	synctest.Test(t, func(t *testing.T) {
		base := (&Lab{}).Resources().Goroutines
		assert.Less(t, base, 10, "only the bubble's own goroutines, not the 50 outside")
		stop := make(chan struct{})
		for range 5 {
			go func() { <-stop }()
		}
		synctest.Wait()
		r := (&Lab{}).Resources()
		assert.Equal(t, "bubble", r.Scope)
		assert.Equal(t, base+5, r.Goroutines, "the five started in the bubble")
		assert.Positive(t, r.HeapLive)
		assert.GreaterOrEqual(t, r.HeapInuse, r.HeapLive, "spans in use hold every live object")
		close(stop)
	})
	r := (&Lab{}).Resources()
	assert.Equal(t, "process", r.Scope)
	assert.GreaterOrEqual(t, r.Goroutines, 51)
}
