package node_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx/netxtest"
	"github.com/latticelab/lattice/node"
)

// lazyIdle is the lazy tests' idle timeout: short enough to wait out in a
// few virtual minutes, long enough that a test's traffic keeps a path up.
const lazyIdle = time.Minute

func lazy(c *node.Config) {
	c.ICE.Lazy = true
	c.ICE.IdleTimeout = lazyIdle
}

// lastReason is the reason of n's last path switch to its only peer.
func lastReason(n *node.Node) string {
	st := n.Status()
	if len(st) != 1 || len(st[0].History) == 0 {
		return ""
	}
	return st[0].History[len(st[0].History)-1].Reason
}

// requireIdle checks n's only peer is idle: relayed, no ICE agent, and
// status saying why.
func requireIdle(t *testing.T, n *node.Node) {
	t.Helper()
	st := n.Status()
	require.Len(t, st, 1)
	assert.Equal(t, node.PathRelay, st[0].Path, "%s: %+v", n.Identity().Name, st[0].History)
	assert.Equal(t, "idle", st[0].ICE.State, "%s has an ICE agent", n.Identity().Name)
	assert.Empty(t, st[0].ICE.LocalCandidates, "%s gathered candidates", n.Identity().Name)
	assert.Contains(t, lastReason(n), "idle (lazy)")
	assert.Regexp(t, `^idle \(lazy\).*direct path negotiated on (first|next) traffic$`, st[0].Why)
}

// TestLazyFirstPacket: two lazy nodes stay on the relay with no ICE agent
// until traffic flows; the first UDP datagram and the first TCP connection
// to the idle peer are delivered at once (over the relay), the traffic
// brings both sides direct, and IdleTimeout of quiet makes both idle
// again. Virtual time: the waits are exact and cost nothing.
func TestLazyFirstPacket(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		na, nb := &stockNetstack{}, &stockNetstack{}
		a := startNode(t, w.site(t, "full-cone"), "alpha", na, lazy)
		b := startNode(t, w.site(t, "port-restricted-cone"), "beta", nb, lazy)
		require.Eventually(t, func() bool { return len(a.Status()) == 1 && len(b.Status()) == 1 }, 10*time.Second, 10*time.Millisecond)
		time.Sleep(30 * time.Second)
		requireIdle(t, a)
		requireIdle(t, b)
		for _, n := range []*node.Node{a, b} {
			st := n.Status()[0]
			assert.Zero(t, st.TxRelay+st.TxDirect, "%s sent WireGuard packets to an idle peer", n.Identity().Name)
			assert.Zero(t, n.WireGuardPeers(), "%s: an idle peer is in WireGuard's configuration", n.Identity().Name)
		}

		// The first datagram to an idle peer arrives.
		pc, err := nb.net.st.ListenPacket(t.Context(), "udp", ":5353")
		require.NoError(t, err)
		defer pc.Close()
		got := make(chan string, 1)
		go func() {
			buf := make([]byte, 64)
			n, _, err := pc.ReadFrom(buf)
			if err == nil {
				got <- string(buf[:n])
			}
		}()
		c, err := na.net.st.Dial(t.Context(), "udp", netip.AddrPortFrom(b.Address().Addr(), 5353).String())
		require.NoError(t, err)
		defer c.Close()
		sent := time.Now()
		_, err = c.Write([]byte("first datagram"))
		require.NoError(t, err)
		select {
		case s := <-got:
			assert.Equal(t, "first datagram", s)
			t.Logf("first datagram to an idle peer took %v", time.Since(sent))
		case <-time.After(5 * time.Second):
			t.Fatal("the first datagram to an idle peer was lost")
		}
		// It woke both sides: they go direct.
		waitPath(t, a, node.PathDirect, 10*time.Second)
		waitPath(t, b, node.PathDirect, 10*time.Second)
		assert.Equal(t, 1, a.WireGuardPeers())
		assert.Equal(t, 1, b.WireGuardPeers())

		// Quiet for IdleTimeout: both idle again, nothing left running,
		// nothing sent: no keepalives, so no handshakes either.
		time.Sleep(lazyIdle + 15*time.Second)
		requireIdle(t, a)
		requireIdle(t, b)
		assert.Zero(t, a.WireGuardPeers(), "trimmed again once idle")
		assert.Zero(t, b.WireGuardPeers(), "trimmed again once idle")
		before := []node.PeerStatus{a.Status()[0], b.Status()[0]}
		time.Sleep(10 * time.Minute)
		for i, n := range []*node.Node{a, b} {
			st := n.Status()[0]
			assert.Equal(t, before[i].TxRelay+before[i].TxDirect, st.TxRelay+st.TxDirect, "%s sent to an idle peer", n.Identity().Name)
			assert.Len(t, st.History, len(before[i].History), "%s: %+v", n.Identity().Name, st.History)
		}

		// The first TCP connection to the idle peer connects at once: its
		// SYN is not lost (a lost one costs a 1 s retransmission).
		serveEcho(t, nb, 7)
		ctx, cancel := context.WithTimeout(t.Context(), 900*time.Millisecond)
		defer cancel()
		require.NoError(t, tryEcho(ctx, na, b.Address().Addr(), 7), "the first TCP connection to an idle peer")
		waitPath(t, a, node.PathDirect, 10*time.Second)
		waitPath(t, b, node.PathDirect, 10*time.Second)
	})
}

