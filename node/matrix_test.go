package node_test

import (
	"context"
	"crypto/sha256"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx/netxtest"
	"github.com/latticelab/lattice/node"
)

// expectDirect is ICE theory for two nodes behind the named NATs: a
// direct path needs UDP, and fails only when a symmetric NAT meets a NAT
// that filters on port too (its checks come from ports the other side's
// filter never saw).
func expectDirect(a, b string) bool {
	if a == "udp-blocked" || b == "udp-blocked" {
		return false
	}
	portFiltering := func(p string) bool { return p == "symmetric" || p == "port-restricted-cone" }
	if (a == "symmetric" && portFiltering(b)) || (b == "symmetric" && portFiltering(a)) {
		return false
	}
	return true
}

// slow scales a duration for the race detector.
func slow(d time.Duration) time.Duration {
	if raceEnabled {
		return 4 * d
	}
	return d
}

func fastICE(c *node.Config) {
	exactICE(c)
	c.ICE.AttemptTimeout = slow(c.ICE.AttemptTimeout)
}

// exactICE is fastICE on the virtual clock, where the race detector slows
// the wall clock only: the bounds stay exact.
func exactICE(c *node.Config) {
	c.ICE.AttemptTimeout = 3 * time.Second
	c.ICE.RetryMin = 30 * time.Second // one attempt within the test
}

// TestPathMatrix checks the path every pair of NAT profiles ends on, and
// that traffic flows on it.
func TestPathMatrix(t *testing.T) {
	profiles := nat.ProfileNames()
	for i, pa := range profiles {
		for _, pb := range profiles[i:] {
			t.Run(pa+"+"+pb, func(t *testing.T) {
				t.Parallel()
				w := newLabWorld(t)
				na, nb := &stockNetstack{}, &stockNetstack{}
				a := startNode(t, w.site(t, pa), "alpha", na, fastICE)
				b := startNode(t, w.site(t, pb), "beta", nb, fastICE)
				var st node.PeerStatus
				if expectDirect(pa, pb) {
					st = waitPath(t, a, node.PathDirect, slow(8*time.Second))
				} else {
					require.Eventually(t, func() bool {
						s := a.Status()
						return len(s) == 1 && s[0].ICE.Err != ""
					}, slow(10*time.Second), 50*time.Millisecond, "ICE never gave up: %+v", a.Status())
					st = a.Status()[0]
					assert.Equal(t, node.PathRelay, st.Path, "%+v", st)
				}
				serveEcho(t, nb, 7)
				eventuallyEcho(t, na, b.Address().Addr(), 7, slow(40*time.Second), pa+" to "+pb)
				t.Logf("%s ↔ %s: %s %s", pa, pb, st.Path, st.Endpoint)
			})
		}
	}
}

// TestDirectCutMidTransfer moves 50 MB while the direct path is cut (a
// firewall drops UDP between the two NATs) and restored: the relay
// carries the gap and the data arrives intact.
func TestDirectCutMidTransfer(t *testing.T) {
	w := newLabWorld(t)
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "port-restricted-cone"), "alpha", na, func(c *node.Config) {
		c.ICE.RetryMin, c.ICE.RetryMax = time.Second, 2*time.Second
	})
	b := startNode(t, w.site(t, "full-cone"), "beta", nb, func(c *node.Config) {
		c.ICE.RetryMin, c.ICE.RetryMax = time.Second, 2*time.Second
	})
	waitPath(t, a, node.PathDirect, slow(8*time.Second))

	l, err := nb.net.ListenTCP(&net.TCPAddr{Port: 9})
	require.NoError(t, err)
	defer l.Close()
	// 50 MB; under the race detector, which makes it ten times slower,
	// 8 MB (the full size runs in the suite's non-race pass).
	size := 50 << 20
	if raceEnabled {
		size = 8 << 20
	}
	sum := netxtest.SinkDigest(l)
	ctx, cancel := context.WithTimeout(t.Context(), slow(180*time.Second))
	defer cancel()
	c, err := na.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(b.Address().Addr(), 9))
	require.NoError(t, err)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>8)
	}
	want := sha256.Sum256(data)

	cut := func(on bool) {
		for i, r := range []string{"natlan0", "natlan1"} {
			var fw nat.Firewall
			if on {
				other := netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(11 - i)}), 32)
				fw.Rules = []nat.Rule{{Action: nat.Deny, Proto: nat.UDP, Dst: other}}
			}
			require.NoError(t, w.f.Router(r).NAT().SetFirewall(fw))
		}
	}
	written := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.Close()
		}
		written <- err
	}()
	// Cut once a fifth is through, restore once the relay has carried some.
	require.Eventually(t, func() bool { return a.Status()[0].TxDirect > uint64(size/5) }, slow(30*time.Second), 10*time.Millisecond)
	cut(true)
	waitPath(t, a, node.PathRelay, slow(10*time.Second))
	relayed := a.Status()[0].TxRelay
	// The inner TCP flow lost everything for the ~5 s the dead path took to
	// detect, so its retransmission timer has backed off: it may take tens
	// of seconds to send again, now over the relay.
	require.Eventually(t, func() bool { return a.Status()[0].TxRelay > relayed+uint64(size/10) }, slow(90*time.Second), 10*time.Millisecond, "relay carried too little: relay %+v; %+v", w.relay.Stats(), a.Status())
	cut(false)
	waitPath(t, a, node.PathDirect, slow(15*time.Second))
	require.NoError(t, <-written)
	select {
	case got := <-sum:
		assert.Equal(t, want, got, "SHA-256 of the 50 MB received")
	case <-ctx.Done():
		t.Fatal("transfer did not finish")
	}
	st := a.Status()[0]
	t.Logf("direct %d B, relay %d B; history:", st.TxDirect, st.TxRelay)
	for _, e := range st.History {
		t.Logf("  %s %s %v: %s", e.Time.Format("15:04:05.000"), e.To, e.Addr, e.Reason)
	}
	for _, e := range b.Status()[0].History {
		t.Logf("  beta %s %s %v: %s", e.Time.Format("15:04:05.000"), e.To, e.Addr, e.Reason)
	}
	assert.GreaterOrEqual(t, len(st.History), 4, "relay → direct → relay → direct")
}
