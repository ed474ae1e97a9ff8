package fabric

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/lab/pcapng"
)

const (
	dirNone = pcapng.DirUnknown
	dirIn   = pcapng.DirInbound
	dirOut  = pcapng.DirOutbound
)

// tap writes frames seen at one capture point to a pcapng interface.
type tap struct {
	w   *pcapng.Writer
	id  int
	clk func() time.Time
	in  *instants // in a bubble: records wait for the end of their instant
}

func (t *tap) write(f []byte, dir pcapng.Direction, comment string) {
	p := pcapng.Packet{Interface: t.id, Time: t.clk(), Data: f, Dir: dir, Comment: comment}
	if t.in != nil && t.in.record(t, p) {
		return
	}
	// A failing capture must not disturb traffic; the writer remembers its
	// first error and Capture's caller sees it on Close/Flush.
	_ = t.w.WritePacket(p)
}

// CaptureInterface records every frame the interface sends and receives,
// including frames its owner drops (with the reason as a packet comment), to
// w as Ethernet frames. Several capture points may share one Writer. Capture
// stops when StopCapture is called or the fabric closes; the caller closes w.
func (ifc *Interface) CaptureInterface(w *pcapng.Writer) error {
	t, err := newTap(w, ifc.network.f, pcapng.Interface{
		Name:        ifc.String(),
		Description: fmt.Sprintf("%s %v on %s", ifc, ifc.addr, ifc.network),
		LinkType:    pcapng.LinkTypeEthernet,
	})
	if err != nil {
		return fmt.Errorf("capture %s: %w", ifc, err)
	}
	ifc.tap.Store(t)
	return nil
}

// StopCapture stops capturing on the interface.
func (ifc *Interface) StopCapture() { ifc.tap.Swap(nil).stop() }

// Capture records every frame crossing the network segment (after the
// sender's egress impairments, before the receiver's ingress impairments) to w.
// Frames a router on the segment dropped are recorded again, inbound, with
// the router's interface and the reason as a packet comment; a frame that
// created a NAT mapping carries the mapping as its comment.
func (n *Network) Capture(w *pcapng.Writer) error {
	t, err := newTap(w, n.f, pcapng.Interface{
		Name:        n.name,
		Description: n.String(),
		LinkType:    pcapng.LinkTypeEthernet,
	})
	if err != nil {
		return fmt.Errorf("capture %s: %w", n, err)
	}
	n.tap.Store(t)
	return nil
}

// StopCapture stops capturing on the network.
func (n *Network) StopCapture() { n.tap.Swap(nil).stop() }

// stop writes what t still holds back for the end of its instant. t may
// be nil.
func (t *tap) stop() {
	if t != nil && t.in != nil {
		t.in.flushTap(t)
	}
}

func newTap(w *pcapng.Writer, f *Fabric, ifc pcapng.Interface) (*tap, error) {
	id, err := w.AddInterface(ifc)
	if err != nil {
		return nil, err
	}
	return &tap{w: w, id: id, clk: f.clock.Now, in: f.inst}, nil
}

// segmentDropNote is the comment on a dropped frame in a segment's capture,
// which, unlike the interface's own, must say who dropped it.
func segmentDropNote(ifc *Interface, reason string) string {
	if strings.HasPrefix(reason, "dropped") {
		return ifc.String() + ": " + reason
	}
	return ifc.String() + ": dropped: " + reason
}

// notes carries capture comments (a new NAT mapping) from the interface that
// transmits a frame to the segment capture that records it after the egress
// pipe, which may delay, reorder or lose the frame. Frames are keyed by their
// first byte's address: a pooled frame is not reused before the pipe
// delivers or releases it, and either takes its note. Notes are rare (one
// per mapping), so the hot path costs one atomic load.
type notes struct {
	n atomic.Int32 // len(m), read without mu

	mu sync.Mutex // guards the following fields
	m  map[*byte]string
}

func (ns *notes) hold(f []byte, note string) {
	if len(f) == 0 {
		return
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.m == nil {
		ns.m = make(map[*byte]string)
	}
	ns.m[&f[0]] = note
	ns.n.Store(int32(len(ns.m)))
}

// take returns and forgets f's note, if any.
func (ns *notes) take(f []byte) string {
	if ns.n.Load() == 0 || len(f) == 0 {
		return ""
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	note, ok := ns.m[&f[0]]
	if ok {
		delete(ns.m, &f[0])
		ns.n.Store(int32(len(ns.m)))
	}
	return note
}

// releaseFrame is the egress pipes' Release: a frame they dropped never
// reaches the segment, so its note goes with it.
func (n *Network) releaseFrame(f []byte) {
	n.notes.take(f)
	putFrame(f)
}
