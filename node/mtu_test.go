package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
)

// TestFullSizePackets: packets up to the overlay MTU cross, directly and
// through the relay. WireGuard pads a packet to a multiple of 16 bytes
// but never past the MTU, so a full-size packet's message (1452 bytes at
// a 1420-byte MTU) is no multiple of 16; gVisor's TCP never sends one,
// a kernel's TCP and any UDP application do.
func TestFullSizePackets(t *testing.T) {
	w := meshtest.Start(t)
	echo := w.Peer(t, "echo")
	direct := w.Peer(t, "direct")
	relayed := w.Peer(t, "relayed", func(c *node.Config) { c.ICE.RelayOnly = true })
	serveUDPEcho(t, echo.Stack)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(echo.Addr(), 7))
	for _, tc := range []struct {
		peer *meshtest.Peer
		path node.PathKind
	}{{direct, node.PathDirect}, {relayed, node.PathRelay}} {
		meshtest.WaitPath(t, tc.peer.Node, "echo", tc.path, 15*time.Second)
		c, err := tc.peer.Stack.ListenPacket(t.Context(), "udp", ":0")
		require.NoError(t, err)
		buf := make([]byte, 2048)
		for ipSize := 1400; ipSize <= 1420; ipSize++ {
			payload := make([]byte, ipSize-28) // IPv4 20 + UDP 8
			payload[0] = byte(ipSize)
			got := false
			for try := 0; try < 3 && !got; try++ { // the first may wait for a handshake
				_, err := c.WriteTo(payload, dst)
				require.NoError(t, err)
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, _, err := c.ReadFrom(buf)
				got = err == nil && n == len(payload) && buf[0] == byte(ipSize)
			}
			require.True(t, got, "%s: a %d-byte packet is lost on the %s path", tc.peer.Node.Identity().Name, ipSize, tc.path)
		}
		c.Close()
	}
}

// TestQUICRelayMTU: between two nodes relayed over QUIC, the overlay MTU
// toward each other is QUICRelayMTU (and status says why), and full-size
// traffic still crosses: UDP packets up to the interface's 1420 bytes
// (fragmented by the node: gVisor sets DF on UDP but ignores fragmentation
// needed) and a TCP transfer (MSS clamped). Every packet the relay
// forwards is a QUIC datagram: none falls back to the relay's stream.
func TestQUICRelayMTU(t *testing.T) {
	w := meshtest.Start(t)
	quic := func(c *node.Config) { c.ICE.RelayOnly, c.RelayTransport = true, "quic" }
	echo := w.Peer(t, "echo", quic)
	relayed := w.Peer(t, "relayed", quic)
	meshtest.WaitPath(t, relayed.Node, "echo", node.PathRelay, 15*time.Second)
	checkQUICRelayFullSize(t, w.Relay, echo.Node, relayed.Node, echo.Stack, relayed.Stack)
}

// TestQUICRelayMTULab is TestQUICRelayMTU in the lab, behind NATs. In
// real time: quic-go spins in a synctest bubble (its run loop packs
// ACK-only packets without ever blocking durably, so the bubble's clock
// never advances).
func TestQUICRelayMTULab(t *testing.T) {
	w := newLabWorld(t)
	quic := func(c *node.Config) { c.ICE.RelayOnly, c.RelayTransport = true, "quic" }
	ne, nr := &stockNetstack{}, &stockNetstack{}
	echo := startNode(t, w.site(t, "port-restricted-cone"), "echo", ne, quic)
	relayed := startNode(t, w.site(t, "restricted-cone"), "relayed", nr, quic)
	waitPath(t, relayed, node.PathRelay, 15*time.Second)
	checkQUICRelayFullSize(t, w.relay, echo, relayed, ne.net.st, nr.net.st)
}

