package netstack

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/latticelab/lattice/netx/gvnet"
)

// seg describes a TCP segment for tests; bytes builds it with correct
// lengths and checksums.
type seg struct {
	src, dst netip.AddrPort // IPv4 or IPv6, both the same family
	seq, ack uint32
	flags    header.TCPFlags
	window   uint16
	opts     []byte // a multiple of 4 bytes
	payload  []byte
	ttl, tos uint8
	id       uint16
	ipOpts   []byte // IPv4 options, a multiple of 4 bytes
	badCsum  bool   // flip a bit of the TCP checksum
}

var (
	flowA4 = seg{src: netip.MustParseAddrPort("100.64.1.2:40000"), dst: netip.MustParseAddrPort("100.64.1.3:80")}
	flowB4 = seg{src: netip.MustParseAddrPort("100.64.1.2:40001"), dst: netip.MustParseAddrPort("100.64.1.3:80")}
	flowA6 = seg{src: netip.MustParseAddrPort("[fd7a::2]:40000"), dst: netip.MustParseAddrPort("[fd7a::3]:80")}
	// tsOpts is a NOP, NOP, timestamp option block as gVisor and Linux
	// send it.
	tsOpts = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
)

// data returns n bytes that differ from those of other offsets.
func data(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((off + i) * 7 / 3)
	}
	return b
}

// with returns s carrying seq, flags and payload.
func (s seg) with(seq uint32, flags header.TCPFlags, payload []byte) seg {
	s.seq, s.flags, s.payload = seq, flags, payload
	if s.ack == 0 {
		s.ack = 1000
	}
	if s.window == 0 {
		s.window = 5000
	}
	if s.ttl == 0 {
		s.ttl = 64
	}
	if s.opts == nil {
		s.opts = tsOpts
	}
	return s
}

func (s seg) v6() bool { return s.src.Addr().Is6() }

func (s seg) bytes() []byte {
	tcpLen := header.TCPMinimumSize + len(s.opts) + len(s.payload)
	ipLen := header.IPv4MinimumSize + len(s.ipOpts)
	if s.v6() {
		ipLen = header.IPv6MinimumSize
	}
	b := make([]byte, ipLen+tcpLen)
	src, dst := gvnet.ToTCPIP(s.src.Addr()), gvnet.ToTCPIP(s.dst.Addr())
	if s.v6() {
		header.IPv6(b).Encode(&header.IPv6Fields{
			PayloadLength: uint16(tcpLen), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: s.ttl, TrafficClass: s.tos, SrcAddr: src, DstAddr: dst,
		})
	} else {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{
			TOS: s.tos, TotalLength: uint16(len(b)), ID: s.id, Flags: header.IPv4FlagDontFragment,
			TTL: s.ttl, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst,
		})
		// Encode writes no options; add the raw ones.
		ip.SetHeaderLength(uint8(ipLen))
		copy(b[header.IPv4MinimumSize:ipLen], s.ipOpts)
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	th := header.TCP(b[ipLen:])
	th.Encode(&header.TCPFields{
		SrcPort: s.src.Port(), DstPort: s.dst.Port(), SeqNum: s.seq, AckNum: s.ack,
		DataOffset: uint8(header.TCPMinimumSize + len(s.opts)), Flags: s.flags, WindowSize: s.window,
	})
	copy(th[header.TCPMinimumSize:], s.opts)
	copy(th[header.TCPMinimumSize+len(s.opts):], s.payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(tcpLen))
	xsum = checksum.Checksum(s.payload, xsum)
	th.SetChecksum(^th.CalculateChecksum(xsum))
	if s.badCsum {
		th.SetChecksum(th.Checksum() ^ 0x0100)
	}
	return b
}

// parsedTCP is what checkTCP found in a packet.
type parsedTCP struct {
	v6       bool
	src, dst netip.AddrPort
	id       uint16
	seq, ack uint32
	flags    header.TCPFlags
	window   uint16
	opts     []byte
	payload  []byte
	csumOK   bool // the TCP checksum verifies
}

// parseTCP parses an IP packet carrying TCP and checks its IP header: the
// length fields match len(b) and an IPv4 header checksum verifies.
func parseTCP(t testing.TB, b []byte) parsedTCP {
	t.Helper()
	var p parsedTCP
	var ipLen int
	var src, dst tcpip.Address
	switch b[0] >> 4 {
	case 4:
		ip := header.IPv4(b)
		require.True(t, ip.IsValid(len(b)), "invalid IPv4 header")
		require.Equal(t, len(b), int(ip.TotalLength()), "IPv4 total length")
		require.True(t, ip.IsChecksumValid(), "IPv4 header checksum")
		require.Equal(t, uint8(header.TCPProtocolNumber), ip.Protocol())
		ipLen, src, dst, p.id = int(ip.HeaderLength()), ip.SourceAddress(), ip.DestinationAddress(), ip.ID()
	case 6:
		ip := header.IPv6(b)
		require.True(t, ip.IsValid(len(b)), "invalid IPv6 header")
		require.Equal(t, len(b)-header.IPv6MinimumSize, int(ip.PayloadLength()), "IPv6 payload length")
		require.Equal(t, uint8(header.TCPProtocolNumber), ip.NextHeader())
		ipLen, src, dst, p.v6 = header.IPv6MinimumSize, ip.SourceAddress(), ip.DestinationAddress(), true
	default:
		t.Fatalf("not IP: version %d", b[0]>>4)
	}
	th := header.TCP(b[ipLen:])
	require.GreaterOrEqual(t, len(th), header.TCPMinimumSize)
	doff := int(th.DataOffset())
	p.src = netip.AddrPortFrom(gvnet.FromTCPIP(src), th.SourcePort())
	p.dst = netip.AddrPortFrom(gvnet.FromTCPIP(dst), th.DestinationPort())
	p.seq, p.ack, p.flags, p.window = th.SequenceNumber(), th.AckNumber(), th.Flags(), th.WindowSize()
	p.opts = append([]byte(nil), th[header.TCPMinimumSize:doff]...)
	p.payload = append([]byte(nil), th[doff:]...)
	p.csumOK = th.IsChecksumValid(src, dst, checksum.Checksum(p.payload, 0), uint16(len(p.payload)))
	return p
}

