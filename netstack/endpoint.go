package netstack

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// linkEndpoint is the TUNAdapter as gVisor sees it. It is a separate type
// because stack.LinkEndpoint and tun.Device both have MTU and Close methods,
// with different signatures.
type linkEndpoint TUNAdapter

// linkEndpoint returns the adapter's gVisor face, for a NIC.
func (a *TUNAdapter) linkEndpoint() *linkEndpoint { return (*linkEndpoint)(a) }

// gsoMaxSize is the largest segment gVisor hands over: the largest IP
// packet. gVisor's channel endpoint offers 32 KB; twice that halves the
// per-segment work of gVisor's TCP on the sending side.
const gsoMaxSize = 1<<16 - 1

// WritePackets implements stack.LinkWriter: it queues the packets for Read.
// It never blocks; when the queue is full the rest are dropped, as a NIC
// drops when its ring is full.
func (e *linkEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	a := (*TUNAdapter)(e)
	n := a.queueOut(pkts.AsSlice())
	if n == 0 && a.closed() {
		return 0, &tcpip.ErrClosedForSend{}
	}
	return n, nil
}

// MTU implements stack.LinkEndpoint.
func (e *linkEndpoint) MTU() uint32 { return uint32(e.mtu) }

// SetMTU implements stack.LinkEndpoint. The MTU is fixed at creation: it
// is what wireguard-go's padding and the peer's path were sized for.
func (e *linkEndpoint) SetMTU(uint32) {}

// MaxHeaderLength implements stack.LinkEndpoint: IP packets go to
// WireGuard bare.
func (e *linkEndpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: a tunnel has none.
func (e *linkEndpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint.
func (e *linkEndpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint. Receive checksums are
// "offloaded" because every packet Write delivers was authenticated by
// WireGuard's ChaCha20-Poly1305, which detects any change a checksum
// could; Linux's WireGuard marks decrypted packets CHECKSUM_UNNECESSARY for
// the same reason. Transmit checksums are computed by gVisor, or by Read
// for GSO segments, since the peer may verify them.
func (e *linkEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// GSOMaxSize implements stack.GSOEndpoint.
func (e *linkEndpoint) GSOMaxSize() uint32 { return gsoMaxSize }

// SupportedGSO implements stack.GSOEndpoint. "Host" GSO means gVisor leaves
// segmentation and the TCP checksum to the link, which Read does while
// copying into wireguard-go's buffers; gVisor's own software GSO would cut
// and checksum every segment in a separate pass.
func (e *linkEndpoint) SupportedGSO() stack.SupportedGSO { return stack.HostGSOSupported }

// Attach implements stack.LinkEndpoint.
func (e *linkEndpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.dispatcher.Store(nil)
		return
	}
	e.dispatcher.Store(&d)
}

// IsAttached implements stack.LinkEndpoint.
func (e *linkEndpoint) IsAttached() bool { return e.dispatcher.Load() != nil }

// Wait implements stack.LinkEndpoint: the adapter runs no goroutines.
func (e *linkEndpoint) Wait() {}

// ARPHardwareType implements stack.LinkEndpoint.
func (e *linkEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint.
func (e *linkEndpoint) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (e *linkEndpoint) ParseHeader(*stack.PacketBuffer) bool { return true }

// Close implements stack.LinkEndpoint; gVisor calls it when the stack
// closes.
func (e *linkEndpoint) Close() { _ = (*TUNAdapter)(e).Close() }

// SetOnCloseAction implements stack.LinkEndpoint.
func (e *linkEndpoint) SetOnCloseAction(func()) {}
