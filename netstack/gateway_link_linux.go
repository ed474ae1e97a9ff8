package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// fdLink is a gVisor link endpoint on a TUN file descriptor: one reader
// goroutine delivers each packet the filter passes; WritePackets writes
// each packet with one writev.
type fdLink struct {
	file   *os.File
	raw    syscall.RawConn
	mtu    int
	header []byte // link header before each packet; see GatewayConfig.LinkHeader
	vnet   bool   // a virtio_net_hdr before each packet; see GatewayConfig.VnetHdr
	// filter sees each packet read: vh its virtio_net_hdr (zero without
	// one), head its first bytes (at least its IPv4 header, when it has
	// one), rest the others, size its length in all. It answers whether
	// gVisor gets it, or the direct flow it belongs to; neither: the
	// packet was handled or dropped.
	filter func(vh *virtioNetHdr, head []byte, size int, rest []byte) (bool, *directFlow)
	// direct takes a packet of a direct flow, and owns buf.
	direct func(f *directFlow, vh *virtioNetHdr, buf buffer.Buffer)

	dispatcher atomic.Pointer[stack.NetworkDispatcher]
	wg         sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error
}

var _ stack.LinkEndpoint = (*fdLink)(nil)

// linkHeadSize is how much of a frame the reader puts in a view of its
// own: a link header and an IPv4 and a TCP header at their largest (60
// bytes each), rounded to a size of gVisor's chunk pools so that the view
// is full and the packet buffer appends the rest without copying into it.
// gVisor's IPv4 endpoint keeps a reference to the view holding the
// network header while it looks at the header again, and a view that is
// shared is copied whole (buffer.PullUp clones its chunk): with the
// headers in their own small view that copy is 256 bytes, not the
// packet's 64 KiB.
const linkHeadSize = 256

func newFDLink(f *os.File, mtu int, header []byte, vnet bool) (*fdLink, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netstack: gateway: device: %w", err)
	}
	return &fdLink{file: f, raw: raw, mtu: mtu, header: header, vnet: vnet}, nil
}

func (l *fdLink) start() { l.wg.Go(l.read) }

// read delivers packets until the device is closed. Each is read with one
// readv straight into two pooled gVisor views, its headers and the rest
// (at most 64 KiB, buffer.MaxChunkSize), which the packet buffer then
// owns: no copy between the device and the stack. A packet that fits the
// head view leaves the other for the next read, so small packets (the
// agent's ACKs) do not pay for clearing a 64 KiB chunk.
func (l *fdLink) read() {
	var body *buffer.View
	defer func() {
		if body != nil {
			body.Release()
		}
	}()
	var (
		vhb  [virtioNetHdrLen]byte
		vh   virtioNetHdr
		iovs [3][]byte
	)
	for {
		head := buffer.NewViewSize(linkHeadSize)
		if body == nil {
			body = buffer.NewViewSize(len(l.header) + l.mtu - linkHeadSize)
		}
		iov := append(iovs[:0], head.AsSlice(), body.AsSlice())
		if l.vnet {
			iov = append(iovs[:0], vhb[:], head.AsSlice(), body.AsSlice())
		}
		n, err := l.readv(iov)
		if err != nil {
			head.Release()
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // closed (os.ErrClosed), or the device is gone
		}
		if l.vnet {
			if n < virtioNetHdrLen {
				head.Release()
				continue
			}
			n -= virtioNetHdrLen
			vh.decode(vhb[:])
		}
		hn := min(n, head.Size())
		head.CapLength(hn)
		var rest []byte
		if n > hn {
			rest = body.AsSlice()[:n-hn]
		}
		pkt, ok := l.strip(head.AsSlice())
		d := l.dispatcher.Load()
		var (
			deliver bool
			flow    *directFlow
		)
		if ok {
			deliver, flow = l.filter(&vh, pkt, len(pkt)+len(rest), rest)
		}
		if flow == nil && (!deliver || d == nil) {
			head.Release()
			continue
		}
		head.TrimFront(len(l.header))
		buf := buffer.MakeWithView(head)
		if rest != nil {
			body.CapLength(len(rest))
			if err := buf.Append(body); err != nil {
				buf.Release()
				body = nil // the buffer took it over
				continue
			}
			body = nil
		}
		if flow != nil {
			l.direct(flow, &vh, buf)
			continue
		}
		pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buf})
		(*d).DeliverNetworkPacket(ipv4.ProtocolNumber, pb)
		pb.DecRef()
	}
}

