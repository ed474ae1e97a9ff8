package netstack

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errForbidden = errors.New("forbidden by test policy")

// TestEgressHook checks that the stack asks its egress hook before every
// outbound flow, refuses at once what it denies, and lets the rest through.
func TestEgressHook(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	deny := netip.MustParseAddr("100.64.1.3")
	s, err := New(Config{Address: addrA, Egress: func(network string, dst netip.AddrPort) error {
		mu.Lock()
		asked = append(asked, network+" "+dst.String())
		mu.Unlock()
		if dst.Addr() == deny && dst.Port() != 7 {
			return errForbidden
		}
		return nil
	}})
	require.NoError(t, err)
	defer s.Close()
	b := newStack(t, addrB)
	wire(t, s.TUN(), b.TUN())
	ctx := ctxT(t, 10*time.Second)

	start := time.Now()
	_, err = s.Dial(ctx, "tcp", "100.64.1.3:80")
	require.Error(t, err)
	assert.Less(t, time.Since(start), time.Second, "a denied dial fails at once")
	assert.ErrorIs(t, err, errForbidden)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "dial", oe.Op)
	assert.Equal(t, "100.64.1.3:80", oe.Addr.String())

	_, err = s.Dial(ctx, "udp", "100.64.1.3:53")
	assert.ErrorIs(t, err, errForbidden)

	// Allowed: port 7 on the same peer.
	ln, err := b.Listen(ctx, "tcp", ":7")
	require.NoError(t, err)
	defer ln.Close()
	c, err := s.Dial(ctx, "tcp", "100.64.1.3:7")
	require.NoError(t, err)
	c.Close()

	// Packet sockets: each new destination is asked; a denied one fails
	// the write, an allowed one is asked once.
	pc, err := s.ListenPacket(ctx, "udp", ":0")
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("100.64.1.3:53")))
	assert.ErrorIs(t, err, errForbidden)
	for range 3 {
		_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("100.64.1.3:7")))
		require.NoError(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"tcp 100.64.1.3:80", "udp 100.64.1.3:53", "tcp 100.64.1.3:7", "udp 100.64.1.3:53", "udp 100.64.1.3:7"}, asked)
}
