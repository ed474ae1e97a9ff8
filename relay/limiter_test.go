package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLimiter(t *testing.T) {
	t0 := time.Unix(100, 0)
	l := newLimiter(10, 3) // 10/s, burst 3
	for i := range 3 {
		assert.True(t, l.allow(t0), "burst packet %d", i)
	}
	assert.False(t, l.allow(t0), "beyond the burst")
	assert.False(t, l.allow(t0.Add(50*time.Millisecond)), "half a token refilled")
	assert.True(t, l.allow(t0.Add(100*time.Millisecond)), "one token refilled")
	assert.False(t, l.allow(t0.Add(100*time.Millisecond)))
	// A long pause refills to the burst, not beyond.
	later := t0.Add(time.Hour)
	for range 3 {
		assert.True(t, l.allow(later))
	}
	assert.False(t, l.allow(later))

	var unlimited *limiter = newLimiter(-1, 0)
	assert.Nil(t, unlimited)
	assert.True(t, unlimited.allow(t0))
}
