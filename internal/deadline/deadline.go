// Package deadline turns net.Conn-style deadlines into channels, for
// connections implemented in user space (lab sockets, muxed sockets).
package deadline

import (
	"sync"
	"time"
)

// Deadline is a channel that is closed when a settable time passes. Its
// zero value has no deadline. Safe for concurrent use.
type Deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
	fired bool
	gen   uint64 // bumped by every Set, so a stale timer cannot fire
}

func (d *Deadline) chanLocked() chan struct{} {
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

// Expired returns a channel closed once the deadline has passed. Wait on
// a fresh call after every Set: a later Set may replace the channel.
func (d *Deadline) Expired() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.chanLocked()
}

// Set moves the deadline to t; the zero time removes it. A t in the past
// expires it at once.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.gen++
	if d.fired {
		d.ch, d.fired = make(chan struct{}), false
	}
	ch := d.chanLocked()
	if t.IsZero() {
		return
	}
	if dur := time.Until(t); dur > 0 {
		gen := d.gen
		d.timer = time.AfterFunc(dur, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.gen == gen && !d.fired {
				d.fired = true
				close(d.ch)
			}
		})
		return
	}
	d.fired = true
	close(ch)
}

// Stop cancels a pending timer; call it when the connection closes.
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
