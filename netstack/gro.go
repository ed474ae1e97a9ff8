package netstack

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/latticelab/lattice/internal/inet"
)

// groMaxSize caps a coalesced packet at the largest IPv4 packet.
const groMaxSize = 1<<16 - 1

// groBatch coalesces the TCP segments of a batch of received packets
// (generic receive offload) and remembers the order to deliver in. A
// segment joins the open item of its flow when it continues it exactly:
//
//   - same addresses, ports, IP header fields (TOS/traffic class, flow
//     label, TTL/hop limit, DF), TCP header length, options, ACK number
//     and window, as Linux's tcp_gro_receive requires;
//   - its sequence number is where the item's payload ends;
//   - its payload is no larger than the item's first segment's (the
//     sender's MSS); a smaller one ends the item, as does PSH;
//   - the result stays within groMaxSize.
//
// A local batch (newGROBatch(true)), whose packets only reach gVisor's
// TCP, drops the size and PSH rules: segments of any size join, and PSH
// neither ends an item nor keeps a segment from heading one (the item
// carries PSH if a member did). Linux has them because it may forward a
// GRO packet (re-segmenting it at one gso_size) and holds packets across
// polls (PSH asks it to stop waiting); gVisor never re-segments what it
// receives, ignores PSH, and Write delivers its batch when it returns.
// With them, a batch from gVisor's TCP, which sends a 64 KiB write as 65474
// bytes and then 62 alone, both ending in PSH, was cut into several
// deliveries, and so several ACKs. A batch for a kernel link (the direct
// path, virtio GSO) keeps Linux's rules.
//
// Only plain ACK segments with payload are candidates: SYN, FIN, RST, URG,
// ECE and CWR segments, pure ACKs, IPv4 with options or fragments and IPv6
// with extension headers go up alone, and end their flow's item so that no
// later segment overtakes them. Packets are delivered in the order their
// first segment arrived.
//
// The coalesced packet is the head's headers (rewritten) followed by every
// member's payload, copied once out of wireguard-go's buffers. Its TCP
// checksum is derived from the members' checksums rather than recomputed:
// it verifies when all of theirs did and fails when one of them failed, so
// coalescing does not launder a corrupt segment (errors in several members
// may cancel out, as they may within one segment).
type groBatch struct {
	pkts    [][]byte  // by arrival; wireguard-go's buffers, valid during Write
	meta    []pktMeta // by arrival
	entries []int32   // what to deliver: arrival index of each packet or item head
	items   []groItem
	div     divertScratch // packets of direct flows, for their agents
	local   bool          // see above
}

type pktMeta struct {
	proto tcpip.NetworkProtocolNumber
	// hdrLen is the length of the IP and TCP or UDP headers, or 0 if the
	// packet is something else.
	hdrLen int
	// item is the index in groBatch.items of the item this packet heads
	// or joined, -1 if none.
	item int32
	// next is the arrival index of the item's next member, -1 at the end.
	next int32
}

type flowKey struct {
	src, dst [16]byte
	ports    uint32
	v6       bool
}

type groItem struct {
	key        flowKey
	head, tail int32
	open       bool
	psh        bool
	ipLen      int    // IP header length, the same for every member
	hdrLen     int    // IP + TCP header length, the same for every member
	segSize    int    // payload of the first segment
	payload    int    // payload of all members
	nextSeq    uint32 // sequence number the next member must carry
	sum        uint16 // ones' complement sum of all members' payloads
	count      int
}

func newGROBatch(local bool) *groBatch {
	return &groBatch{
		local:   local,
		pkts:    make([][]byte, 0, BatchSize),
		meta:    make([]pktMeta, 0, BatchSize),
		entries: make([]int32, 0, BatchSize),
		items:   make([]groItem, 0, BatchSize),
	}
}

// reset forgets the batch.
func (b *groBatch) reset() {
	clear(b.pkts)
	b.pkts = b.pkts[:0]
	b.meta = b.meta[:0]
	b.entries = b.entries[:0]
	b.items = b.items[:0]
}

// coalesced reports how many packets joined an earlier one.
func (b *groBatch) coalesced() int { return len(b.pkts) - len(b.entries) }

