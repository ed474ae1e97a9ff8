package fabric

import (
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/latticelab/lattice/netx/gvnet"
)

// endpoint is the gVisor link endpoint of a host interface: the host's stack
// writes IP packets into it and it frames them onto the fabric; frames the
// interface receives are handed back to the stack. No ARP: the fabric knows
// every neighbour's MAC.
type endpoint struct {
	ifc        *Interface
	udp        *udpStack // claims UDP datagrams before gVisor sees them
	mtu        atomic.Uint32
	dispatcher atomic.Pointer[stack.NetworkDispatcher]

	noNeighbor atomic.Uint64
}

var _ stack.LinkEndpoint = (*endpoint)(nil)

func newEndpoint(ifc *Interface, udp *udpStack) *endpoint {
	e := &endpoint{ifc: ifc, udp: udp}
	e.mtu.Store(uint32(ifc.mtu))
	ifc.handle = e.deliver
	return e
}

// WritePackets frames each packet for its next hop and transmits it. Packets
// whose next hop is not on the segment are dropped, as a real host's would be
// after ARP gave up.
func (e *endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	out := txFrames.Get().(*[][]byte)
	defer func() {
		e.ifc.transmitFrames(out) // one run (batch.go)
		txFrames.Put(out)
	}()
	for _, pkt := range pkts.AsSlice() {
		nh := pkt.EgressRoute.NextHop
		if nh.BitLen() == 0 {
			nh = pkt.EgressRoute.RemoteAddress
		}
		nb := e.ifc.network.neighbor(gvnet.FromTCPIP(nh))
		n++
		if nb == nil {
			e.noNeighbor.Add(1)
			continue
		}
		size := pkt.Size()
		f := getFrame(ethHeaderLen + size)
		et := uint16(etherTypeIPv4)
		if pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber {
			et = etherTypeIPv6
		}
		writeEth(f, nb.mac, e.ifc.mac, et)
		off := ethHeaderLen
		for _, s := range pkt.AsSlices() {
			off += copy(f[off:], s)
		}
		*out = append(*out, f)
	}
	return n, nil
}

// deliver hands a batch of received frames to the stack.
func (e *endpoint) deliver(batch [][]byte) {
	dp := e.dispatcher.Load()
	now := e.udp.h.f.clock.Now()
	for _, f := range batch {
		e.udp.pmtu.note(f, now)
		e.udp.noteICMPError(f)
		if whole, frag := e.udp.reasm.add(f, now); frag {
			if whole == nil {
				continue // held until the datagram is complete
			}
			f = whole
		}
		if e.udp.deliver(f) {
			continue // the socket owns the frame now
		}
		if dp != nil && len(f) > ethHeaderLen {
			var proto tcpip.NetworkProtocolNumber
			switch uint16(f[12])<<8 | uint16(f[13]) {
			case etherTypeIPv4:
				proto = header.IPv4ProtocolNumber
			case etherTypeIPv6:
				proto = header.IPv6ProtocolNumber
			}
			if proto != 0 {
				pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f[ethHeaderLen:])})
				(*dp).DeliverNetworkPacket(proto, pkt)
				pkt.DecRef()
			}
		}
		putFrame(f)
	}
}

func (e *endpoint) MTU() uint32                                  { return e.mtu.Load() }
func (e *endpoint) SetMTU(mtu uint32)                            { e.mtu.Store(mtu) }
func (e *endpoint) MaxHeaderLength() uint16                      { return 0 }
func (e *endpoint) LinkAddress() tcpip.LinkAddress               { return tcpip.LinkAddress(e.ifc.mac[:]) }
func (e *endpoint) SetLinkAddress(tcpip.LinkAddress)             {}
func (e *endpoint) Capabilities() stack.LinkEndpointCapabilities { return 0 }
func (e *endpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.dispatcher.Store(nil)
		return
	}
	e.dispatcher.Store(&d)
}
func (e *endpoint) IsAttached() bool                        { return e.dispatcher.Load() != nil }
func (e *endpoint) Wait()                                   {}
func (e *endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (e *endpoint) AddHeader(*stack.PacketBuffer)           {}
func (e *endpoint) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (e *endpoint) Close()                                  {}
func (e *endpoint) SetOnCloseAction(func())                 {}
