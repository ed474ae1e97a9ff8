package control

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"

	"github.com/latticelab/lattice/key"
)

// Overlay is the overlay network every node's address comes from (the
// RFC 6598 shared address space, as Tailscale and NetBird use).
var Overlay = netip.MustParsePrefix("100.64.0.0/10")

// overlaySize is the number of addresses in Overlay.
const overlaySize = 1 << (32 - 10)

// preferredAddrs returns, in order, the addresses to try for key: first the
// one its hash picks, then the ones after it, wrapping around. The same key
// therefore gets the same address as long as nobody else holds it, and
// two keys collide only when the pool fills up. The network and broadcast
// addresses are skipped.
func preferredAddrs(pub key.Public) func(yield func(netip.Addr) bool) {
	return func(yield func(netip.Addr) bool) {
		h := sha256.Sum256(pub[:])
		start := binary.BigEndian.Uint32(h[:4]) % overlaySize
		base := binary.BigEndian.Uint32(Overlay.Addr().AsSlice())
		for i := range uint32(overlaySize) {
			off := (start + i) % overlaySize
			if off == 0 || off == overlaySize-1 {
				continue
			}
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], base+off)
			if !yield(netip.AddrFrom4(b)) {
				return
			}
		}
	}
}

// nodeID derives a node's ID from its key: stable across registrations.
func nodeID(pub key.Public) string {
	h := sha256.Sum256(append([]byte("lattice node id\x00"), pub[:]...))
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	id := make([]byte, 0, 17)
	id = append(id, 'n')
	var acc uint64
	bits := 0
	for _, c := range h[:10] {
		acc = acc<<8 | uint64(c)
		bits += 8
		for bits >= 5 {
			bits -= 5
			id = append(id, alphabet[(acc>>bits)&31])
		}
	}
	return string(id)
}
