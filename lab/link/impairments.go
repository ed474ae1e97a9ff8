package link

import (
	"fmt"
	"math"
	"time"
)

// Impairments describe what one direction of a link does to packets. The zero
// value is a perfect link: every packet is delivered at once, in order.
type Impairments struct {
	// Latency is the one-way delay added to every packet.
	Latency time.Duration

	// Jitter adds a uniformly random offset in [-Jitter, +Jitter] to
	// Latency (the sum never goes below zero). Jitter alone never reorders:
	// a packet is never delivered before one sent earlier, as with netem's
	// rate-limited jitter.
	Jitter time.Duration

	// Loss is the probability in [0,1] that a packet is dropped.
	Loss float64

	// Duplicate is the probability in [0,1] that a packet is delivered
	// twice. The copy follows the original immediately and does not use
	// bandwidth.
	Duplicate float64

	// Reorder is the probability in [0,1] that a packet is held back by
	// ReorderDelay, so packets sent shortly after it overtake it.
	Reorder float64

	// ReorderDelay is how long a reordered packet is held back, on top of
	// Latency. If zero, 1ms.
	ReorderDelay time.Duration

	// Rate is the bandwidth in bits per second. If zero, unlimited. A
	// packet finishes serializing at max(now, previous departure) +
	// len*8/Rate; Latency and Jitter apply after that.
	Rate Rate

	// QueueBytes bounds the bytes waiting for the bandwidth limiter;
	// packets beyond it are tail-dropped (a packet arriving at an empty
	// queue is always accepted). If zero, what Rate carries in 50ms, at
	// least 16 KiB. Ignored without a Rate.
	QueueBytes int

	// MTU drops packets longer than MTU bytes. If zero, no limit.
	MTU int

	// Down drops every packet: the link is unplugged.
	Down bool
}

// Defaults and limits of the model.
const (
	defaultReorderDelay = time.Millisecond
	queueTime           = 50 * time.Millisecond // QueueBytes default, in time at Rate
	minQueueBytes       = 16 << 10
)

// Validate reports the first field that is out of range.
func (im Impairments) Validate() error {
	switch {
	case im.Latency < 0:
		return fmt.Errorf("link: negative latency %v", im.Latency)
	case im.Jitter < 0:
		return fmt.Errorf("link: negative jitter %v", im.Jitter)
	case !isProbability(im.Loss):
		return fmt.Errorf("link: loss %v outside [0,1]", im.Loss)
	case !isProbability(im.Duplicate):
		return fmt.Errorf("link: duplicate %v outside [0,1]", im.Duplicate)
	case !isProbability(im.Reorder):
		return fmt.Errorf("link: reorder %v outside [0,1]", im.Reorder)
	case im.ReorderDelay < 0:
		return fmt.Errorf("link: negative reorder delay %v", im.ReorderDelay)
	case im.Rate < 0:
		return fmt.Errorf("link: negative rate")
	case im.QueueBytes < 0:
		return fmt.Errorf("link: negative queue bytes %d", im.QueueBytes)
	case im.MTU < 0:
		return fmt.Errorf("link: negative mtu %d", im.MTU)
	}
	return nil
}

func isProbability(p float64) bool { return p >= 0 && p <= 1 } // false for NaN

// IsZero reports whether im is the perfect link.
func (im Impairments) IsZero() bool { return im == Impairments{} }

// shape is a validated Impairments with what Send needs precomputed. It is
// immutable once published through Pipe.shape.
type shape struct {
	im Impairments

	// fast: no delay, loss, duplication or down, so a packet that fits the
	// MTU goes straight to Deliver when nothing is pending.
	fast bool
	// delayed: Latency, Jitter, Reorder or Rate ask for the scheduler.
	delayed bool
	// random: Loss, Duplicate, Reorder or Jitter draw from a stream.
	random bool

	reorderDelay int64 // ns
	queueBytes   int64
}

func newShape(im Impairments) *shape {
	s := &shape{
		im:           im,
		delayed:      im.Latency > 0 || im.Jitter > 0 || im.Reorder > 0 || im.Rate > 0,
		reorderDelay: int64(im.ReorderDelay),
		queueBytes:   int64(im.QueueBytes),
	}
	s.fast = !s.delayed && im.Loss == 0 && im.Duplicate == 0 && !im.Down
	s.random = im.Loss > 0 || im.Duplicate > 0 || im.Reorder > 0 || im.Jitter > 0
	if s.reorderDelay == 0 {
		s.reorderDelay = int64(defaultReorderDelay)
	}
	if s.queueBytes == 0 && im.Rate > 0 {
		q := float64(im.Rate) / 8 * queueTime.Seconds()
		s.queueBytes = int64(min(q, math.MaxInt64/2))
		s.queueBytes = max(s.queueBytes, minQueueBytes)
	}
	return s
}