func checkQUICRelayFullSize(t *testing.T, rs *relay.Server, echoNode, relayedNode *node.Node, echoSt, relayedSt *netstack.Stack) {
	t.Helper()
	for _, n := range []*node.Node{echoNode, relayedNode} {
		var st []node.PeerStatus
		require.Eventually(t, func() bool { // the relay client connects in the background
			st = n.Status()
			return len(st) == 1 && st[0].MTU == node.QUICRelayMTU
		}, 10*time.Second, 10*time.Millisecond, "status: %+v", st)
		assert.Equal(t, "relayed over QUIC datagrams", st[0].MTUReason)
		relayStats, ok := n.RelayStats()
		require.True(t, ok)
		assert.Equal(t, "configured", relayStats.TransportReason)
	}
	echoAddr := echoNode.Address().Addr()

	serveUDPEcho(t, echoSt)
	c, err := relayedSt.ListenPacket(t.Context(), "udp", ":0")
	require.NoError(t, err)
	defer c.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(echoAddr, 7))
	buf := make([]byte, 2048)
	for _, ipSize := range []int{1300, node.QUICRelayMTU, node.QUICRelayMTU + 1, node.QUICRelayMTU + 2, 1400, 1420} {
		payload := bytes.Repeat([]byte{byte(ipSize)}, ipSize-28)
		got := false
		for try := 0; try < 3 && !got; try++ {
			_, err := c.WriteTo(payload, dst)
			require.NoError(t, err)
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, _, err := c.ReadFrom(buf)
			got = err == nil && bytes.Equal(buf[:n], payload)
		}
		c1, t1, f1 := relayedNode.PeerMTUCounts()
		c2, t2, f2 := echoNode.PeerMTUCounts()
		require.True(t, got, "a %d-byte packet is lost over the QUIC relay (clamped, too big, fragmented: %d %d %d; echo %d %d %d)", ipSize, c1, t1, f1, c2, t2, f2)
	}

	ln, err := echoSt.Listen(t.Context(), "tcp", ":9")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	const size = 4 << 20
	sum := make(chan [32]byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		h := sha256.New()
		_, _ = io.Copy(h, conn)
		sum <- [32]byte(h.Sum(nil))
	}()
	conn, err := relayedSt.Dial(t.Context(), "tcp", netip.AddrPortFrom(echoAddr, 9).String())
	require.NoError(t, err)
	data := make([]byte, size)
	_, _ = rand.Read(data)
	_, err = conn.Write(data)
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	select {
	case got := <-sum:
		require.Equal(t, sha256.Sum256(data), got, "the transfer arrived intact")
	case <-time.After(30 * time.Second):
		t.Fatal("the transfer did not finish in 30s")
	}
	clamped, _, _ := relayedNode.PeerMTUCounts()
	assert.NotZero(t, clamped, "the SYN's MSS was clamped")

	st := rs.Stats()
	assert.Zero(t, st.DatagramFallbacks, "packets the relay sent on the stream because they did not fit a datagram")
	t.Logf("relay: %d packets in, %d as datagrams; %d out, %d as datagrams", st.PacketsIn, st.DatagramsIn, st.PacketsOut, st.DatagramsOut)
	// Before a peer's id is acknowledged its packets go as frames: a few
	// at the start, not the transfer's thousands.
	assert.Less(t, st.PacketsIn-st.DatagramsIn, uint64(20), "packets clients sent on the stream")
	assert.Less(t, st.PacketsOut-st.DatagramsOut, uint64(20), "packets the relay sent on the stream")
	assert.Greater(t, st.DatagramsIn, uint64(size/node.QUICRelayMTU), "the transfer went as datagrams")
}

// serveUDPEcho answers every datagram to port 7 of st with itself until
// the test ends.
func serveUDPEcho(t *testing.T, st interface {
	ListenPacket(context.Context, string, string) (net.PacketConn, error)
}) {
	t.Helper()
	pc, err := st.ListenPacket(t.Context(), "udp", ":7")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}
