package node

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/device"

	"github.com/latticelab/lattice/internal/inet"
	"github.com/latticelab/lattice/relay"
)

// wgOverhead is what WireGuard adds to an IP packet: the 16-byte
// transport header and the 16-byte Poly1305 tag (padding aside).
const wgOverhead = 32

// QUICRelayMTU is the overlay MTU toward a peer whose packets go through
// a QUIC relay connection: the largest IP packet whose WireGuard message
// still fits one QUIC datagram (relay.MaxDatagramPacket), 1376 bytes. A
// larger one would ride the relay's reliable stream, at several times
// the CPU and with head-of-line blocking behind every lost packet.
// WireGuard pads a packet to a multiple of 16 bytes (up to the
// interface's MTU), so the limit is a multiple of 16: with 1378, a
// 1378-byte packet would leave as 1392 + 32 bytes.
const QUICRelayMTU = (relay.MaxDatagramPacket - wgOverhead) &^ 15

// MTU reasons shown in status.
const (
	mtuReasonQUIC   = "relayed over QUIC datagrams"
	mtuReasonTCP    = "relayed over TCP"
	mtuReasonDirect = "direct"
)

// transportReporter says how the relay client is connected: "quic",
// "tcp", or "" while it is not (RelayClient implementations may have it).
type transportReporter interface{ Transport() string }

// peerMTUs is the TUN wrapper's per-peer MTU: toward a peer relayed over
// QUIC it acts as a router whose next hop has QUICRelayMTU. Outbound
// (Read) it clamps the MSS of TCP SYNs, answers an oversized TCP segment
// with DF set or IPv6 packet with ICMP "fragmentation needed" / "packet
// too big" naming QUICRelayMTU (RFC 1191, RFC 8201), and fragments any
// other oversized IPv4 packet (RFC 791), DF or not, as VPN gateways that
// clear DF do: gVisor's UDP and ICMP sockets set DF but ignore
// "fragmentation needed" (no PMTU feedback for them), so honouring DF
// would black-hole their large packets. Inbound (Write) it clamps
// the MSS of SYNs from such a peer, so our answers fit too whatever
// transport the peer relays over. Nothing is done while the relay client
// is not on QUIC, so the default (TCP) costs one call per batch.
type peerMTUs struct {
	relay transportReporter // set before the device starts; nil: no relay

	pending [][]byte // Read's own: fragments that did not fit the last batch

	clamped, tooBig, fragmented atomic.Uint64
}

// setPath records the path of the peer at addr (nil: forget it). A nil u
// (a Device with its own interface) does nothing.
func (u *unreachableTUN) setPath(addr netip.Addr, p *Path) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if p == nil {
		delete(u.paths, addr)
		return
	}
	if u.paths == nil {
		u.paths = map[netip.Addr]*Path{}
	}
	u.paths[addr] = p
}

// quic reports whether the relay client is connected over QUIC now.
func (m *peerMTUs) quic() bool {
	return m.relay != nil && m.relay.Transport() == transportQUIC
}

const transportQUIC = "quic"

// relayed reports whether packets to or from the peer at a go through
// the relay now.
func (u *unreachableTUN) relayed(a netip.Addr) bool {
	u.mu.RLock()
	p := u.paths[a]
	u.mu.RUnlock()
	if p == nil {
		return false
	}
	_, direct := p.Direct()
	return !direct
}

// limitOutbound applies the peer MTU to the n packets Read returned and
// returns the new count: fragments beyond the first go into free slots of
// bufs, or wait in pending for the next Read.
func (u *unreachableTUN) limitOutbound(bufs [][]byte, sizes []int, offset, n int) int {
	m := &u.mtu
	for i := range n {
		pkt := bufs[i][offset : offset+sizes[i]]
		syn := tcpSYN(pkt)
		if len(pkt) <= QUICRelayMTU && !syn {
			continue
		}
		_, dst, ok := ipAddrs(pkt)
		if !ok || !u.relayed(dst) {
			continue
		}
		if syn && clampMSS(pkt, QUICRelayMTU) {
			m.clamped.Add(1)
		}
		if len(pkt) <= QUICRelayMTU {
			continue
		}
		if pkt[0]>>4 == 4 && (binary.BigEndian.Uint16(pkt[6:8])&ipv4DF == 0 || pkt[9] != 6) {
			frags := fragmentIPv4(pkt, QUICRelayMTU)
			if frags == nil {
				sizes[i] = 0
				continue
			}
			m.fragmented.Add(1)
			sizes[i] = copy(bufs[i][offset:], frags[0])
			m.pending = append(m.pending, frags[1:]...)
			continue
		}
		sizes[i] = 0
		m.tooBig.Add(1)
		var r []byte
		if pkt[0]>>4 == 4 {
			r = icmpv4Error(pkt, icmpFragNeeded, QUICRelayMTU)
		} else {
			r = packetTooBig6(pkt, QUICRelayMTU)
		}
		if r != nil {
			select {
			case u.replies <- r:
			default: // the stack is far behind; it retransmits
			}
		}
	}
	return m.takePending(bufs, sizes, offset, n)
}

