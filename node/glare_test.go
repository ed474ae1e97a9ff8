package node_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// dropInitiations is a memory relay that loses every handshake
// initiation (type 1) it is given.
type dropInitiations struct {
	memRelay
	dropped atomic.Int32
}

func (r *dropInitiations) Send(k key.Public, pkt []byte) error {
	if len(pkt) == 148 && pkt[0] == 1 {
		r.dropped.Add(1)
		return nil
	}
	return r.memRelay.Send(k, pkt)
}

// TestGlareYieldsToAnUnansweringPeer: the leading side's initiation never
// reaches the other (here the relay loses all of them; in a restart, the
// other's WireGuard dropped it while making its own), and the other's,
// made for its first packet, crosses it. The leading side drops the
// other's as crossing its own, but once a copy comes glareYield after the
// first (the other's Bind resends it at 100, 300, 700 and 1500 ms while
// it is unanswered) it answers it: the first packet arrives with the
// 1.5 s resend, not after the 2 s glare window with the 3 s one.
func TestGlareYieldsToAnUnansweringPeer(t *testing.T) {
	_, a, b, pa, pb := newWGPair(t)
	pa.SetLeads(true)
	pb.SetLeads(false)
	lossy := &dropInitiations{memRelay: memRelay{from: a.priv.Public(), to: b.bind}}
	a.bind.SetRelay(lossy)

	la, err := a.tnet.ListenUDPAddrPort(netip.AddrPortFrom(a.addr, 9000))
	require.NoError(t, err)
	defer la.Close()
	// a opens its handshake (for a packet of its own), which b never gets.
	ca, err := a.tnet.DialUDPAddrPort(netip.AddrPort{}, netip.AddrPortFrom(b.addr, 9000))
	require.NoError(t, err)
	defer ca.Close()
	_, err = ca.Write([]byte("lost"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lossy.dropped.Load() > 0 }, 5*time.Second, time.Millisecond)

	start := time.Now()
	cb, err := b.tnet.DialUDPAddrPort(netip.AddrPort{}, netip.AddrPortFrom(a.addr, 9000))
	require.NoError(t, err)
	defer cb.Close()
	_, err = cb.Write([]byte("first"))
	require.NoError(t, err)
	require.NoError(t, la.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 64)
	n, err := la.Read(buf)
	require.NoError(t, err, "b's first packet never arrived")
	took := time.Since(start)
	t.Logf("b's first packet arrived after %v; a's initiations lost: %d, b's dropped as crossing: %d, let through: %d",
		took, lossy.dropped.Load(), a.bind.Crossed(), a.bind.GlareYields())
	assert.Equal(t, "first", string(buf[:n]))
	assert.Less(t, took, 2500*time.Millisecond, "waited for the glare window to close")
	assert.Equal(t, uint64(1), a.bind.GlareYields())
}
