package nat

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigUDP is a UDP datagram of n payload bytes with correct checksums.
func bigUDP(src, dst netip.AddrPort, n int) []byte {
	l4 := make([]byte, 8+n)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	for i := range n {
		l4[8+i] = byte(i * 7)
	}
	pkt := ipv4(ipProtoUDP, src.Addr(), dst.Addr(), l4)
	pkt[6] = 0 // DF clear
	return finish(pkt, false)
}

// split fragments an IPv4 packet (20-byte header) into pieces of at most
// size payload bytes (a multiple of 8), as a router would.
func split(pkt []byte, size int) [][]byte {
	payload := pkt[20:]
	var out [][]byte
	for off := 0; off < len(payload); off += size {
		end := min(off+size, len(payload))
		f := make([]byte, 20+end-off)
		copy(f, pkt[:20])
		copy(f[20:], payload[off:end])
		binary.BigEndian.PutUint16(f[2:], uint16(len(f)))
		fo := uint16(off / 8)
		if end < len(payload) {
			fo |= 0x2000 // more fragments
		}
		binary.BigEndian.PutUint16(f[6:], fo)
		binary.BigEndian.PutUint16(f[10:], 0)
		binary.BigEndian.PutUint16(f[10:], fold(sum(f[:20], 0)))
		out = append(out, f)
	}
	return out
}

// join reassembles fragments in order into one packet.
func join(frags [][]byte) []byte {
	pkt := append([]byte(nil), frags[0][:20]...)
	for _, f := range frags {
		pkt = append(pkt, f[20:]...)
	}
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(pkt[6:], 0)
	binary.BigEndian.PutUint16(pkt[10:], 0)
	binary.BigEndian.PutUint16(pkt[10:], fold(sum(pkt[:20], 0)))
	return pkt
}

func ipChecksumOK(t *testing.T, f []byte) {
	t.Helper()
	assert.Zero(t, fold(sum(f[:20], 0)), "ipv4 header checksum")
}

// TestFragmentsTranslated: a 3000-byte datagram in three fragments leaves
// with every fragment's source translated, and reassembles into a datagram
// whose UDP checksum holds for the new source; the answer's fragments come
// back in the same way; a later fragment with no first is dropped.
func TestFragmentsTranslated(t *testing.T) {
	n := newNAT(t, Config{})
	now := time.Unix(1000, 0)
	in, remote := ap("192.168.1.2:5000"), ap("198.51.100.7:9")
	frags := split(bigUDP(in, remote, 3000), 1480)
	require.Len(t, frags, 3)
	for i, f := range frags {
		res := n.Process(now, f, FromInside)
		require.Equal(t, Forward, res.Verdict, "fragment %d: %s", i, res.Reason)
		ipChecksumOK(t, f)
		assert.Equal(t, public, netip.AddrFrom4([4]byte(f[12:16])), "fragment %d leaves from the public address", i)
	}
	whole := join(frags)
	verifyChecksums(t, whole)
	ext, dst := endpoints(whole)
	assert.Equal(t, remote, dst)
	assert.Equal(t, public, ext.Addr())
	st := n.Stats()
	assert.Equal(t, uint64(3), st.Fragments)
	assert.Equal(t, uint64(3), st.Translated)

	// The answer, fragmented too, reaches the inside host.
	reply := split(bigUDP(remote, ext, 2000), 1480)
	for i, f := range reply {
		res := n.Process(now, f, FromOutside)
		require.Equal(t, Forward, res.Verdict, "reply fragment %d: %s", i, res.Reason)
		assert.Equal(t, in.Addr(), netip.AddrFrom4([4]byte(f[16:20])))
	}
	back := join(reply)
	verifyChecksums(t, back)
	_, to := endpoints(back)
	assert.Equal(t, in, to)

	// Out of order: the second fragment of a new datagram before its first.
	next := split(bigUDP(in, remote, 3000), 1480)
	binary.BigEndian.PutUint16(next[1][4:], 0x4321) // another IP ID
	orig := append([]byte(nil), next[1]...)
	res := n.Process(now, next[1], FromInside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Contains(t, res.Reason, "no first fragment seen")
	assert.Equal(t, orig, next[1], "a dropped fragment is left as it was")

	// After the reassembly timeout, later fragments are no longer known.
	late := split(bigUDP(in, remote, 3000), 1480)
	require.Equal(t, Forward, n.Process(now, late[0], FromInside).Verdict)
	assert.Equal(t, Forward, n.Process(now.Add(fragTimeout-time.Second), late[1], FromInside).Verdict)
	assert.Equal(t, Drop, n.Process(now.Add(fragTimeout), late[2], FromInside).Verdict)

	// The last fragment ends the datagram: a copy of it finds nothing, and
	// the NAT remembers no datagram once they are through.
	dup := split(bigUDP(in, remote, 3000), 1480)
	for _, f := range dup {
		require.Equal(t, Forward, n.Process(now, f, FromInside).Verdict)
	}
	assert.Equal(t, Drop, n.Process(now, append([]byte(nil), dup[2]...), FromInside).Verdict)
	n.mu.Lock()
	left := len(n.frags)
	n.mu.Unlock()
	assert.Zero(t, left, "no datagram is remembered once its last fragment passed (or it expired)")

	// A reboot forgets them too.
	again := split(bigUDP(in, remote, 3000), 1480)
	require.Equal(t, Forward, n.Process(now, again[0], FromInside).Verdict)
	n.Reboot()
	assert.Equal(t, Drop, n.Process(now, again[1], FromInside).Verdict)
}

// TestFragmentFiltered: the first fragment of an unsolicited inbound
// datagram is filtered like a whole one, and so its later fragments find
// no translation.
func TestFragmentFiltered(t *testing.T) {
	n := newNAT(t, Config{Filtering: AddressAndPortDependent})
	now := time.Unix(1000, 0)
	frags := split(bigUDP(ap("198.51.100.7:9"), netip.AddrPortFrom(public, 40000), 2000), 1480)
	assert.Equal(t, Drop, n.Process(now, frags[0], FromOutside).Verdict)
	res := n.Process(now, frags[1], FromOutside)
	assert.Equal(t, Drop, res.Verdict)
	assert.Contains(t, res.Reason, "no first fragment seen")
}