// takePending moves pending fragments into bufs from slot n on, while
// slots last, and returns the new count.
func (m *peerMTUs) takePending(bufs [][]byte, sizes []int, offset, n int) int {
	for n < len(bufs) && len(m.pending) > 0 && len(bufs[n])-offset >= len(m.pending[0]) {
		sizes[n] = copy(bufs[n][offset:], m.pending[0])
		m.pending[0] = nil
		m.pending = m.pending[1:]
		n++
	}
	if len(m.pending) == 0 {
		m.pending = nil
	}
	return n
}

// limitInbound clamps the MSS of TCP SYNs arriving from a peer relayed
// over QUIC, so what we send it fits whatever the peer's side does.
func (u *unreachableTUN) limitInbound(bufs [][]byte, offset int) {
	m := &u.mtu
	for _, b := range bufs {
		pkt := b[offset:]
		if !tcpSYN(pkt) {
			continue
		}
		src, _, ok := ipAddrs(pkt)
		if ok && u.relayed(src) && clampMSS(pkt, QUICRelayMTU) {
			m.clamped.Add(1)
		}
	}
}

const (
	ipv4DF         = 0x4000
	ipv4MF         = 0x2000
	icmpFragNeeded = 4 // RFC 792 destination unreachable code
	tcpFlagSYN     = 0x02
)

// ipHeader returns the IP header length of an IPv4 packet or of an
// IPv6 packet without extension headers before TCP, and the transport
// protocol; ok is false for anything shorter than its header.
func ipHeader(pkt []byte) (hlen int, proto byte, ok bool) {
	if len(pkt) < 20 {
		return 0, 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		hlen = int(pkt[0]&0x0f) * 4
		if hlen < 20 || len(pkt) < hlen {
			return 0, 0, false
		}
		return hlen, pkt[9], true
	case 6:
		if len(pkt) < 40 {
			return 0, 0, false
		}
		return 40, pkt[6], true
	}
	return 0, 0, false
}

// tcpSYN reports whether pkt is an unfragmented (or first-fragment) TCP
// segment with SYN set and its whole TCP header present.
func tcpSYN(pkt []byte) bool {
	hlen, proto, ok := ipHeader(pkt)
	if !ok || proto != 6 || len(pkt) < hlen+20 {
		return false
	}
	if pkt[0]>>4 == 4 && binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
		return false
	}
	return pkt[hlen+13]&tcpFlagSYN != 0
}

// ipAddrs returns the source and destination of an IPv4 or IPv6 packet;
// ok is false for anything shorter than its fixed header.
func ipAddrs(pkt []byte) (src, dst netip.Addr, ok bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20])), true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40])), true
	}
	return netip.Addr{}, netip.Addr{}, false
}

// clampMSS lowers the MSS option of TCP SYN pkt to what fits mtu and
// fixes the TCP checksum incrementally (RFC 1624); it reports whether it
// changed anything. Malformed options end the walk, untouched.
func clampMSS(pkt []byte, mtu int) bool {
	hlen, _, ok := ipHeader(pkt)
	if !ok || len(pkt) < hlen+20 {
		return false
	}
	tcp := pkt[hlen:]
	limit := mtu - hlen - 20
	i := inet.MSSOption(tcp)
	if i < 0 || int(binary.BigEndian.Uint16(tcp[i:])) <= limit {
		return false
	}
	setWord(tcp, i, uint16(limit), 16)
	return true
}

