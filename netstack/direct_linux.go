package netstack

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/latticelab/lattice/internal/inet"
)

// maxDirectFlows bounds an agent's direct flows (and those being
// decided); a SYN beyond it is refused with a reset.
const maxDirectFlows = 4096

// minDirectMSS is the smallest segment size taken from the agent's
// virtio_net_hdr (Linux's TCP_MIN_SND_MSS): a smaller one would have one
// read cut into thousands of packets.
const minDirectMSS = 48

// directSweepEvery is how often, at most, a new flow's SYN looks for
// flows that are over.
const directSweepEvery = time.Second

// directPath is a Gateway's side of its direct flows (direct.go): the
// agent's TCP to overlay peers, decided on its SYN by the overlay
// stack's egress hook and then carried as packets.
type directPath struct {
	g      *Gateway
	s      *Stack
	prefix netip.Prefix // the overlay: destinations carried direct
	self   netip.Addr   // the stack's (and the agent's) address
	mss    uint16       // the largest segment a SYN may ask the peer for
	syns   chan struct{}
	gro    sync.Pool // *groBatch for toAgent

	lastSweep time.Time // the link's reader goroutine only

	mu      sync.Mutex // guards the following fields
	flows   map[directKey]*directFlow
	pending map[directKey]bool // SYNs being decided
	closed  bool
}

var _ directSink = (*directPath)(nil)

func newDirectPath(g *Gateway, s *Stack) *directPath {
	d := &directPath{
		g: g, s: s,
		prefix:  s.addr.Masked(),
		self:    s.addr.Addr(),
		mss:     uint16(s.mtu - header.IPv4MinimumSize - header.TCPMinimumSize),
		syns:    make(chan struct{}, gatewayMaxSYN),
		flows:   map[directKey]*directFlow{},
		pending: map[directKey]bool{},
	}
	d.gro.New = func() any { return newGROBatch(false) }
	return d
}

// outbound is the link's filter for a TCP packet from the agent (classify
// passed it): gVisor gets it unless it is for an overlay peer, whose flows
// go direct. pkt holds its first bytes, rest the others.
func (d *directPath) outbound(pkt []byte, rest []byte) (bool, *directFlow) {
	ip := header.IPv4(pkt)
	ihl := int(ip.HeaderLength())
	if ip.Protocol() != uint8(header.TCPProtocolNumber) || ip.More() || ip.FragmentOffset() != 0 {
		return true, nil
	}
	dst := addrFromTCPIP(ip.DestinationAddress())
	if !d.prefix.Contains(dst) || dst == d.self {
		return true, nil
	}
	if len(pkt) < ihl+header.TCPMinimumSize {
		d.g.stats.dropped.Add(1)
		return false, nil
	}
	th := header.TCP(pkt[ihl:])
	if doff := int(th.DataOffset()); doff < header.TCPMinimumSize || ihl+doff > len(pkt) || ihl+doff > int(ip.TotalLength()) {
		d.g.stats.dropped.Add(1)
		return false, nil
	}
	key := directKey{peer: dst.As4(), peerPort: th.DestinationPort(), local: th.SourcePort()}
	flags := th.Flags()
	now := time.Now()
	d.mu.Lock()
	f, pending := d.flows[key], d.pending[key]
	d.mu.Unlock()
	syn := flags&(header.TCPFlagSyn|header.TCPFlagAck|header.TCPFlagRst|header.TCPFlagFin) == header.TCPFlagSyn
	switch {
	case pending:
		// A retransmitted SYN while the first is being decided.
	case f != nil && !(syn && f.state.Load()&(flowRST|flowFinIn|flowFinOut) != 0):
		if f.local != key.local {
			th.SetSourcePort(f.local) // the checksum is made again on the way out
		}
		f.touch(tcpFlagState(flags, true), now.UnixNano())
		return false, f
	case syn:
		first := append(append([]byte(nil), pkt...), rest...)
		d.open(key, first[:min(len(first), int(ip.TotalLength()))], f, now)
		return false, nil
	}
	d.g.stats.dropped.Add(1)
	return false, nil
}

// open decides a new flow from the agent's SYN on a goroutine of its own
// (the policy and the audit log may take a while), replacing old, the
// tuple's earlier flow, which is over.
func (d *directPath) open(key directKey, syn []byte, old *directFlow, now time.Time) {
	if now.Sub(d.lastSweep) > directSweepEvery {
		d.lastSweep = now
		d.sweep(now)
	}
	d.mu.Lock()
	full := len(d.flows)+len(d.pending) >= maxDirectFlows
	if d.closed || full || !d.g.enter() {
		d.mu.Unlock()
		if full {
			d.g.stats.refused.Add(1)
			_ = d.g.link.writev([][]byte{tcpReset(syn)})
		}
		return
	}
	select {
	case d.syns <- struct{}{}:
	default:
		d.mu.Unlock()
		d.g.wg.Done()
		d.g.stats.dropped.Add(1) // the agent sends it again
		return
	}
	d.pending[key] = true
	d.mu.Unlock()
	go func() {
		defer d.g.wg.Done()
		defer func() { <-d.syns }()
		if old != nil {
			d.forget(old)
		}
		d.decide(key, syn)
	}()
}