// TestLazyIdleDuringTransfer: a TCP transfer that pauses for longer than
// IdleTimeout: the pair goes idle in the pause, the second half wakes it
// and goes direct again, and the data arrives intact.
func TestLazyIdleDuringTransfer(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		na, nb := &stockNetstack{}, &stockNetstack{}
		a := startNode(t, w.site(t, "restricted-cone"), "alpha", na, lazy)
		b := startNode(t, w.site(t, "full-cone"), "beta", nb, lazy)
		require.Eventually(t, func() bool { return len(a.Status()) == 1 && len(b.Status()) == 1 }, 10*time.Second, 10*time.Millisecond)
		l, err := nb.net.ListenTCP(&net.TCPAddr{Port: 9})
		require.NoError(t, err)
		defer l.Close()
		sum := netxtest.SinkDigest(l)
		c, err := na.net.DialContextTCPAddrPort(t.Context(), netip.AddrPortFrom(b.Address().Addr(), 9))
		require.NoError(t, err)
		data := make([]byte, 4<<20)
		for i := range data {
			data[i] = byte(i*31 + i>>8)
		}
		want := sha256.Sum256(data)
		half := len(data) / 2
		_, err = c.Write(data[:half])
		require.NoError(t, err)
		waitPath(t, a, node.PathDirect, 10*time.Second)
		time.Sleep(lazyIdle + 15*time.Second) // the pause
		requireIdle(t, a)
		requireIdle(t, b)
		_, err = c.Write(data[half:])
		require.NoError(t, err)
		require.NoError(t, c.Close())
		select {
		case got := <-sum:
			assert.Equal(t, want, got, "SHA-256 of the 4 MiB received")
		case <-time.After(time.Minute):
			t.Fatal("transfer did not finish")
		}
		waitPath(t, a, node.PathDirect, 10*time.Second)
		var kinds []string
		for _, e := range a.Status()[0].History {
			kinds = append(kinds, string(e.To)+": "+e.Reason)
		}
		t.Logf("alpha's history:\n%s", strings.Join(kinds, "\n"))
		assert.GreaterOrEqual(t, len(kinds), 5, "registered, idle, direct, idle, direct")
	})
}

// TestLazyAlwaysDirect: a peer named in AlwaysDirect goes direct without
// any traffic, on both sides, even when only one side names the other: the
// lazy side starts its agent on the offer.
func TestLazyAlwaysDirect(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		router := func(c *node.Config) { lazy(c); c.ICE.AlwaysDirect = []string{"beta"} }
		a := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, router)
		b := startNode(t, w.site(t, "restricted-cone"), "beta", &stockNetstack{}, lazy)
		waitPath(t, a, node.PathDirect, 10*time.Second)
		waitPath(t, b, node.PathDirect, 10*time.Second)
		// alpha keeps it up; beta, lazy and quiet, closes its side after
		// IdleTimeout, and alpha's retries bring it back.
		time.Sleep(lazyIdle + 30*time.Second)
		waitPath(t, a, node.PathDirect, 70*time.Second)
	})
}