// recorder is a gVisor dispatcher that keeps what it is given.
type recorder struct {
	mu   sync.Mutex // guards the following fields
	pkts [][]byte
	nets []tcpip.NetworkProtocolNumber
}

var _ stack.NetworkDispatcher = (*recorder)(nil)

func (r *recorder) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	v := pkt.ToView()
	defer v.Release()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pkts = append(r.pkts, append([]byte(nil), v.AsSlice()...))
	r.nets = append(r.nets, proto)
}

func (r *recorder) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

func (r *recorder) take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pkts
	r.pkts, r.nets = nil, nil
	return p
}

// newTestAdapter returns an adapter whose deliveries a recorder keeps,
// closed at cleanup.
func newTestAdapter(t testing.TB) (*TUNAdapter, *recorder) {
	t.Helper()
	a := newTUNAdapter(DefaultMTU)
	r := &recorder{}
	a.linkEndpoint().Attach(r)
	t.Cleanup(func() { _ = a.Close() })
	return a, r
}

// wgOffset is where wireguard-go puts packets in its buffers.
const wgOffset = 16

// writeSegs writes the segments to a in one batch, as wireguard-go would.
func writeSegs(t testing.TB, a *TUNAdapter, segs ...seg) {
	t.Helper()
	bufs := make([][]byte, len(segs))
	for i, s := range segs {
		bufs[i] = append(make([]byte, wgOffset), s.bytes()...)
	}
	n, err := a.Write(bufs, wgOffset)
	require.NoError(t, err)
	require.Equal(t, len(segs), n)
}

// gsoPacket builds what gVisor's TCP hands a link endpoint that supports
// host GSO: one segment with all of payload (spread over several views),
// its IP header checksummed, its TCP checksum only the pseudo-header's.
func gsoPacket(s seg, mss int) *stack.PacketBuffer {
	var payload buffer.Buffer
	for off := 0; off < len(s.payload); {
		n := min(len(s.payload)-off, 1000+off%3000) // uneven views
		part := buffer.MakeWithData(s.payload[off : off+n])
		payload.Merge(&part)
		off += n
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 128, Payload: payload})
	src, dst := gvnet.ToTCPIP(s.src.Addr()), gvnet.ToTCPIP(s.dst.Addr())
	th := header.TCP(pkt.TransportHeader().Push(header.TCPMinimumSize + len(s.opts)))
	th.Encode(&header.TCPFields{
		SrcPort: s.src.Port(), DstPort: s.dst.Port(), SeqNum: s.seq, AckNum: s.ack,
		DataOffset: uint8(header.TCPMinimumSize + len(s.opts)), Flags: s.flags, WindowSize: s.window,
	})
	copy(th[header.TCPMinimumSize:], s.opts)
	th.SetChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(pkt.Size())))
	gso := stack.GSO{NeedsCsum: true, CsumOffset: header.TCPChecksumOffset, MSS: uint16(mss), MaxSize: gsoMaxSize}
	if s.v6() {
		ip := header.IPv6(pkt.NetworkHeader().Push(header.IPv6MinimumSize))
		ip.Encode(&header.IPv6Fields{
			PayloadLength: uint16(pkt.Size() - header.IPv6MinimumSize), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: s.ttl, SrcAddr: src, DstAddr: dst,
		})
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
		gso.Type, gso.L3HdrLen = stack.GSOTCPv6, header.IPv6MinimumSize
	} else {
		ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(pkt.Size()), ID: s.id, Flags: header.IPv4FlagDontFragment, TTL: s.ttl,
			Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst,
		})
		ip.SetChecksum(^ip.CalculateChecksum())
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		gso.Type, gso.L3HdrLen = stack.GSOTCPv4, header.IPv4MinimumSize
	}
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	pkt.GSOOptions = gso
	return pkt
}

// send hands pkts to a as gVisor would and drops the caller's references.
func send(t testing.TB, a *TUNAdapter, pkts ...*stack.PacketBuffer) {
	t.Helper()
	var l stack.PacketBufferList
	for _, p := range pkts {
		l.PushBack(p)
	}
	n, err := a.linkEndpoint().WritePackets(l)
	require.Nil(t, err)
	require.Equal(t, len(pkts), n)
	l.Reset()
}

// readAll reads from a until it has want packets, with buffers as
// wireguard-go's, and returns them.
func readAll(t testing.TB, a *TUNAdapter, batch, want int) [][]byte {
	t.Helper()
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<16-1)
	}
	sizes := make([]int, batch)
	var out [][]byte
	for len(out) < want {
		n, err := a.Read(bufs, sizes, wgOffset)
		require.NoError(t, err)
		require.Positive(t, n)
		for i := range n {
			out = append(out, append([]byte(nil), bufs[i][wgOffset:wgOffset+sizes[i]]...))
		}
	}
	require.Len(t, out, want, "read more packets than were sent")
	return out
}