// readv reads one packet into iovs, waiting for the device to be
// readable.
func (l *fdLink) readv(iovs [][]byte) (int, error) {
	var (
		n    int
		rerr error
	)
	err := l.raw.Read(func(fd uintptr) bool {
		n, rerr = unix.Readv(int(fd), iovs)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	if rerr == nil && n == 0 {
		return 0, io.EOF
	}
	return n, rerr
}

// strip removes the link header from a frame: only IPv4 frames pass.
func (l *fdLink) strip(b []byte) ([]byte, bool) {
	h := len(l.header)
	if h == 0 {
		return b, true
	}
	if len(b) <= h || b[h-2] != 0x08 || b[h-1] != 0x00 {
		return nil, false
	}
	return b[h:], true
}

// noVnetHdr is the virtio_net_hdr of a whole packet with its checksums.
var noVnetHdr [virtioNetHdrLen]byte

// writev writes one packet made of bufs, after the link header (and a
// virtio_net_hdr saying it is whole).
func (l *fdLink) writev(bufs [][]byte) error {
	if l.vnet {
		return l.writevVnet(noVnetHdr[:], bufs)
	}
	if len(l.header) > 0 {
		bufs = append([][]byte{l.header}, bufs...)
	}
	return l.write(bufs)
}

// writevVnet writes one packet made of bufs after its virtio_net_hdr vh
// (a link with GatewayConfig.VnetHdr: a TUN device, no link header).
func (l *fdLink) writevVnet(vh []byte, bufs [][]byte) error {
	var iovs [8][]byte
	return l.write(append(append(iovs[:0], vh), bufs...))
}

func (l *fdLink) write(bufs [][]byte) error {
	var werr error
	err := l.raw.Write(func(fd uintptr) bool {
		_, werr = unix.Writev(int(fd), bufs)
		return werr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return werr
}

// close closes the device, which ends the reader, and waits for it.
func (l *fdLink) close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.file.Close()
		l.wg.Wait()
	})
	return l.closeErr
}

// WritePackets implements stack.LinkWriter. A packet the device refuses
// is dropped, as a NIC drops; TCP recovers.
func (l *fdLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	for _, p := range pkts.AsSlice() {
		if err := l.writev(p.AsSlices()); err != nil {
			if errors.Is(err, os.ErrClosed) {
				if n == 0 {
					return 0, &tcpip.ErrClosedForSend{}
				}
				return n, nil
			}
		}
		n++
	}
	return n, nil
}

// MTU implements stack.LinkEndpoint.
func (l *fdLink) MTU() uint32 { return uint32(l.mtu) }

// SetMTU implements stack.LinkEndpoint; the device's MTU was set by the
// agent's side when it made the device.
func (l *fdLink) SetMTU(uint32) {}

// MaxHeaderLength implements stack.LinkEndpoint: TUN packets are bare IP.
func (l *fdLink) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint.
func (l *fdLink) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint.
func (l *fdLink) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint. The agent's kernel computed
// every checksum on the packets it sends, and nothing lies between it and
// this endpoint but a file descriptor, so receive checksums are not
// checked again.
func (l *fdLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// Attach implements stack.LinkEndpoint.
func (l *fdLink) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		l.dispatcher.Store(nil)
		return
	}
	l.dispatcher.Store(&d)
}

// IsAttached implements stack.LinkEndpoint.
func (l *fdLink) IsAttached() bool { return l.dispatcher.Load() != nil }

// Wait implements stack.LinkEndpoint.
func (l *fdLink) Wait() { l.wg.Wait() }