// add takes one packet, validated by ipPacket. p must stay valid until
// deliver.
func (b *groBatch) add(p []byte, netProto tcpip.NetworkProtocolNumber) {
	i := int32(len(b.pkts))
	b.pkts = append(b.pkts, p)
	b.meta = append(b.meta, pktMeta{proto: netProto, item: -1, next: -1})

	var ipLen int
	var proto uint8
	if netProto == header.IPv4ProtocolNumber {
		ip := header.IPv4(p)
		ipLen = int(ip.HeaderLength())
		proto = ip.Protocol()
		if ip.More() || ip.FragmentOffset() != 0 {
			proto = 0 // a fragment: no transport header to speak of
		}
	} else {
		ipLen = header.IPv6MinimumSize
		proto = header.IPv6(p).NextHeader() // extension headers are not parsed: they go up alone
	}
	switch proto {
	case uint8(header.UDPProtocolNumber):
		if len(p) >= ipLen+header.UDPMinimumSize {
			b.meta[i].hdrLen = ipLen + header.UDPMinimumSize
		}
	case uint8(header.TCPProtocolNumber):
		if len(p) < ipLen+header.TCPMinimumSize {
			break
		}
		doff := int(header.TCP(p[ipLen:]).DataOffset())
		if doff < header.TCPMinimumSize || ipLen+doff > len(p) {
			break // malformed: gVisor will count and drop it
		}
		b.meta[i].hdrLen = ipLen + doff
		if ipLen == header.IPv4MinimumSize || netProto == header.IPv6ProtocolNumber {
			if b.coalesce(i, ipLen, doff) {
				return
			}
		}
	}
	b.entries = append(b.entries, i)
}

// coalesce appends packet i, a TCP segment, to its flow's open item and
// reports true, or reports false when i must be delivered as a packet of
// its own (possibly heading a new item).
func (b *groBatch) coalesce(i int32, ipLen, doff int) bool {
	p := b.pkts[i]
	th := p[ipLen:]
	payload := len(th) - doff
	flags := th[13]
	const ack, psh = uint8(header.TCPFlagAck), uint8(header.TCPFlagPsh)
	candidate := payload > 0 && flags&ack != 0 && flags&^(ack|psh) == 0

	key := flowKeyOf(p, ipLen)
	if it := b.openItem(key); it >= 0 {
		item := &b.items[it]
		if candidate && b.continues(item, p, doff, payload) {
			b.join(it, i, payload, flags&psh != 0)
			return true
		}
		item.open = false
	}
	if candidate && (b.local || flags&psh == 0) {
		b.items = append(b.items, groItem{
			key: key, head: i, tail: i, open: true, psh: flags&psh != 0,
			ipLen: ipLen, hdrLen: ipLen + doff,
			segSize: payload, payload: payload,
			nextSeq: binary.BigEndian.Uint32(th[4:]) + uint32(payload),
			sum:     payloadSum(p, ipLen, doff),
			count:   1,
		})
		b.meta[i].item = int32(len(b.items) - 1)
	}
	return false
}

func flowKeyOf(p []byte, ipLen int) flowKey {
	var k flowKey
	if ipLen == header.IPv4MinimumSize && p[0]>>4 == 4 {
		copy(k.src[:], p[12:16])
		copy(k.dst[:], p[16:20])
	} else {
		copy(k.src[:], p[8:24])
		copy(k.dst[:], p[24:40])
		k.v6 = true
	}
	k.ports = binary.BigEndian.Uint32(p[ipLen:])
	return k
}

// openItem returns the index of key's open item, or -1. A flow has at most
// one open item: the latest.
func (b *groBatch) openItem(key flowKey) int {
	for j := len(b.items) - 1; j >= 0; j-- {
		if b.items[j].open && b.items[j].key == key {
			return j
		}
	}
	return -1
}

// continues reports whether segment p (TCP header length doff, payload
// bytes of payload) can be appended to item.
func (b *groBatch) continues(item *groItem, p []byte, doff, payload int) bool {
	head := b.pkts[item.head]
	if item.hdrLen != item.ipLen+doff || !b.local && payload > item.segSize ||
		item.hdrLen+item.payload+payload > groMaxSize {
		return false
	}
	if !item.key.v6 {
		// TOS, DF/MF/offset and TTL; the ID may differ.
		if p[1] != head[1] || p[6] != head[6] || p[7] != head[7] || p[8] != head[8] {
			return false
		}
	} else if !bytes.Equal(p[:4], head[:4]) || p[7] != head[7] {
		// Version, traffic class, flow label; hop limit.
		return false
	}
	th, hth := p[item.ipLen:item.hdrLen], head[item.ipLen:item.hdrLen]
	return binary.BigEndian.Uint32(th[4:]) == item.nextSeq &&
		bytes.Equal(th[8:12], hth[8:12]) && // ACK number
		bytes.Equal(th[14:16], hth[14:16]) && // window
		bytes.Equal(th[header.TCPMinimumSize:], hth[header.TCPMinimumSize:]) // options
}

