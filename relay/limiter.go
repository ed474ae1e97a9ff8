package relay

import (
	"sync"
	"time"
)

// limiter is a token bucket bounding the packets a client sends per
// second. A nil *limiter allows everything.
type limiter struct {
	mu     sync.Mutex // guards the following
	rate   float64    // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

func newLimiter(rate, burst int) *limiter {
	if rate <= 0 {
		return nil
	}
	return &limiter{rate: float64(rate), burst: float64(burst), tokens: float64(burst)}
}

// allow takes one token if there is one.
func (l *limiter) allow(now time.Time) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