// decide asks the overlay stack's egress hook about a new flow: allowed,
// it takes a port and its SYN goes out; refused, the agent gets a reset.
func (d *directPath) decide(key directKey, syn []byte) {
	dst := key.peerAddrPort()
	var err error
	if d.s.egress != nil {
		err = d.s.egress("tcp", dst)
	}
	f := &directFlow{agent: key, sink: d}
	f.touch(0, time.Now().UnixNano())
	if err == nil {
		err = d.s.direct.add(f)
	}
	d.mu.Lock()
	delete(d.pending, key)
	if err == nil {
		d.flows[key] = f
	}
	d.mu.Unlock()
	if err != nil {
		d.g.stats.refused.Add(1)
		d.g.log.Debug("tcp refused", "dst", dst, "err", err)
		_ = d.g.link.writev([][]byte{tcpReset(syn)})
		return
	}
	d.g.stats.tcp.Add(1)
	d.g.stats.direct.Add(1)
	ip := header.IPv4(syn)
	ihl := int(ip.HeaderLength())
	th := header.TCP(syn[ihl:])
	th.SetSourcePort(f.local)
	clampMSS(th, d.mss)
	d.inject(&virtioNetHdr{}, buffer.MakeWithData(syn), ihl, int(th.DataOffset()))
}

// forget takes f out of both tables.
func (d *directPath) forget(f *directFlow) {
	d.mu.Lock()
	if d.flows[f.agent] == f {
		delete(d.flows, f.agent)
	}
	d.mu.Unlock()
	d.s.direct.remove(f)
}

// sweep forgets the flows that are over at now.
func (d *directPath) sweep(now time.Time) {
	var over []*directFlow
	d.mu.Lock()
	for k, f := range d.flows {
		if f.expired(now) {
			delete(d.flows, k)
			over = append(over, f)
		}
	}
	d.mu.Unlock()
	for _, f := range over {
		d.s.direct.remove(f)
	}
}

// close forgets every flow (the Gateway's Close, once no decision runs).
func (d *directPath) close() {
	d.mu.Lock()
	d.closed = true
	flows := d.flows
	d.flows = map[directKey]*directFlow{}
	d.mu.Unlock()
	for _, f := range flows {
		d.s.direct.remove(f)
	}
}

// send is the link's direct hook: a packet of an allowed flow (outbound
// checked its headers), its source port already the flow's, goes to
// WireGuard; bytes after the IP length are dropped.
func (d *directPath) send(_ *directFlow, vh *virtioNetHdr, buf buffer.Buffer) {
	var hb [header.IPv4MaximumHeaderSize + header.TCPMinimumSize]byte
	n, _ := buf.ReadAt(hb[:], 0)
	ip := header.IPv4(hb[:n])
	ihl := int(ip.HeaderLength())
	doff := int(header.TCP(hb[ihl:n]).DataOffset())
	if total := int64(ip.TotalLength()); total < buf.Size() {
		buf.Truncate(total)
	}
	d.inject(vh, buf, ihl, doff)
}

// inject queues an IPv4 TCP packet for WireGuard, as the overlay stack's
// own TCP would: a segment for the TUNAdapter's Read to cut into packets
// of the overlay's MTU (or of the agent's segment size, if smaller), each
// with its checksums made. It owns buf.
func (d *directPath) inject(vh *virtioNetHdr, buf buffer.Buffer, ihl, doff int) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buf})
	defer pkt.DecRef()
	if _, ok := pkt.NetworkHeader().Consume(ihl); !ok {
		return
	}
	if _, ok := pkt.TransportHeader().Consume(doff); !ok {
		return
	}
	mss := d.s.mtu - ihl - doff
	if vh.tcpSegment() && vh.gsoSize >= minDirectMSS {
		mss = min(mss, int(vh.gsoSize))
	}
	pkt.NetworkProtocolNumber = ipv4.ProtocolNumber
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	pkt.GSOOptions = stack.GSO{
		Type: stack.GSOTCPv4, NeedsCsum: true, CsumOffset: 16,
		MSS: uint16(mss), L3HdrLen: uint16(ihl), MaxSize: gsoMaxSize,
	}
	one := [1]*stack.PacketBuffer{pkt}
	d.s.tun.queueOut(one[:])
}

