package fabric

import (
	"cmp"
	"slices"
	"sync"
	"testing/synctest"
	"time"

	"github.com/latticelab/lattice/lab/pcapng"
)

// In a testing/synctest bubble, goroutines that are runnable at one
// instant of the bubble's clock run in an order the Go runtime picks (its
// own random source, at GOMAXPROCS=1 too), so frames sent at one instant
// reached the links, and so the captures, in a different order from run to
// run, and a link that spaces or jitters its packets gave them different
// times. The fabric therefore orders each instant itself: frames handed to
// an interface's egress link or to a segment's switch, and capture
// records, are queued, and one goroutine waits (synctest.Wait) until every
// other goroutine of the bubble is blocked, which is when everything that
// instant's running goroutines send has been sent. It then writes the
// queued capture records and hands the frames on in a canonical order:
// by network, sending port and flow (ipPair: IP protocol, address pair,
// and the ports, or a fragment's datagram), and within one flow in the
// order they were sent, so nothing in a flow is reordered (a TCP flight,
// the fragments of a datagram keep their order). What that
// delivery starts at the same instant is queued and ordered again, until
// the bubble is idle and its clock moves on. Nothing is delayed: the
// frames cross at the instant they were sent.
//
// What this does not fix is what a frame holds: a host whose goroutines
// ran in another order may send other bytes (another IP ID, a key made
// from crypto/rand in another order). docs/VIRTUAL_TIME.md, Determinism.

// Stages of a queued frame.
const (
	stageEgress = iota // into an interface's egress link (transmitNote)
	stageSwitch        // out of an egress link, onto the segment's switch
)

// instantFrame is a frame waiting for the end of its instant.
type instantFrame struct {
	net   uint16 // network index
	stage uint8
	port  uint16 // sending port on the network
	flow  uint64 // ipPair
	seq   uint64 // order queued
	f     []byte
	note  string     // capture note (a new NAT mapping)
	ifc   *Interface // stageEgress: the sending interface
	n     *Network   // stageSwitch: the segment
}

// instantRec is a capture record waiting for the end of its instant.
type instantRec struct {
	t    *tap
	flow uint64
	seq  uint64
	p    pcapng.Packet // Data is a copy
}

// instants orders one bubble's instants (Config.OrderInstants). nil
// outside a bubble.
type instants struct {
	mu     sync.Mutex // guards the following fields
	frames []instantFrame
	recs   []instantRec
	seq    uint64
	closed bool
	// handing is set while run hands frames on. A frame that an egress
	// link with no delay switches then (from run's own goroutine, in the
	// order run sends) goes to inline and on at once, not a round later.
	handing bool
	inline  []instantFrame

	wake chan struct{} // capacity 1: something was queued
	quit chan struct{}
	stop sync.Once
	wg   sync.WaitGroup
}

// bubbled reports whether the caller runs in a testing/synctest bubble:
// the runtime gives a bubble's time no monotonic reading.
func bubbled() bool {
	now := time.Now()
	return now == now.Round(0) //nolint:staticcheck // == on purpose: Round(0) strips the monotonic reading, which Equal ignores
}

func newInstants() *instants {
	in := &instants{wake: make(chan struct{}, 1), quit: make(chan struct{})}
	in.wg.Add(1)
	go in.run()
	return in
}

// frame queues fr. It reports false after close, when the caller handles
// the frame itself.
func (in *instants) frame(fr instantFrame) bool {
	fr.flow = ipPair(fr.f)
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return false
	}
	if in.handing && fr.stage == stageSwitch {
		in.inline = append(in.inline, fr)
		in.mu.Unlock()
		return true
	}
	in.seq++
	fr.seq = in.seq
	in.frames = append(in.frames, fr)
	in.mu.Unlock()
	in.poke()
	return true
}

// record queues a capture record, copying its data. It reports false after
// close, when the caller writes it itself.
func (in *instants) record(t *tap, p pcapng.Packet) bool {
	flow := ipPair(p.Data)
	p.Data = append([]byte(nil), p.Data...)
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return false
	}
	in.seq++
	in.recs = append(in.recs, instantRec{t: t, flow: flow, seq: in.seq, p: p})
	in.mu.Unlock()
	in.poke()
	return true
}

func (in *instants) poke() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// run is the ordering goroutine: at each instant something was queued, it
// waits until the rest of the bubble is blocked and hands everything on,
// ordered, until nothing more comes.
func (in *instants) run() {
	defer in.wg.Done()
	for {
		select {
		case <-in.quit:
			in.drain()
			return
		case <-in.wake:
		}
		for {
			synctest.Wait()
			if !in.handOn() {
				break
			}
		}
	}
}

