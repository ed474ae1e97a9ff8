package fabric

import (
	"fmt"
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
}

func (t *tap) write(f []byte, dir pcapng.Direction, comment string) {
	// A failing capture must not disturb traffic; the writer remembers its
	// first error and Capture's caller sees it on Close/Flush.
	_ = t.w.WritePacket(pcapng.Packet{Interface: t.id, Time: t.clk(), Data: f, Dir: dir, Comment: comment})
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
func (ifc *Interface) StopCapture() { ifc.tap.Store(nil) }

// Capture records every frame crossing the network segment (after the
// sender's egress impairments, before the receiver's ingress impairments) to w.
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
func (n *Network) StopCapture() { n.tap.Store(nil) }

func newTap(w *pcapng.Writer, f *Fabric, ifc pcapng.Interface) (*tap, error) {
	id, err := w.AddInterface(ifc)
	if err != nil {
		return nil, err
	}
	return &tap{w: w, id: id, clk: f.clock.Now}, nil
}
