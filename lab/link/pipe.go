package link

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Pipe. Only Deliver is required.
type Config struct {
	// Name identifies the pipe in logs. If zero, logs carry no name.
	Name string

	// Impairments start in effect; Set changes them later. If zero, a
	// perfect link.
	Impairments Impairments

	// Seed seeds the pipe's PRNG, the only source of randomness for loss,
	// duplication, reordering and jitter: the same seed and the same
	// packet sequence give the same decisions. If zero, the seed is 0
	// (still deterministic).
	Seed uint64

	// Flow, if set, names the flow each packet belongs to (EthernetFlow
	// reads Ethernet frames). Each flow then draws from its own stream,
	// seeded from (Seed, flow), so a flow's losses, duplicates, reorders
	// and jitter depend only on its own packets, not on how other traffic
	// interleaves with it. If nil, the pipe is one flow with one stream.
	Flow func(pkt []byte) uint64

	// Deliver receives every packet that crosses the link, together with
	// ownership of its buffer. The pipe calls it from one goroutine at a
	// time, in delivery order: from Send's caller when the packet is not
	// delayed, otherwise from the pipe's scheduler goroutine. Deliver must
	// not block and must not call Send, SendBatch or Close on the same pipe.
	Deliver func(pkt []byte)

	// DeliverBatch, if set, receives runs of packets that cross the link
	// together: a SendBatch that needs no delay, or what the scheduler
	// finds due at one wake. It owns the packets but not the slice, which
	// it must not keep. It is called under the same rules as Deliver, and
	// in its place for those runs. If nil, Deliver gets them one by one.
	DeliverBatch func(pkts [][]byte)

	// Release receives packets the pipe drops (impairments, a full
	// queue, Close), so their owner can reuse the buffers. If nil, dropped
	// packets are left to the garbage collector.
	Release func(pkt []byte)

	// Logger receives lifecycle events; packets are counted, never logged.
	// If nil, logs are discarded.
	Logger *slog.Logger
}

// Stats counts what a Pipe did. Every packet handed to Send and every
// duplicate ends up delivered, dropped or still pending:
// Sent+Duplicated = Delivered+DroppedLoss+DroppedQueue+DroppedMTU+
// DroppedDown+DroppedClosed+pending.
type Stats struct {
	Sent          uint64 // packets handed to Send
	Delivered     uint64 // packets passed to Deliver, duplicates included
	Duplicated    uint64 // extra copies made by Duplicate
	Reordered     uint64 // packets held back by Reorder
	DroppedLoss   uint64 // dropped by Loss
	DroppedQueue  uint64 // tail-dropped by a full QueueBytes (or the pipe's memory cap)
	DroppedMTU    uint64 // longer than MTU
	DroppedDown   uint64 // sent while Down
	DroppedClosed uint64 // sent after Close, or pending when it came
	Bytes         uint64 // bytes passed to Deliver
}