// toAgent implements directSink: packets from peers, their destination
// port turned back into the agent's, written to the agent's link. With a
// virtio_net_hdr, consecutive segments of a flow go as one (GRO), as the
// overlay's TUNAdapter coalesces them for gVisor.
func (d *directPath) toAgent(flows []*directFlow, pkts [][]byte) {
	now := time.Now().UnixNano()
	kept := 0
	for i, p := range pkts {
		f := flows[i]
		ip := header.IPv4(p)
		if !ip.IsChecksumValid() {
			continue // the agent's kernel would drop it; GRO must not mend it
		}
		pkts[kept] = p
		kept++
		if ip.Protocol() == uint8(header.ICMPv4ProtocolNumber) {
			d.icmpToAgent(f, p[ip.HeaderLength():])
			continue
		}
		th := header.TCP(p[ip.HeaderLength():])
		if f.local != f.agent.local {
			th.SetChecksum(inet.Update(th.Checksum(), f.local, f.agent.local))
			th.SetDestinationPort(f.agent.local)
		}
		f.touch(tcpFlagState(th.Flags(), false), now)
	}
	pkts = pkts[:kept]
	link := d.g.link
	if !link.vnet {
		for _, p := range pkts {
			_ = link.writev([][]byte{p})
		}
		return
	}
	b := d.gro.Get().(*groBatch)
	for _, p := range pkts {
		b.add(p, header.IPv4ProtocolNumber)
	}
	var (
		vhb [virtioNetHdrLen]byte
		hb  [header.IPv4MaximumHeaderSize + header.TCPHeaderMaximumSize]byte
	)
	iovs := make([][]byte, 0, 8)
	for _, i := range b.entries {
		it := b.meta[i].item
		if it < 0 || b.items[it].count == 1 {
			_ = link.writev([][]byte{b.pkts[i]})
			continue
		}
		item := &b.items[it]
		total := item.hdrLen + item.payload
		hdr := hb[:item.hdrLen]
		copy(hdr, b.pkts[item.head])
		ip := header.IPv4(hdr)
		ip.SetTotalLength(uint16(total))
		inet.SetIPv4Checksum(ip)
		th := hdr[item.ipLen:]
		if item.psh {
			th[13] |= uint8(header.TCPFlagPsh)
		}
		// A partial checksum, as the kernel's own GRO leaves one: the
		// pseudo-header's sum, the rest taken as verified (WireGuard's
		// AEAD authenticated every segment).
		binary.BigEndian.PutUint16(th[16:], inet.PseudoHeaderSum(hdr, tcpProto, total-item.ipLen))
		vh := virtioNetHdr{
			flags: virtioNetHdrFNeedsCsum, gsoType: virtioNetHdrGSOTCPv4,
			hdrLen: uint16(item.hdrLen), gsoSize: uint16(item.segSize),
			csumStart: uint16(item.ipLen), csumOffset: 16,
		}
		vh.encode(vhb[:])
		iovs = append(iovs[:0], hdr)
		for j := item.head; j >= 0; j = b.meta[j].next {
			iovs = append(iovs, b.pkts[j][item.hdrLen:])
		}
		_ = link.writevVnet(vhb[:], iovs)
	}
	b.reset()
	d.gro.Put(b)
}

// icmpToAgent turns the port an ICMP error quotes (the segment as it left
// for the peer) back into the agent's, updating the ICMP checksum, which
// covers the quote.
func (d *directPath) icmpToAgent(f *directFlow, icmp []byte) {
	if f.local == f.agent.local {
		return
	}
	q, ok := icmpQuotedTCP(icmp)
	if !ok {
		return
	}
	port := q[header.IPv4(q).HeaderLength():]
	h := header.ICMPv4(icmp)
	h.SetChecksum(inet.Update(h.Checksum(), f.local, f.agent.local))
	binary.BigEndian.PutUint16(port, f.agent.local)
}

// clampMSS lowers the MSS option of SYN segment th to at most mss (as
// iptables' TCPMSS --clamp-mss-to-pmtu does), so that the peer never sends
// the agent a segment larger than the overlay carries.
func clampMSS(th header.TCP, mss uint16) {
	if i := inet.MSSOption(th); i >= 0 && binary.BigEndian.Uint16(th[i:]) > mss {
		binary.BigEndian.PutUint16(th[i:], mss)
	}
}

// tcpReset is the reset (RFC 9293 section 3.10.7.1) a refused SYN gets:
// from its destination to its source, acknowledging the SYN.
func tcpReset(syn []byte) []byte {
	in := header.IPv4(syn)
	ihl := int(in.HeaderLength())
	it := header.TCP(syn[ihl:])
	total := min(len(syn), int(in.TotalLength()))
	seqLen := uint32(max(total-ihl-int(it.DataOffset()), 0)) + 1
	out := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize)
	ip := header.IPv4(out)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(out)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: in.DestinationAddress(), DstAddr: in.SourceAddress(),
	})
	inet.SetIPv4Checksum(ip)
	th := header.TCP(out[header.IPv4MinimumSize:])
	th.Encode(&header.TCPFields{
		SrcPort: it.DestinationPort(), DstPort: it.SourcePort(),
		AckNum: it.SequenceNumber() + seqLen, DataOffset: header.TCPMinimumSize,
		Flags: header.TCPFlagRst | header.TCPFlagAck,
	})
	th.SetChecksum(^checksum.Checksum(th, inet.PseudoHeaderSum(out, tcpProto, len(th))))
	return out
}
