package node_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/node"
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
	pc, err := echo.Stack.ListenPacket(t.Context(), "udp", ":7")
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