// Pipe is one direction of an emulated link. Send hands it packets; it
// applies its Impairments and passes survivors to Config.Deliver. All methods
// are safe for concurrent use.
type Pipe struct {
	deliver      func([]byte)
	deliverBatch func([][]byte)
	release      func([]byte)
	log          *slog.Logger
	epoch        time.Time // origin of nanotime, taken in New

	shape   atomic.Pointer[shape] // current impairments
	closed  atomic.Bool           // set with dmu and mu held
	pending atomic.Int64          // packets in the scheduler, not yet delivered

	// dmu serializes calls to deliver and guards the following fields. A
	// sender may deliver directly only while holding dmu and seeing
	// pending == 0, so it cannot overtake a packet the scheduler holds.
	dmu       sync.Mutex
	fastSent  uint64 // Sent by the lock-light path
	delivered uint64
	bytes     uint64

	// mu guards the following fields and the queue. Lock order: dmu, then mu.
	mu    sync.Mutex
	rng   rand.PCG // the stream when flow is nil
	flow  func([]byte) uint64
	seed  uint64
	flows map[uint64]*rand.PCG // per-flow streams when flow is set (flow.go)
	c     Stats                // Sent (slow path only), Duplicated, Reordered, Dropped*
	q     queue

	wake      chan struct{} // new earliest packet; capacity 1
	quit      chan struct{} // closed by Close to stop run
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns a Pipe. It starts its scheduler goroutine only once a delayed
// packet needs it; Close stops it.
func New(cfg Config) (*Pipe, error) {
	if cfg.Deliver == nil {
		return nil, ErrNoDeliver
	}
	if err := cfg.Impairments.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "link")
	if cfg.Name != "" {
		log = log.With("pipe", cfg.Name)
	}
	p := &Pipe{
		deliver:      cfg.Deliver,
		deliverBatch: cfg.DeliverBatch,
		release:      cfg.Release,
		log:          log,
		epoch:        time.Now(),
		wake:         make(chan struct{}, 1),
		quit:         make(chan struct{}),
	}
	p.rng.Seed(cfg.Seed, seedStream)
	p.seed, p.flow = cfg.Seed, cfg.Flow
	if p.flow != nil {
		p.flows = map[uint64]*rand.PCG{}
	}
	p.q.init()
	p.shape.Store(newShape(cfg.Impairments))
	return p, nil
}

// seedStream is the PCG stream constant paired with Config.Seed.
const seedStream = 0x9e3779b97f4a7c15

// Send hands pkt to the link and gives up ownership of it: it ends up in
// Deliver or, when dropped, in Release. Send never waits for a delay; it only
// takes short locks. A packet that needs no delay while nothing is pending is
// delivered before Send returns, in the caller's goroutine.
func (p *Pipe) Send(pkt []byte) {
	s := p.shape.Load()
	if s.fast && (s.im.MTU == 0 || len(pkt) <= s.im.MTU) {
		p.dmu.Lock()
		if p.pending.Load() == 0 && !p.closed.Load() {
			p.fastSent++
			p.delivered++
			p.bytes += uint64(len(pkt))
			p.deliver(pkt)
			p.dmu.Unlock()
			return
		}
		p.dmu.Unlock()
	}
	p.sendSlow(s, pkt)
}

// SendBatch is Send for several packets in order, taking ownership of
// each (not of the slice). On a link without impairments and with nothing
// pending they go to DeliverBatch in one call, under one lock; otherwise
// each meets the impairments as it would in Send.
func (p *Pipe) SendBatch(pkts [][]byte) {
	s := p.shape.Load()
	if s.fast && len(pkts) > 0 && fitsMTU(pkts, s.im.MTU) {
		p.dmu.Lock()
		if p.pending.Load() == 0 && !p.closed.Load() {
			p.fastSent += uint64(len(pkts))
			p.deliverRunLocked(pkts)
			p.dmu.Unlock()
			return
		}
		p.dmu.Unlock()
	}
	for _, pkt := range pkts {
		p.Send(pkt)
	}
}

// fitsMTU reports whether every packet fits mtu (zero: no limit).
func fitsMTU(pkts [][]byte, mtu int) bool {
	if mtu == 0 {
		return true
	}
	for _, pkt := range pkts {
		if len(pkt) > mtu {
			return false
		}
	}
	return true
}

// deliverRunLocked passes pkts to DeliverBatch, or one by one to Deliver.
// p.dmu must be held.
func (p *Pipe) deliverRunLocked(pkts [][]byte) {
	if p.deliverBatch == nil {
		for _, pkt := range pkts {
			p.deliverLocked(pkt)
		}
		return
	}
	for _, pkt := range pkts {
		p.bytes += uint64(len(pkt))
	}
	p.delivered += uint64(len(pkts))
	p.deliverBatch(pkts)
}

