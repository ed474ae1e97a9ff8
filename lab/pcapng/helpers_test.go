package pcapng

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// Hand-built IPv4 packets with correct checksums, so tshark decodes them
// without complaint.

const (
	protoTCP = 6
	protoUDP = 17
)

// ipv4 wraps an L4 segment (whose checksum field is still zero) in an IPv4
// header and fills in both checksums. csumAt is the offset of the L4
// checksum within seg.
func ipv4(t *testing.T, proto byte, src, dst string, seg []byte, csumAt int) []byte {
	t.Helper()
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	h := make([]byte, 20, 20+len(seg))
	h[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(seg)))
	binary.BigEndian.PutUint16(h[4:], 0x1234) // identification
	h[6] = 0x40                               // don't fragment
	h[8] = 64                                 // TTL
	h[9] = proto
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], checksum(0, h))

	// Pseudo-header: source, destination, zero, protocol, L4 length.
	var ph [12]byte
	copy(ph[0:], s[:])
	copy(ph[4:], d[:])
	ph[9] = proto
	binary.BigEndian.PutUint16(ph[10:], uint16(len(seg)))
	binary.BigEndian.PutUint16(seg[csumAt:], checksum(sum(0, ph[:]), seg))
	return append(h, seg...)
}

func udp4(t *testing.T, src, dst string, sport, dport uint16, payload string) []byte {
	t.Helper()
	seg := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint16(seg[4:], uint16(8+len(payload)))
	seg = append(seg, payload...)
	return ipv4(t, protoUDP, src, dst, seg, 6)
}

// tcp4SYN builds a bare SYN.
func tcp4SYN(t *testing.T, src, dst string, sport, dport uint16, seq uint32) []byte {
	t.Helper()
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], sport)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint32(seg[4:], seq)
	seg[12] = 5 << 4 // data offset: 5 words
	seg[13] = 0x02   // SYN
	binary.BigEndian.PutUint16(seg[14:], 64240)
	return ipv4(t, protoTCP, src, dst, seg, 16)
}

// sum adds b to the running one's-complement sum acc (RFC 1071).
func sum(acc uint32, b []byte) uint32 {
	for len(b) >= 2 {
		acc += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

func checksum(acc uint32, b []byte) uint16 {
	acc = sum(acc, b)
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return ^uint16(acc)
}

// enc builds pcapng blocks by hand in either byte order, independently of
// Writer, to feed Reader what other tools write and what no tool should.
type enc struct {
	o interface {
		binary.ByteOrder
		binary.AppendByteOrder
	}
}

func (e enc) u16(v uint16) []byte { return e.o.AppendUint16(nil, v) }
func (e enc) u32(v uint32) []byte { return e.o.AppendUint32(nil, v) }
func (e enc) u64(v uint64) []byte { return e.o.AppendUint64(nil, v) }

func (e enc) block(typ uint32, parts ...[]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	n := uint32(12 + len(body))
	b := append(e.u32(typ), e.u32(n)...)
	b = append(b, body...)
	return append(b, e.u32(n)...)
}

// opt encodes one option, padded.
func (e enc) opt(code uint16, val []byte) []byte {
	b := append(e.u16(code), e.u16(uint16(len(val)))...)
	b = append(b, val...)
	return append(b, make([]byte, pad4(len(val))-len(val))...)
}

var endOpt = []byte{0, 0, 0, 0}

func (e enc) shb(opts ...[]byte) []byte {
	parts := [][]byte{e.u32(byteOrderMagic), e.u16(1), e.u16(0), e.u64(^uint64(0))}
	if len(opts) > 0 {
		parts = append(append(parts, opts...), endOpt)
	}
	return e.block(blockSHB, parts...)
}

func (e enc) idb(lt LinkType, snap uint32, opts ...[]byte) []byte {
	parts := [][]byte{e.u16(uint16(lt)), e.u16(0), e.u32(snap)}
	if len(opts) > 0 {
		parts = append(append(parts, opts...), endOpt)
	}
	return e.block(blockIDB, parts...)
}

func (e enc) epb(id uint32, ts uint64, data []byte, orig uint32, opts ...[]byte) []byte {
	parts := [][]byte{
		e.u32(id), e.u32(uint32(ts >> 32)), e.u32(uint32(ts)),
		e.u32(uint32(len(data))), e.u32(orig),
		data, make([]byte, pad4(len(data))-len(data)),
	}
	if len(opts) > 0 {
		parts = append(append(parts, opts...), endOpt)
	}
	return e.block(blockEPB, parts...)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
