package node

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTrimmedPeers: marking a peer trimmed costs the same whatever the
// number of trimmed peers (a node's lazy peers all start trimmed: copying
// the set per change made adding N peers quadratic), and a packet from
// the interface to a trimmed peer's address puts that peer back, once;
// one to a peer in WireGuard's configuration puts back nothing.
func TestTrimmedPeers(t *testing.T) {
	u := &unreachableTUN{}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)}) }
	const peers = 2000
	paths := make([]*Path, peers)
	restored := make([]int, peers)
	for i := range peers {
		paths[i] = &Path{}
		u.setPath(addr(i), paths[i])
		if i == peers-1 {
			break // the last one is in WireGuard's configuration
		}
		f := func() { restored[i]++; u.noteTrimmed(false) }
		paths[i].restore.Store(&f)
		u.noteTrimmed(true)
	}
	extra := addr(peers)
	allocs := testing.AllocsPerRun(100, func() {
		u.setPath(extra, paths[0])
		u.noteTrimmed(true)
		u.noteTrimmed(false)
		u.setPath(extra, nil)
	})
	assert.Zero(t, allocs, "allocations to add a peer to %d, mark it trimmed and back", peers)

	tests := []struct {
		name string
		dst  netip.Addr
		want int // the peer restored, -1 none
	}{
		{"to a trimmed peer", addr(7), 7},
		{"to another", addr(1998), 1998},
		{"to no peer", netip.MustParseAddr("100.64.200.1"), -1},
		{"to the same peer, restored already", addr(7), -1},
		{"to a peer never trimmed", addr(peers - 1), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]int(nil), restored...)
			pkt := make([]byte, 20)
			pkt[0] = 0x45
			copy(pkt[16:20], tt.dst.AsSlice())
			u.restoreTrimmed([][]byte{pkt}, []int{len(pkt)}, 0, 1)
			for i := range restored {
				want := before[i]
				if i == tt.want {
					want++
				}
				assert.Equal(t, want, restored[i], "peer %d", i)
			}
		})
	}
	assert.Equal(t, int32(peers-3), u.trimmed.Load())
}