// sendSlow applies every impairment to pkt. Randomness is drawn in a fixed
// order (loss, duplicate, then reorder and jitter) that depends only on the
// impairments and the packet, never on timing, so a seed replays exactly;
// with Config.Flow, from the packet's flow's stream.
func (p *Pipe) sendSlow(s *shape, pkt []byte) {
	direct := !s.delayed
	if direct {
		p.dmu.Lock()
	}
	p.mu.Lock()
	p.c.Sent++
	var r *rand.PCG
	if s.random {
		r = p.flowStream(pkt)
	}
	var drop *uint64
	switch im := &s.im; {
	case p.closed.Load():
		drop = &p.c.DroppedClosed
	case im.Down:
		drop = &p.c.DroppedDown
	case im.MTU > 0 && len(pkt) > im.MTU:
		drop = &p.c.DroppedMTU
	case im.Loss > 0 && chance(r, im.Loss):
		drop = &p.c.DroppedLoss
	}
	dup := false
	if drop == nil {
		dup = s.im.Duplicate > 0 && chance(r, s.im.Duplicate)
		if direct && p.pending.Load() == 0 {
			if dup {
				p.c.Duplicated++
			}
			p.mu.Unlock()
			p.deliverLocked(pkt)
			if dup {
				p.deliverLocked(clone(pkt))
			}
			p.dmu.Unlock()
			return
		}
		if !p.scheduleLocked(s, r, pkt, dup) {
			drop = &p.c.DroppedQueue
		}
	}
	if drop != nil {
		*drop++
	}
	p.mu.Unlock()
	if direct {
		p.dmu.Unlock()
	}
	if drop != nil {
		p.releasePkt(pkt)
	}
}

// deliverLocked passes pkt to Deliver. p.dmu must be held.
func (p *Pipe) deliverLocked(pkt []byte) {
	p.delivered++
	p.bytes += uint64(len(pkt))
	p.deliver(pkt)
}

func (p *Pipe) releasePkt(pkt []byte) {
	if p.release != nil {
		p.release(pkt)
	}
}

func clone(pkt []byte) []byte {
	c := make([]byte, len(pkt))
	copy(c, pkt)
	return c
}

// Set replaces the impairments. Packets sent after Set returns see the new
// ones; packets already scheduled keep their delivery time, and new packets
// never overtake them unless the new impairments reorder.
func (p *Pipe) Set(im Impairments) error {
	if err := im.Validate(); err != nil {
		return err
	}
	if p.closed.Load() {
		return ErrClosed
	}
	p.shape.Store(newShape(im))
	p.log.Debug("impairments set", "impairments", im)
	return nil
}

// Impairments returns the impairments in effect.
func (p *Pipe) Impairments() Impairments { return p.shape.Load().im }

// Stats returns a snapshot of the counters.
func (p *Pipe) Stats() Stats {
	p.dmu.Lock()
	p.mu.Lock()
	st := p.c
	st.Sent += p.fastSent
	st.Delivered = p.delivered
	st.Bytes = p.bytes
	p.mu.Unlock()
	p.dmu.Unlock()
	return st
}

// Close stops the pipe: packets still pending are released, not delivered,
// later Sends release their packet at once, and Deliver is not called after
// Close returns. Close waits for the scheduler goroutine to exit. It is
// idempotent and always returns nil.
func (p *Pipe) Close() error {
	p.closeOnce.Do(func() {
		p.dmu.Lock()
		p.mu.Lock()
		p.closed.Store(true)
		started := p.q.started
		left := p.q.drain()
		p.pending.Add(-int64(len(left)))
		p.c.DroppedClosed += uint64(len(left))
		p.mu.Unlock()
		p.dmu.Unlock()
		if started {
			close(p.quit)
			p.wg.Wait()
		}
		for _, pkt := range left {
			p.releasePkt(pkt)
		}
		p.log.Debug("closed", "released", len(left))
	})
	return nil
}
