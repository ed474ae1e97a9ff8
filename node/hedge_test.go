package node

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// countingRelay counts what the Bind sends through the relay.
type countingRelay struct {
	mu   sync.Mutex
	sent int
}

func (r *countingRelay) Send(key.Public, []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent++
	return nil
}

func (r *countingRelay) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// TestHedgeSendsBothWays: while a direct path is hedged the Bind sends
// each packet directly and through the relay, counting both; a new direct
// address or none ends the hedge.
func TestHedgeSendsBothWays(t *testing.T) {
	pc := newChanConn()
	mux := NewMux(pc, nil)
	defer mux.Close()
	b := NewBind(mux)
	defer b.Close()
	relay := &countingRelay{}
	b.SetRelay(relay)
	var pk key.Public
	pk[0] = 1
	p := b.Peer(pk)
	addr := netip.MustParseAddrPort("198.51.100.2:40000")
	b.SetDirect(p, addr)
	pkt := append(transportTo(7, 1), make([]byte, 64)...)

	require.NoError(t, b.send(p, [][]byte{pkt}))
	assert.Equal(t, 0, relay.count(), "not hedged: direct only")
	p.hedge.Store(true)
	require.NoError(t, b.send(p, [][]byte{pkt, pkt}))
	assert.Equal(t, 2, relay.count(), "hedged: a copy of each through the relay")
	assert.Equal(t, uint64(3*len(pkt)), p.TxDirect.Load())
	assert.Equal(t, uint64(2*len(pkt)), p.TxRelay.Load())

	b.SetDirect(p, netip.MustParseAddrPort("198.51.100.2:40001"))
	assert.False(t, p.hedge.Load(), "a new direct address is not in doubt")
	p.hedge.Store(true)
	b.SetDirect(p, netip.AddrPort{})
	assert.False(t, p.hedge.Load())
}

// TestReplayDoesNotArmWatch: data sent again after a path switch does not
// count as unanswered (the peer's WireGuard drops what it already has
// without a word); data WireGuard sends does.
func TestReplayDoesNotArmWatch(t *testing.T) {
	pc := newChanConn()
	mux := NewMux(pc, nil)
	defer mux.Close()
	b := NewBind(mux)
	defer b.Close()
	var pk key.Public
	pk[0] = 1
	p := b.Peer(pk)
	b.SetDirect(p, netip.MustParseAddrPort("198.51.100.2:40000"))
	pkt := append(transportTo(7, 1), make([]byte, 64)...)

	require.NoError(t, b.sendWatched(p, [][]byte{pkt}, false))
	assert.Zero(t, p.unanswered.Load(), "a replayed packet armed the watch")
	require.NoError(t, b.send(p, [][]byte{pkt}))
	assert.NotZero(t, p.unanswered.Load(), "WireGuard's data did not arm the watch")
}
