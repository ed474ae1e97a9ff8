package node_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/device"
	wgnetstack "golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/netx/netxtest"
	"github.com/latticelab/lattice/node"
)

// memRelay is a relay between two Binds in memory.
type memRelay struct {
	from key.Public
	to   *node.Bind
}

func (r *memRelay) Send(_ key.Public, pkt []byte) error {
	r.to.DeliverRelayed(r.from, pkt)
	return nil
}

type wgNode struct {
	host *fabric.Host
	mux  *node.Mux
	bind *node.Bind
	dev  *device.Device
	tnet *wgnetstack.Net
	priv key.Private
	addr netip.Addr
}

func newWGNode(t *testing.T, h *fabric.Host, addr string) *wgNode {
	t.Helper()
	pc, err := h.ListenPacket(t.Context(), "udp4", ":51820")
	require.NoError(t, err)
	mux := node.NewMux(pc, nil)
	t.Cleanup(func() { mux.Close() })
	priv := key.NewPrivate()
	a := netip.MustParseAddr(addr)
	tun, tnet, err := wgnetstack.CreateNetTUN([]netip.Addr{a}, nil, 1420)
	require.NoError(t, err)
	bind := node.NewBind(mux)
	dev := device.NewDevice(tun, bind, device.NewLogger(device.LogLevelSilent, ""))
	t.Cleanup(dev.Close)
	require.NoError(t, dev.IpcSet("private_key="+priv.RevealHex()+"\n"))
	require.NoError(t, dev.Up())
	return &wgNode{host: h, mux: mux, bind: bind, dev: dev, tnet: tnet, priv: priv, addr: a}
}

func (n *wgNode) addPeer(t *testing.T, o *wgNode) *node.Path {
	t.Helper()
	pub := o.priv.Public()
	require.NoError(t, n.dev.IpcSet(fmt.Sprintf("public_key=%s\nendpoint=%s\nallowed_ip=%s/32\n",
		pub.Hex(), node.EndpointString(pub), o.addr)))
	return n.bind.Peer(pub)
}