// TestLazyAlwaysDirectByTag: "tag:router" in AlwaysDirect takes every
// peer whose join token tagged it router direct without traffic, and
// leaves the others idle; the tag comes from control, not the peer.
func TestLazyAlwaysDirectByTag(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		w := newLabWorld(t)
		a := startNode(t, w.site(t, "full-cone"), "alpha", &stockNetstack{}, func(c *node.Config) {
			lazy(c)
			c.ICE.AlwaysDirect = []string{node.TagPrefix + "router"}
		})
		startNode(t, w.site(t, "restricted-cone"), "gw", &stockNetstack{}, lazy, func(c *node.Config) { c.Token = routerToken })
		startNode(t, w.site(t, "restricted-cone"), "laptop", &stockNetstack{}, lazy)
		paths := func() map[string]node.PathKind {
			out := map[string]node.PathKind{}
			for _, st := range a.Status() {
				out[st.Peer.Name] = st.Path
			}
			return out
		}
		require.Eventually(t, func() bool { return paths()["gw"] == node.PathDirect }, 10*time.Second, 20*time.Millisecond,
			"the router never went direct: %v", paths())
		time.Sleep(10 * time.Second)
		assert.Equal(t, map[string]node.PathKind{"gw": node.PathDirect, "laptop": node.PathRelay}, paths())
		for _, st := range a.Status() {
			if st.Peer.Name == "laptop" {
				assert.Equal(t, "idle", st.ICE.State, "no agent for an untagged lazy peer")
			}
		}
	})
}

// TestLazyPathMatrix: the ICE theory matrix with lazy peers. Every pair
// of NAT profiles starts idle on the relay, ends on the predicted path
// once traffic flows, goes idle again after IdleTimeout of quiet, and
// ends on the predicted path again on the next traffic.
func TestLazyPathMatrix(t *testing.T) {
	profiles := nat.ProfileNames()
	for i, pa := range profiles {
		for _, pb := range profiles[i:] {
			t.Run(pa+"+"+pb, func(t *testing.T) {
				t.Parallel()
				inVirtualTime(t, func(t *testing.T) { lazyPair(t, pa, pb) })
			})
		}
	}
}

func lazyPair(t *testing.T, pa, pb string) {
	w := newLabWorld(t)
	na, nb := &stockNetstack{}, &stockNetstack{}
	opts := func(c *node.Config) { lazy(c); exactICE(c) }
	a := startNode(t, w.site(t, pa), "alpha", na, opts)
	b := startNode(t, w.site(t, pb), "beta", nb, opts)
	serveEcho(t, nb, 7)
	require.Eventually(t, func() bool { return len(a.Status()) == 1 && len(b.Status()) == 1 }, 10*time.Second, 10*time.Millisecond)
	for round := range 2 {
		time.Sleep(lazyIdle + 15*time.Second)
		requireIdle(t, a)
		requireIdle(t, b)
		eventuallyEcho(t, na, b.Address().Addr(), 7, 10*time.Second, fmt.Sprintf("%s to %s, round %d", pa, pb, round))
		if expectDirect(pa, pb) {
			assert.Empty(t, waitPath(t, a, node.PathDirect, 8*time.Second).Why)
			waitPath(t, b, node.PathDirect, 8*time.Second)
			continue
		}
		// ICE gives up, and status says so in words, with the next
		// attempt's countdown.
		why := regexp.MustCompile(`^attempt timed out after 3s: .+, next in \d+s$`)
		require.Eventually(t, func() bool {
			s := a.Status()
			return len(s) == 1 && s[0].ICE.Err != "" && why.MatchString(s[0].Why)
		}, 10*time.Second, 50*time.Millisecond, "round %d: ICE never gave up: %+v", round, a.Status())
		st := a.Status()[0]
		assert.Equal(t, node.PathRelay, st.Path)
		assert.NotContains(t, st.Why, st.ICE.Err)
		t.Logf("%s → %s: %s", pa, pb, st.Why)
	}
}
