package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netstack"
)

// replyCase is one way a CONNECT ends, over a real network.
type replyCase struct {
	name string
	dial Dialer
	dst  netip.AddrPort
	want byte
}

// runReplyCases makes each case's CONNECT through a SOCKS5 proxy dialing
// with its Dialer and checks the whole failure reply.
func runReplyCases(t *testing.T, cases []replyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, proxyAddr := startSOCKS(t, Config{Dial: tc.dial, DialTimeout: 300 * time.Millisecond})
			c := dial(t, proxyAddr)
			socksGreet(t, c, nil)
			_, err := c.Write(append([]byte{5, cmdConnect, 0}, ipDst(tc.dst.Addr().String(), int(tc.dst.Port()))...))
			require.NoError(t, err)
			got, err := io.ReadAll(c)
			require.NoError(t, err, "the server closes after a failure reply")
			assert.Equal(t, []byte{5, tc.want, 0, atypIPv4, 0, 0, 0, 0, 0, 0}, got, "want reply %d", tc.want)
		})
	}
}

// TestSOCKS5RepliesFromNetworks: the reply codes of RFC 1928 §6 for what
// the host network and the overlay netstack really return.
func TestSOCKS5RepliesFromNetworks(t *testing.T) {
	var d net.Dialer
	overlay := newOverlay(t, nil)
	policed := newOverlay(t, func(network string, dst netip.AddrPort) error {
		return fmt.Errorf("egress to %s denied by test rule: %w", dst, ErrDenied)
	})
	runReplyCases(t, []replyCase{
		{"host: closed port", d.DialContext, closedPort(t, listen(t)), repConnectionRefused},
		{"overlay: closed loopback port", overlay.Dial, closedPort(t, overlayListener(t, overlay)), repConnectionRefused},
		// Nothing reads the stack's TUN: the SYN is never answered.
		{"overlay: no answer", overlay.Dial, netip.MustParseAddrPort("100.64.0.9:80"), repTTLExpired},
		{"overlay: policy denies", policed.Dial, netip.MustParseAddrPort("100.64.0.9:80"), repNotAllowed},
	})
}

func newOverlay(t *testing.T, egress netstack.EgressFunc) *netstack.Stack {
	t.Helper()
	s, err := netstack.New(netstack.Config{Address: netip.MustParsePrefix("100.64.0.1/10"), Egress: egress})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func overlayListener(t *testing.T, s *netstack.Stack) net.Listener {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	ln, err := s.Listen(ctx, "tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// closedPort closes ln and returns the address it had: a port nothing
// listens on, which refuses a connection with a RST.
func closedPort(t *testing.T, ln net.Listener) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	return ap
}