// newWGPair puts two WireGuard nodes on a lab internet (a at
// 203.0.113.1, b at .2), each the other's peer, with a relay between them
// in memory and no direct path yet. pa is a's view of b, pb b's of a.
func newWGPair(t *testing.T) (f *fabric.Fabric, a, b *wgNode, pa, pb *node.Path) {
	t.Helper()
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")})
	require.NoError(t, err)
	ha, err := f.AddHost(fabric.HostConfig{Name: "a", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.1")}}})
	require.NoError(t, err)
	hb, err := f.AddHost(fabric.HostConfig{Name: "b", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.2")}}})
	require.NoError(t, err)
	a, b = newWGNode(t, ha, "100.64.0.1"), newWGNode(t, hb, "100.64.0.2")
	pa, pb = a.addPeer(t, b), b.addPeer(t, a)
	a.bind.SetRelay(&memRelay{from: a.priv.Public(), to: b.bind})
	b.bind.SetRelay(&memRelay{from: b.priv.Public(), to: a.bind})
	return f, a, b, pa, pb
}

// echoOnce serves one connection on l, echoing what it reads.
func echoOnce(l net.Listener) {
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
}

// TestBindPaths runs WireGuard between two lab hosts over the node's Bind:
// first direct, then, mid-transfer, over a relay, then direct again; the
// data arrives intact and each path carried part of it.
func TestBindPaths(t *testing.T) {
	f, a, b, pa, pb := newWGPair(t) // pa: a's view of b
	a.bind.SetDirect(pa, netip.MustParseAddrPort("203.0.113.2:51820"))
	b.bind.SetDirect(pb, netip.MustParseAddrPort("203.0.113.1:51820"))

	l, err := b.tnet.ListenTCP(&net.TCPAddr{Port: 80})
	require.NoError(t, err)
	defer l.Close()
	const size = 16 << 20
	sum := netxtest.SinkDigest(l)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := a.tnet.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(b.addr, 80))
	require.NoError(t, err)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	h := sha256.Sum256(data)
	chunk := size / 4
	write := func(part []byte) { _, err := c.Write(part); require.NoError(t, err) }
	write(data[:chunk])
	// Cut over to the relay, as when the direct path dies.
	a.bind.SetDirect(pa, netip.AddrPort{})
	b.bind.SetDirect(pb, netip.AddrPort{})
	write(data[chunk : 3*chunk])
	// And back.
	a.bind.SetDirect(pa, netip.MustParseAddrPort("203.0.113.2:51820"))
	b.bind.SetDirect(pb, netip.MustParseAddrPort("203.0.113.1:51820"))
	write(data[3*chunk:])
	require.NoError(t, c.Close())
	select {
	case got := <-sum:
		assert.Equal(t, h, got, "SHA-256 of what arrived")
	case <-ctx.Done():
		t.Fatal("transfer did not finish")
	}
	t.Logf("a→b direct %d B, relay %d B", pa.TxDirect.Load(), pa.TxRelay.Load())
	assert.Greater(t, pa.TxDirect.Load(), uint64(chunk), "direct carried its part")
	assert.Greater(t, pa.TxRelay.Load(), uint64(chunk), "relay carried its part")
	assert.Positive(t, pb.RxRelay.Load())

	// A stranger's WireGuard-shaped packet is counted and dropped.
	stranger, err := f.AddHost(fabric.HostConfig{Name: "s", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.3")}}})
	require.NoError(t, err)
	spc, err := stranger.ListenPacket(ctx, "udp4", ":0")
	require.NoError(t, err)
	defer spc.Close()
	pkt := make([]byte, 148)
	pkt[0] = 1
	before := a.bind.Unknown()
	_, err = spc.WriteTo(pkt, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.1:51820")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.bind.Unknown() > before }, 2*time.Second, 5*time.Millisecond)

	// So is a transport message whose receiver index is none of ours.
	pkt = make([]byte, 64)
	pkt[0] = 4
	pkt[4], pkt[5], pkt[6], pkt[7] = 0xde, 0xad, 0xbe, 0xef
	before = a.bind.Unknown()
	_, err = spc.WriteTo(pkt, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.1:51820")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.bind.Unknown() > before }, 2*time.Second, 5*time.Millisecond)
	assert.Zero(t, a.bind.ByIndex(), "a stranger's packet matched an index")
}

// TestBindAnswerOnUnchosenPath has one side send its handshake through the
// relay while the other answers on a direct path the first has not chosen
// (a restarted node whose ICE is not done, answered by a peer still on
// the old direct path). The answer and the data after it are matched by
// receiver index, so the connection opens at once; WireGuard would refuse
// the resent initiation as a replay and retry only after 5 s.
func TestBindAnswerOnUnchosenPath(t *testing.T) {
	_, a, b, pa, _ := newWGPair(t)
	// a sends to b directly; b, like a restarted node, only has the relay.
	a.bind.SetDirect(pa, netip.MustParseAddrPort("203.0.113.2:51820"))

	l, err := a.tnet.ListenTCP(&net.TCPAddr{Port: 80})
	require.NoError(t, err)
	defer l.Close()
	echoOnce(l)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	c, err := b.tnet.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(a.addr, 80))
	require.NoError(t, err, "b's handshake through the relay, answered directly")
	defer c.Close()
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = io.ReadFull(c, make([]byte, 5))
	require.NoError(t, err)
	t.Logf("round trip in %v; %d packets matched by index", time.Since(start), b.bind.ByIndex())
	assert.Positive(t, b.bind.ByIndex(), "the direct answers came by index")
	assert.Zero(t, b.bind.Unknown(), "nothing from a was dropped")
}

// TestBindStaleSession: a transport message from a peer for a session we
// never had (the peer has not noticed our restart) runs the path's stale
// handler, at most once a second; our own sessions' messages do not.
func TestBindStaleSession(t *testing.T) {
	_, a, b, pa, pb := newWGPair(t)
	var calls atomic.Int32
	pa.SetStaleHandler(func() { calls.Add(1) })
	pb.SetStaleHandler(func() { calls.Add(1) })

	// A real session, over the relay: nothing is stale.
	l, err := b.tnet.ListenTCP(&net.TCPAddr{Port: 80})
	require.NoError(t, err)
	defer l.Close()
	echoOnce(l)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := a.tnet.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(b.addr, 80))
	require.NoError(t, err)
	_, err = c.Write([]byte("hi"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, 2))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	assert.Zero(t, a.bind.Stale()+b.bind.Stale(), "messages of a live session counted stale")
	assert.Zero(t, calls.Load())

	// b's messages for a session a never had: counted each time, the
	// handler told once.
	pkt := make([]byte, 48)
	pkt[0] = 4
	pkt[4], pkt[5], pkt[6], pkt[7] = 0xde, 0xad, 0xbe, 0xef
	a.bind.DeliverRelayed(b.priv.Public(), pkt)
	a.bind.DeliverRelayed(b.priv.Public(), pkt)
	assert.Equal(t, uint64(2), a.bind.Stale())
	assert.Equal(t, int32(1), calls.Load(), "stale handler calls")
}
