package inet

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Delta accumulates the change of 16-bit words for an incremental checksum
// update, RFC 1624 equation 3:
//
//	HC' = ~(~HC + ~m + m')
//
// Word adds ~m + m' for each changed word; Apply folds the sum into a
// checksum. A rewrite costs O(changed words) instead of a pass over the
// packet, one Delta can update every checksum a change shows in (IP
// header, pseudo-header, an ICMP error's quote), and equation 3 (rather
// than RFC 1141's) is the form RFC 1624 shows to be correct around ones'
// complement negative zero. The zero Delta changes nothing.
type Delta uint16

// Word adds the change of one 16-bit word, at an even offset from the start
// of what the checksum covers, from old to new.
func (d *Delta) Word(old, new uint16) {
	*d = Delta(checksum.Combine(uint16(*d), checksum.Combine(^old, new)))
}

// Addr4 adds the change of an IPv4 address (two words).
func (d *Delta) Addr4(old, new [4]byte) {
	d.Word(binary.BigEndian.Uint16(old[:2]), binary.BigEndian.Uint16(new[:2]))
	d.Word(binary.BigEndian.Uint16(old[2:]), binary.BigEndian.Uint16(new[2:]))
}

// Apply returns checksum c updated by the accumulated change.
func (d Delta) Apply(c uint16) uint16 {
	return ^checksum.Combine(^c, uint16(d))
}

// Fix updates the big-endian checksum stored at b[off:off+2].
func (d Delta) Fix(b []byte, off int) {
	binary.BigEndian.PutUint16(b[off:], d.Apply(binary.BigEndian.Uint16(b[off:])))
}

// FixUDP is Fix for a UDP checksum: zero means "no checksum" (RFC 768) and
// stays zero, and a computed zero is sent as 0xFFFF.
func (d Delta) FixUDP(b []byte, off int) {
	c := binary.BigEndian.Uint16(b[off:])
	if c == 0 {
		return
	}
	c = d.Apply(c)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[off:], c)
}

// Update returns checksum c adjusted for one word changing from old to new.
func Update(c, old, new uint16) uint16 {
	var d Delta
	d.Word(old, new)
	return d.Apply(c)
}