// ARPHardwareType implements stack.LinkEndpoint.
func (l *fdLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint.
func (l *fdLink) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (l *fdLink) ParseHeader(*stack.PacketBuffer) bool { return true }

// Close implements stack.LinkEndpoint; the Gateway closes the device.
func (l *fdLink) Close() {}

// SetOnCloseAction implements stack.LinkEndpoint.
func (l *fdLink) SetOnCloseAction(func()) {}

// packetKind is what the gateway does with a packet from the agent.
type packetKind int

const (
	packetDrop    packetKind = iota // not the agent's IPv4
	packetDeliver                   // to the gateway's stack
	packetEcho                      // an ICMP echo request, for Ping
)

// classify looks at a packet from the agent, size bytes long, of which b
// holds the first (at least its IPv4 header; all of it for ICMP): only
// well-formed IPv4 from the agent's address goes anywhere.
func classify(b []byte, size int, agent netip.Addr) packetKind {
	if len(b) < header.IPv4MinimumSize || header.IPVersion(b) != header.IPv4Version {
		return packetDrop
	}
	ip := header.IPv4(b)
	if !ip.IsValid(size) || len(b) < int(ip.HeaderLength()) || addrFromTCPIP(ip.SourceAddress()) != agent {
		return packetDrop
	}
	if ip.TransportProtocol() != header.ICMPv4ProtocolNumber {
		return packetDeliver
	}
	if len(b) < int(ip.TotalLength()) {
		return packetDrop // the caller did not gather the whole message
	}
	if ip.More() || ip.FragmentOffset() != 0 {
		return packetDrop // no fragmented pings
	}
	icmp := header.ICMPv4(ip.Payload())
	if len(icmp) < header.ICMPv4MinimumSize || icmp.Type() != header.ICMPv4Echo || icmp.Code() != 0 {
		return packetDrop // other ICMP from the agent goes nowhere
	}
	return packetEcho
}

// echoReply is the reply to req, an echo request classify passed: from its
// destination to its source, with its identifier, sequence and data.
func echoReply(req []byte) []byte {
	ip := header.IPv4(req)
	data := ip.Payload()
	out := make([]byte, header.IPv4MinimumSize+len(data))
	reply := header.IPv4(out)
	reply.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(out)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: ip.DestinationAddress(), DstAddr: ip.SourceAddress(),
	})
	reply.SetChecksum(^reply.CalculateChecksum())
	icmp := header.ICMPv4(out[header.IPv4MinimumSize:])
	copy(icmp, data)
	icmp.SetType(header.ICMPv4EchoReply)
	icmp.SetChecksum(0)
	icmp.SetChecksum(^checksum.Checksum(icmp, 0))
	return out
}

// udpProhibited is an ICMP "communication administratively prohibited"
// (RFC 1812 section 5.2.7.1) from a refused UDP flow's destination to the
// agent, quoting the flow's IPv4 and UDP headers, so that the agent's
// connected socket fails with EHOSTUNREACH instead of waiting.
func udpProhibited(id stack.TransportEndpointID) []byte {
	const quoted = header.IPv4MinimumSize + header.UDPMinimumSize
	out := make([]byte, header.IPv4MinimumSize+header.ICMPv4MinimumSize+quoted)
	q := out[header.IPv4MinimumSize+header.ICMPv4MinimumSize:]
	orig := header.IPv4(q)
	orig.Encode(&header.IPv4Fields{TotalLength: quoted, TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: id.RemoteAddress, DstAddr: id.LocalAddress})
	orig.SetChecksum(^orig.CalculateChecksum())
	header.UDP(q[header.IPv4MinimumSize:]).Encode(&header.UDPFields{SrcPort: id.RemotePort, DstPort: id.LocalPort, Length: header.UDPMinimumSize})
	ip := header.IPv4(out)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(out)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: id.LocalAddress, DstAddr: id.RemoteAddress})
	ip.SetChecksum(^ip.CalculateChecksum())
	icmp := header.ICMPv4(out[header.IPv4MinimumSize:])
	icmp.SetType(header.ICMPv4DstUnreachable)
	icmp.SetCode(header.ICMPv4AdminProhibited)
	icmp.SetChecksum(^checksum.Checksum(icmp, 0))
	return out
}

// inbound is the link's filter. An ICMP message longer than the link's
// head view (a ping with more data) is gathered into one slice, as echo
// replies with all of it.
func (g *Gateway) inbound(vh *virtioNetHdr, head []byte, size int, rest []byte) (bool, *directFlow) {
	if len(rest) > 0 && len(head) >= header.IPv4MinimumSize &&
		header.IPv4(head).TransportProtocol() == header.ICMPv4ProtocolNumber {
		head = append(head[:len(head):len(head)], rest...)
	}
	switch classify(head, size, g.cfg.Agent) {
	case packetDeliver:
		if g.direct != nil {
			return g.direct.outbound(head, rest)
		}
		return true, nil
	case packetEcho:
		g.echo(head)
	default:
		g.stats.dropped.Add(1)
	}
	return false, nil
}

// echo asks Ping about an echo request and, if dst answered, replies.
func (g *Gateway) echo(req []byte) {
	if g.cfg.Ping == nil {
		g.stats.dropped.Add(1)
		return
	}
	select {
	case g.pings <- struct{}{}:
	default:
		g.stats.dropped.Add(1)
		return
	}
	if !g.enter() {
		<-g.pings
		return
	}
	req = append([]byte(nil), req...)
	go func() {
		defer g.wg.Done()
		defer func() { <-g.pings }()
		dst := addrFromTCPIP(header.IPv4(req).DestinationAddress())
		ctx, cancel := context.WithTimeout(g.ctx, gatewayPingTimeout)
		err := g.cfg.Ping(ctx, dst)
		cancel()
		if err != nil {
			g.stats.dropped.Add(1)
			return
		}
		if g.link.writev([][]byte{echoReply(req)}) == nil {
			g.stats.pings.Add(1)
		}
	}()
}
