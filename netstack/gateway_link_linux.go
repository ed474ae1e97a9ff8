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
	// filter sees each packet read: head holds its first bytes (at least
	// its IPv4 header, when it has one), rest the others, size its length
	// in all. False: the packet was handled or dropped.
	filter func(head []byte, size int, rest []byte) bool

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

func newFDLink(f *os.File, mtu int, header []byte, filter func([]byte, int, []byte) bool) (*fdLink, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netstack: gateway: device: %w", err)
	}
	return &fdLink{file: f, raw: raw, mtu: mtu, header: header, filter: filter}, nil
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
	for {
		head := buffer.NewViewSize(linkHeadSize)
		if body == nil {
			body = buffer.NewViewSize(len(l.header) + l.mtu - linkHeadSize)
		}
		n, err := l.readv(head.AsSlice(), body.AsSlice())
		if err != nil {
			head.Release()
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // closed (os.ErrClosed), or the device is gone
		}
		hn := min(n, head.Size())
		head.CapLength(hn)
		var rest []byte
		if n > hn {
			rest = body.AsSlice()[:n-hn]
		}
		pkt, ok := l.strip(head.AsSlice())
		d := l.dispatcher.Load()
		if !ok || !l.filter(pkt, len(pkt)+len(rest), rest) || d == nil {
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
		pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buf})
		(*d).DeliverNetworkPacket(ipv4.ProtocolNumber, pb)
		pb.DecRef()
	}
}

// readv reads one packet into head and body, waiting for the device to
// be readable.
func (l *fdLink) readv(head, body []byte) (int, error) {
	var (
		n    int
		rerr error
	)
	iovs := [][]byte{head, body}
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

// writev writes one packet made of bufs, after the link header.
func (l *fdLink) writev(bufs [][]byte) error {
	if len(l.header) > 0 {
		bufs = append([][]byte{l.header}, bufs...)
	}
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
func (g *Gateway) inbound(head []byte, size int, rest []byte) bool {
	if len(rest) > 0 && len(head) >= header.IPv4MinimumSize &&
		header.IPv4(head).TransportProtocol() == header.ICMPv4ProtocolNumber {
		head = append(head[:len(head):len(head)], rest...)
	}
	switch classify(head, size, g.cfg.Agent) {
	case packetDeliver:
		return true
	case packetEcho:
		g.echo(head)
	default:
		g.stats.dropped.Add(1)
	}
	return false
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
