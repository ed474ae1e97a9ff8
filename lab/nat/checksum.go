package nat

import "encoding/binary"

// Incremental Internet checksum update, RFC 1624 equation 3:
//
//	HC' = ~(~HC + ~m + m')
//
// A csumDelta accumulates ~m + m' for every 16-bit word a rewrite changes;
// apply folds it into a checksum. This costs O(changed words) instead of a
// pass over the packet, and equation 3 (rather than RFC 1141's) is the form
// RFC 1624 shows to be correct around one's-complement negative zero.
type csumDelta uint32

// word adds the change of one 16-bit word from old to new.
func (d *csumDelta) word(old, new uint16) {
	*d += csumDelta(^old) + csumDelta(new)
}

// addr adds the change of an IPv4 address (two words).
func (d *csumDelta) addr(old, new [4]byte) {
	d.word(binary.BigEndian.Uint16(old[:2]), binary.BigEndian.Uint16(new[:2]))
	d.word(binary.BigEndian.Uint16(old[2:]), binary.BigEndian.Uint16(new[2:]))
}

// apply returns checksum c updated by the accumulated change.
func (d csumDelta) apply(c uint16) uint16 {
	s := uint32(^c) + uint32(d)
	for s > 0xffff {
		s = (s & 0xffff) + s>>16
	}
	return ^uint16(s)
}

// fix updates the big-endian checksum stored at b[off:off+2].
func (d csumDelta) fix(b []byte, off int) {
	binary.BigEndian.PutUint16(b[off:], d.apply(binary.BigEndian.Uint16(b[off:])))
}

// fixUDP is fix for a UDP checksum: zero means "no checksum" (RFC 768) and
// stays zero, and a computed zero is sent as 0xFFFF.
func (d csumDelta) fixUDP(b []byte, off int) {
	c := binary.BigEndian.Uint16(b[off:])
	if c == 0 {
		return
	}
	c = d.apply(c)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[off:], c)
}