func (b *groBatch) join(it int, i int32, payload int, psh bool) {
	item := &b.items[it]
	sum := payloadSum(b.pkts[i], item.ipLen, item.hdrLen-item.ipLen)
	if item.payload%2 == 1 {
		// Bytes at an odd offset land in the other half of each
		// 16-bit word (RFC 1071 section 2(B)).
		sum = bits.ReverseBytes16(sum)
	}
	item.sum = checksum.Combine(item.sum, sum)
	b.meta[item.tail].next = i
	b.meta[i].item = int32(it)
	item.tail = i
	item.count++
	item.payload += payload
	item.nextSeq += uint32(payload)
	item.psh = item.psh || psh
	if !b.local && (psh || payload < item.segSize) {
		item.open = false
	}
}

// payloadSum returns the ones' complement sum of the TCP payload of p
// without reading it: a correct checksum makes pseudo-header + TCP header +
// payload sum to zero (0xffff), so the payload sums to minus the rest.
func payloadSum(p []byte, ipLen, doff int) uint16 {
	th := p[ipLen:]
	return ^checksum.Combine(inet.PseudoHeaderSum(p, tcpProto, len(th)), checksum.Checksum(th[:doff], 0))
}

const tcpProto = uint8(header.TCPProtocolNumber)

// deliver hands every entry to dp in arrival order and returns how many
// packets it delivered. Each delivered packet is a copy, in two buffers:
// its IP and transport headers, then its payload. gVisor's IP layer keeps
// a reference to the chunk holding the IP header while it parses the
// rest, and "pulling up" a header from a shared chunk copies the whole
// chunk; a chunk of its own keeps that copy to a few dozen bytes.
func (b *groBatch) deliver(dp stack.NetworkDispatcher) int {
	for _, i := range b.entries {
		var buf buffer.Buffer
		if it := b.meta[i].item; it >= 0 && b.items[it].count > 1 {
			buf = b.merge(&b.items[it])
		} else {
			buf = split(b.pkts[i], b.meta[i].hdrLen)
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buf})
		dp.DeliverNetworkPacket(b.meta[i].proto, pkt)
		pkt.DecRef()
	}
	return len(b.entries)
}

// split copies p into a buffer with its first n bytes in a view of their
// own; n = 0 keeps p in one view.
func split(p []byte, n int) buffer.Buffer {
	if n == 0 || n == len(p) {
		return buffer.MakeWithView(buffer.NewViewWithData(p))
	}
	buf := buffer.MakeWithView(buffer.NewViewWithData(p[:n]))
	payload := buffer.MakeWithView(buffer.NewViewWithData(p[n:]))
	buf.Merge(&payload)
	return buf
}

// merge returns item's coalesced packet: the head's headers with lengths,
// PSH and checksums updated, then every member's payload.
func (b *groBatch) merge(item *groItem) buffer.Buffer {
	total := item.hdrLen + item.payload
	hdr := buffer.NewViewWithData(b.pkts[item.head][:item.hdrLen])
	out := hdr.AsSlice()
	if !item.key.v6 {
		ip := header.IPv4(out)
		ip.SetTotalLength(uint16(total))
		inet.SetIPv4Checksum(ip)
	} else {
		binary.BigEndian.PutUint16(out[4:], uint16(total-header.IPv6MinimumSize))
	}
	th := out[item.ipLen:]
	if item.psh {
		th[13] |= uint8(header.TCPFlagPsh)
	}
	th[16], th[17] = 0, 0
	sum := checksum.Combine(inet.PseudoHeaderSum(out, tcpProto, total-item.ipLen), checksum.Checksum(th, 0))
	binary.BigEndian.PutUint16(th[16:], ^checksum.Combine(sum, item.sum))

	pv := buffer.NewViewSize(item.payload)
	dst := pv.AsSlice()
	for j := item.head; j >= 0; j = b.meta[j].next {
		dst = dst[copy(dst, b.pkts[j][item.hdrLen:]):]
	}
	buf := buffer.MakeWithView(hdr)
	payload := buffer.MakeWithView(pv)
	buf.Merge(&payload)
	return buf
}