// setWord stores v big-endian at b[off:off+2] and updates the checksum at
// b[csum:csum+2], which covers b from 0: a value at an odd offset
// straddles two checksum words, so both are redone.
func setWord(b []byte, off int, v uint16, csum int) {
	start := off &^ 1
	end := min(len(b), (off+3)&^1)
	var old [4]byte
	copy(old[:], b[start:end])
	binary.BigEndian.PutUint16(b[off:], v)
	var d inet.Delta
	for j := start; j+1 < end; j += 2 {
		d.Word(binary.BigEndian.Uint16(old[j-start:]), binary.BigEndian.Uint16(b[j:]))
	}
	if (end-start)%2 == 1 { // the last byte of the segment: padded with zero
		d.Word(uint16(old[end-1-start])<<8, uint16(b[end-1])<<8)
	}
	d.Fix(b, csum)
}

// fragmentIPv4 splits IPv4 packet pkt into fragments of at most mtu bytes
// (inet.FragmentIPv4), or returns nil when it cannot be split.
func fragmentIPv4(pkt []byte, mtu int) [][]byte {
	frags, err := inet.FragmentIPv4(pkt, mtu, 0, nil)
	if err != nil {
		return nil
	}
	return frags
}

// icmpv4Error builds the ICMP destination unreachable answer (RFC 792
// type 3, code) to IPv4 packet pkt, from its destination, with mtu as the
// next-hop MTU for code 4 (RFC 1191), and device.MessageTransportOffsetContent
// bytes of headroom; nil when none is due: no ICMP error about an ICMP
// error or about a fragment other than the first (RFC 1122 3.2.2).
func icmpv4Error(pkt []byte, code byte, mtu int) []byte {
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl {
		return nil
	}
	if binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
		return nil
	}
	if pkt[9] == 1 && len(pkt) > ihl {
		switch pkt[ihl] { // ICMP type
		case 3, 4, 5, 11, 12:
			return nil
		}
	}
	quote := pkt[:min(len(pkt), ihl+8)] // RFC 792: the header and 64 bits of data
	const off = device.MessageTransportOffsetContent
	b := make([]byte, off+20+8+len(quote))
	ip := b[off : off+20]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+8+len(quote)))
	ip[8] = 64 // TTL
	ip[9] = 1  // ICMP
	copy(ip[12:16], pkt[16:20])
	copy(ip[16:20], pkt[12:16])
	binary.BigEndian.PutUint16(ip[10:12], inet.Checksum(ip))
	icmp := b[off+20:]
	icmp[0], icmp[1] = 3, code
	if code == icmpFragNeeded {
		binary.BigEndian.PutUint16(icmp[6:8], uint16(mtu))
	}
	copy(icmp[8:], quote)
	binary.BigEndian.PutUint16(icmp[2:4], inet.Checksum(icmp))
	return b
}

// packetTooBig6 builds the ICMPv6 packet too big answer (RFC 4443
// section 3.2) to IPv6 packet pkt, from its destination, quoting as much
// of it as fits the minimum MTU; nil when none is due: no error about an
// ICMPv6 error (RFC 4443 section 2.4 e.1).
func packetTooBig6(pkt []byte, mtu int) []byte {
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return nil
	}
	if pkt[6] == 58 && len(pkt) > 40 && pkt[40] < 128 {
		return nil
	}
	quote := pkt[:min(len(pkt), 1280-40-8)]
	const off = device.MessageTransportOffsetContent
	b := make([]byte, off+40+8+len(quote))
	ip := b[off : off+40]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:6], uint16(8+len(quote)))
	ip[6], ip[7] = 58, 64 // ICMPv6, hop limit
	copy(ip[8:24], pkt[24:40])
	copy(ip[24:40], pkt[8:24])
	icmp := b[off+40:]
	icmp[0] = 2 // packet too big
	binary.BigEndian.PutUint32(icmp[4:8], uint32(mtu))
	copy(icmp[8:], quote)
	pseudo := make([]byte, 40+len(icmp))
	copy(pseudo, ip[8:40])
	binary.BigEndian.PutUint32(pseudo[32:36], uint32(len(icmp)))
	pseudo[39] = 58
	copy(pseudo[40:], icmp)
	binary.BigEndian.PutUint16(icmp[2:4], inet.Checksum(pseudo))
	return b
}
