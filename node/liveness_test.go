package node_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/node"
)

// TestIdleConsentRate: an idle direct path with the default DeadAfter
// checks consent every 5 s or so (RFC 7675), not every second, and stays
// direct through ten minutes of idle virtual time. Before, each agent sent
// a check every second (every 2 s at best: pion's tick), about 1,200 STUN
// datagrams per node in these ten minutes; now about 240.
func TestIdleConsentRate(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		a := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{})
		b := startNode(t, w.site(t, "full-cone"), "beta", &stockNetstack{})
		waitPath(t, a, node.PathDirect, 10*time.Second)
		waitPath(t, b, node.PathDirect, 10*time.Second)
		time.Sleep(5 * time.Second) // the attempt's own checks are over
		before := []uint64{a.MuxStats().STUN, b.MuxStats().STUN}
		const idle = 10 * time.Minute
		time.Sleep(idle)
		for i, n := range []*node.Node{a, b} {
			got := n.MuxStats().STUN - before[i]
			// Each side receives the other's checks and the answers to its
			// own: 2 per 5 s, at most 2 per 4 s with the jitter.
			assert.LessOrEqual(t, got, uint64(2*idle/(4*time.Second)), "%s: STUN datagrams in %s of idle", n.Identity().Name, idle)
			assert.Positive(t, got, "%s: no consent at all", n.Identity().Name)
			st := n.Status()[0]
			assert.Equal(t, node.PathDirect, st.Path, "%+v", st.History)
			assert.Len(t, st.History, 2, "%s switched paths: %+v", n.Identity().Name, st.History)
		}
	})
}

// TestDeadPathUnderTraffic: a direct path that goes dark while a TCP
// stream runs over it falls back to the relay within a second of the cut
// (issue 22.5), though DeadAfter (the idle bound) is 20 s, and the stream
// resumes over the relay within two.
func TestDeadPathUnderTraffic(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		na, nb := &stockNetstack{}, &stockNetstack{}
		a := startNode(t, w.site(t, "port-restricted-cone"), "alpha", na)
		b := startNode(t, w.site(t, "full-cone"), "beta", nb)
		waitPath(t, a, node.PathDirect, 10*time.Second)
		waitPath(t, b, node.PathDirect, 10*time.Second)

		l, err := nb.net.ListenTCP(&net.TCPAddr{Port: 9})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		got := make(chan time.Time, 1024)
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				if n > 0 {
					select {
					case got <- time.Now():
					default:
					}
				}
			}
		}()
		ctx, cancel := context.WithCancel(t.Context())
		c, err := na.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(b.Address().Addr(), 9))
		require.NoError(t, err)
		writerDone := make(chan struct{})
		defer func() {
			cancel()
			c.Close()
			l.Close()
			<-writerDone
			<-readerDone
		}()
		go func() { // 1 KiB every 10 ms: a flow with a packet in flight at any moment
			defer close(writerDone)
			chunk := make([]byte, 1024)
			for ctx.Err() == nil {
				if _, err := c.Write(chunk); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		time.Sleep(time.Second)

		for i, r := range []string{"natlan0", "natlan1"} {
			other := netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(11 - i)}), 32)
			require.NoError(t, w.f.Router(r).NAT().SetFirewall(nat.Firewall{Rules: []nat.Rule{{Action: nat.Deny, Proto: nat.UDP, Dst: other}}}))
		}
		cut := time.Now()
		for a.Status()[0].Path != node.PathRelay {
			require.Less(t, time.Since(cut), 5*time.Second, "still direct: %+v", a.Status()[0].History)
			time.Sleep(10 * time.Millisecond)
		}
		detected := time.Since(cut)
		assert.LessOrEqual(t, detected, time.Second, "dead path under traffic detected after %s", detected)

		// Data flows again once the relay carries it.
		for len(got) > 0 {
			<-got
		}
		var resumed time.Duration
		for resumed == 0 {
			select {
			case at := <-got:
				if at.After(cut.Add(detected)) {
					resumed = at.Sub(cut)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no data over the relay within 10 s of the fallback: %+v", a.Status()[0])
			}
		}
		assert.LessOrEqual(t, resumed, 2*time.Second, "the stream resumed %s after the cut", resumed)
		t.Logf("cut → relay %s, stream resumed %s after the cut", detected, resumed)
	})
}
