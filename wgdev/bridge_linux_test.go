package wgdev

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/netx/netxtest"
	"github.com/latticelab/lattice/node"
)

// TestBridgeFailover: a node whose WireGuard is a stock wireguard-go
// device on its own UDP socket (kernel WireGuard's shape), reached only
// through the bridge, goes direct over ICE with a peer behind another
// NAT; a transfer then runs while the direct path is cut (the relay
// carries the gap) and restored, and arrives with the SHA-256 it left
// with. wgctrl reads the device meanwhile: the peer, its handshake, and
// the bridge's loopback socket as its endpoint.
func TestBridgeFailover(t *testing.T) {
	requireUAPI(t)
	w := newLabWorld(t)
	sa, sb := w.lw.Site(t, "port-restricted-cone"), w.lw.Site(t, "full-cone")
	pa := &netstack.SandboxProvisioner{}
	si := &standIn{name: fmt.Sprintf("lbr%d", os.Getpid()%100000), prov: pa}
	a := w.startNode(t, sa.Host, "alpha", func(c *node.Config) { c.Device = si })
	pb := &netstack.SandboxProvisioner{}
	b := w.startNode(t, sb.Host, "beta", func(c *node.Config) { c.Provisioner = pb })
	waitPath(t, a, node.PathDirect, 15*time.Second)

	// wgctrl sees the device as wg(8) would: the peer, with a handshake
	// and the bridge's socket as its endpoint.
	wc, err := wgctrl.New()
	require.NoError(t, err)
	defer wc.Close()
	require.Eventually(t, func() bool {
		d, err := wc.Device(si.name)
		return err == nil && len(d.Peers) == 1 && !d.Peers[0].LastHandshakeTime.IsZero()
	}, 10*time.Second, 20*time.Millisecond, "no handshake seen through wgctrl")
	d, err := wc.Device(si.name)
	require.NoError(t, err)
	p := d.Peers[0]
	bid := b.Identity()
	assert.Equal(t, bid.PublicKey(), key.Public(p.PublicKey))
	ep := p.Endpoint.AddrPort()
	assert.True(t, ep.Addr().IsLoopback(), "endpoint %v", ep)
	name, ok := si.device().Bridge().Name(ep)
	assert.True(t, ok, "endpoint %v is not the bridge's", ep)
	assert.Equal(t, node.EndpointString(bid.PublicKey()), name)
	assert.False(t, a.Status()[0].LastHandshake.IsZero(), "the node's status reads the handshake back through wgctrl")

	size := 32 << 20
	if raceEnabled {
		size = 8 << 20
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>8)
	}
	want := sha256.Sum256(data)
	ln := listen(t, pb.Stack(), "9")
	sum := netxtest.SinkDigest(ln)
	ctx, cancel := context.WithTimeout(t.Context(), 180*time.Second)
	defer cancel()
	c, err := pa.Stack().Dial(ctx, "tcp", netip.AddrPortFrom(b.Address().Addr(), 9).String())
	require.NoError(t, err)
	defer c.Close()
	written := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.Close()
		}
		written <- err
	}()
	cut := func(on bool) {
		for _, s := range []struct {
			r     *fabric.Router
			other netip.Addr
		}{{sa.Router, sb.Public}, {sb.Router, sa.Public}} {
			var fw nat.Firewall
			if on {
				fw.Rules = []nat.Rule{{Action: nat.Deny, Proto: nat.UDP, Dst: netip.PrefixFrom(s.other, 32)}}
			}
			require.NoError(t, s.r.NAT().SetFirewall(fw))
		}
	}
	require.Eventually(t, func() bool { return a.Status()[0].TxDirect > uint64(size/5) }, 60*time.Second, 10*time.Millisecond)
	cut(true)
	waitPath(t, a, node.PathRelay, 15*time.Second)
	relayed := a.Status()[0].TxRelay
	require.Eventually(t, func() bool { return a.Status()[0].TxRelay > relayed+uint64(size/10) }, 90*time.Second, 10*time.Millisecond,
		"the relay carried too little: %+v", a.Status())
	cut(false)
	waitPath(t, a, node.PathDirect, 20*time.Second)
	require.NoError(t, <-written)
	select {
	case got := <-sum:
		assert.Equal(t, want, got, "SHA-256 of the %d bytes received", size)
	case <-ctx.Done():
		t.Fatal("transfer did not finish")
	}
	st := a.Status()[0]
	t.Logf("direct %d B, relay %d B, unknown at the bridge %d", st.TxDirect, st.TxRelay, si.device().Bridge().Unknown())
	assert.GreaterOrEqual(t, len(st.History), 4, "relay → direct → relay → direct: %+v", st.History)
}