// handOn writes the queued capture records and delivers the queued frames,
// each in canonical order, and reports whether there were any.
func (in *instants) handOn() bool {
	in.mu.Lock()
	frames, recs := in.frames, in.recs
	in.frames, in.recs = nil, nil
	in.handing = true
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.handing = false
		in.mu.Unlock()
	}()
	writeRecs(recs)
	slices.SortFunc(frames, func(a, b instantFrame) int {
		return cmp.Or(cmp.Compare(a.net, b.net), cmp.Compare(a.stage, b.stage),
			cmp.Compare(a.port, b.port), cmp.Compare(a.flow, b.flow), cmp.Compare(a.seq, b.seq))
	})
	in.deliverFrames(frames)
	return len(frames) > 0 || len(recs) > 0
}

func (in *instants) deliverFrames(frames []instantFrame) {
	for i := range frames {
		fr := &frames[i]
		if fr.stage == stageEgress {
			fr.ifc.sendEgress(fr.f, fr.note)
		} else {
			fr.n.deliverSwitch(fr.f)
		}
		*fr = instantFrame{}
		in.mu.Lock()
		inline := in.inline
		in.inline = nil
		in.mu.Unlock()
		for _, fr := range inline {
			fr.n.deliverSwitch(fr.f)
		}
	}
}

// writeRecs writes capture records ordered by capture point, flow and the
// order they were taken.
func writeRecs(recs []instantRec) {
	slices.SortFunc(recs, func(a, b instantRec) int {
		return cmp.Or(cmp.Compare(a.t.id, b.t.id), cmp.Compare(a.flow, b.flow), cmp.Compare(a.seq, b.seq))
	})
	for i := range recs {
		// A failing capture must not disturb traffic (tap.write).
		_ = recs[i].t.w.WritePacket(recs[i].p)
	}
}

// close stops the ordering goroutine after handing on what is queued
// (frames go into links that are closing or closed, which drop them).
func (in *instants) close() {
	in.stop.Do(func() { close(in.quit) })
	in.wg.Wait()
}

// drain hands on everything queued, then refuses more.
func (in *instants) drain() {
	for in.handOn() {
	}
	in.mu.Lock()
	in.closed = true
	frames, recs := in.frames, in.recs
	in.frames, in.recs = nil, nil
	in.mu.Unlock()
	writeRecs(recs)
	in.deliverFrames(frames)
}

// flushTap writes t's queued records now: its capture is stopping, and its
// owner may close the writer next.
func (in *instants) flushTap(t *tap) {
	in.mu.Lock()
	var mine []instantRec
	in.recs = slices.DeleteFunc(in.recs, func(r instantRec) bool {
		if r.t == t {
			mine = append(mine, r)
			return true
		}
		return false
	})
	in.mu.Unlock()
	writeRecs(mine)
}

// ipPair keys an Ethernet frame by its flow as far as every fragment of an
// IP packet carries it: the EtherType and, for IPv4 and IPv6, the protocol
// (IPv6's first next header) and the two addresses; then, for a TCP or UDP
// packet that is not fragmented, its two ports, and for a fragment, the
// datagram's identification (the same in each of its fragments, so they
// keep their order and nothing overtakes its first fragment). Two
// connections between the same addresses opened at one instant (a node's
// registration and its control session dialed ahead) are so ordered by
// their ports, not by which goroutine ran first. FNV-1a, so the key and the
// order it gives are the same in every process.
func ipPair(f []byte) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(b []byte) {
		for _, c := range b {
			h = (h ^ uint64(c)) * prime
		}
	}
	if len(f) < ethHeaderLen {
		mix(f)
		return h
	}
	mix(f[12:14])
	ports := func(proto byte, l4 []byte) {
		if (proto == 6 || proto == 17) && len(l4) >= 4 {
			mix(l4[:4])
		}
	}
	switch ip := f[ethHeaderLen:]; {
	case f[12] == 0x08 && f[13] == 0x00 && len(ip) >= 20:
		mix(ip[9:10])
		mix(ip[12:20])
		ihl := int(ip[0]&0x0f) * 4
		switch fragmented := ip[6]&0x20 != 0 || (ip[6]&0x1f != 0 || ip[7] != 0); {
		case fragmented:
			mix(ip[4:6])
		case ihl >= 20 && len(ip) >= ihl:
			ports(ip[9], ip[ihl:])
		}
	case f[12] == 0x86 && f[13] == 0xdd && len(ip) >= 40:
		mix(ip[6:7])
		mix(ip[8:40])
		switch next := ip[6]; {
		case next == 44 && len(ip) >= 48: // a fragment header
			mix(ip[44:48])
		default:
			ports(next, ip[40:])
		}
	}
	return h
}
