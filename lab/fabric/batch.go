package fabric

import (
	"sync"
	"time"
)

// Frames cross the fabric in runs where they can: a host's batch send,
// what a router makes of one received batch, what a delayed link finds due
// at one wake. A run goes through an egress pipe, the switch and an
// ingress pipe under one lock each and lands in the next receive queue with
// one wake-up, so the goroutine behind that queue handles the run at once
// instead of waking once per frame. Order within a run is kept; captures
// still see every frame.

// pushBatch enqueues frames, taking ownership of each (not of the slice).
// What does not fit is dropped, as push drops.
func (q *rxQueue) pushBatch(frames [][]byte) {
	q.mu.Lock()
	room := q.limit - len(q.frames)
	if q.closed {
		room = 0
	}
	take := min(max(room, 0), len(frames))
	first := len(q.frames) == 0 && take > 0
	q.frames = append(q.frames, frames[:take]...)
	q.mu.Unlock()
	if rest := frames[take:]; len(rest) > 0 {
		q.dropped.Add(uint64(len(rest)))
		for _, f := range rest {
			putFrame(f)
		}
	}
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// receiveBatch is the ingress pipe's DeliverBatch: capture, then queue.
func (ifc *Interface) receiveBatch(frames [][]byte) {
	if t := ifc.tap.Load(); t != nil {
		for _, f := range frames {
			t.write(f, dirIn, "")
		}
	}
	ifc.rx.pushBatch(frames)
}

// transmitBatch sends complete frames onto the network in order, taking
// ownership of each (not of the slice).
func (ifc *Interface) transmitBatch(frames [][]byte) {
	if ifc.network.f.inst != nil {
		for _, f := range frames {
			ifc.transmitNote(f, "") // each is ordered in its instant (instant.go)
		}
		return
	}
	if t := ifc.tap.Load(); t != nil {
		for _, f := range frames {
			t.write(f, dirOut, "")
		}
	}
	ifc.egress.SendBatch(frames)
}

// txFrames holds the frame lists of sends being built.
var txFrames = sync.Pool{New: func() any { return new([][]byte) }}

// transmitFrames sends the frames listed in out as one run and empties
// the list for reuse.
func (ifc *Interface) transmitFrames(out *[][]byte) {
	if len(*out) > 0 {
		ifc.transmitBatch(*out)
	}
	clear(*out)
	*out = (*out)[:0]
}

// switchBatch is the egress pipes' DeliverBatch: each run of frames for
// one port goes to that port's ingress pipe in one call.
func (n *Network) switchBatch(frames [][]byte) {
	if n.f.inst != nil || n.tap.Load() != nil {
		for _, f := range frames {
			n.switchFrame(f) // ordered or captured frame by frame, with their notes
		}
		return
	}
	for len(frames) > 0 {
		dst := n.portFor(frames[0])
		run := 1
		for run < len(frames) && n.portFor(frames[run]) == dst {
			run++
		}
		if dst == nil {
			n.unknownDst.Add(uint64(run))
			for _, f := range frames[:run] {
				putFrame(f)
			}
		} else {
			dst.ingress.SendBatch(frames[:run])
		}
		frames = frames[run:]
	}
}

// txBatch collects what a router sends while it handles one received
// batch, per interface out, and sends each interface's frames as one run
// at the end. It belongs to the receiving interface's goroutine. It also
// holds the batch's time: the NAT reads one clock per batch, not per
// frame.
type txBatch struct {
	active bool
	now    time.Time
	outs   []txRun
}

type txRun struct {
	ifc    *Interface
	frames [][]byte
}

// begin starts collecting for one received batch.
func (b *txBatch) begin(now time.Time) {
	b.active, b.now = true, now
}

// add queues f for out, or sends it at once outside a batch. A frame
// with a capture note goes at once, after what out already holds, so the
// note stays with its frame and the order holds.
func (b *txBatch) add(out *Interface, f []byte, note string) {
	if !b.active || out.network.f.inst != nil {
		out.transmitNote(f, note)
		return
	}
	i := 0
	for i < len(b.outs) && b.outs[i].ifc != out {
		i++
	}
	if i == len(b.outs) {
		b.outs = append(b.outs, txRun{ifc: out})
	}
	if note != "" {
		b.flushRun(&b.outs[i])
		out.transmitNote(f, note)
		return
	}
	b.outs[i].frames = append(b.outs[i].frames, f)
}

// end sends everything collected and stops collecting.
func (b *txBatch) end() {
	for i := range b.outs {
		b.flushRun(&b.outs[i])
	}
	b.active = false
}

func (b *txBatch) flushRun(r *txRun) { r.ifc.transmitFrames(&r.frames) }
