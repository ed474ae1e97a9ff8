package node_test

import (
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
)

// loopback4OS is the machine whose only interface, as ICE sees it, is
// IPv4 loopback: the node's dual-stack socket still listens on [::], so
// everything it reads from 127.0.0.1 arrives as ::ffff:127.0.0.1.
type loopback4OS struct{ netx.Network }

func (loopback4OS) Interfaces() ([]netx.Interface, error) {
	return []netx.Interface{{Index: 1, Name: "lo", MTU: 65536, Flags: net.FlagUp | net.FlagRunning | net.FlagLoopback,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}}}, nil
}

// TestDualStackSocketUnmapsIPv4: two nodes on real dual-stack sockets go
// direct over IPv4 loopback. The kernel reports their peers as
// ::ffff:127.0.0.1; the path, the WireGuard endpoint and the status say
// 127.0.0.1, and WireGuard's packets from the peer are matched to it (a
// mapped source would be a stray, and nothing would count as received
// directly).
func TestDualStackSocketUnmapsIPv4(t *testing.T) {
	secret := []byte("lab-relay-secret-0123456789abcdef")
	rs, err := relay.NewServer(relay.ServerConfig{Network: netx.OS, Addr: "127.0.0.1:0", Secret: secret})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	st, err := control.OpenFileStore(filepath.Join(t.TempDir(), "r.json"))
	require.NoError(t, err)
	ctrl, err := control.New(t.Context(), control.Config{
		Tokens: []control.JoinToken{{Value: labToken}}, Store: st,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Listen: "127.0.0.1:0"},
		Relays:       []controlapi.Relay{{Addr: rs.Addr().String(), Fingerprint: rs.Fingerprint()}},
		RelayToken: func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(secret, k, now.Add(time.Hour))), nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { ctrl.Close() })
	start := func(name string) (*stockNetstack, *node.Node) {
		prov := &stockNetstack{}
		n, err := node.Start(t.Context(), node.Config{
			Name: name, Network: loopback4OS{netx.OS}, Control: ctrl.NATS().URL(), Token: labToken,
			ListenPort: -1, Provisioner: prov,
			ICE: node.ICEConfig{Candidates: func(a netip.Addr) bool { return a.IsLoopback() }},
		})
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		return prov, n
	}
	na, a := start("alpha")
	nb, b := start("beta")
	serveEcho(t, nb, 7)
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(20*time.Second), "alpha to beta")
	sa := waitPath(t, a, node.PathDirect, slow(10*time.Second))
	ep := netip.MustParseAddrPort(sa.Endpoint)
	assert.Equal(t, netip.MustParseAddr("127.0.0.1"), ep.Addr(), "endpoint %v", ep)
	waitPath(t, b, node.PathDirect, slow(10*time.Second))

	before := a.Status()[0]
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(5*time.Second), "alpha to beta, direct")
	after := a.Status()[0]
	assert.Greater(t, after.RxDirect, before.RxDirect, "beta's answers are matched to beta's direct path")
	assert.Equal(t, before.RxRelay, after.RxRelay, "nothing comes back through the relay")
	for _, at := range a.LastDirectReceives() {
		assert.WithinDuration(t, time.Now(), at, slow(5*time.Second), "beta's packets are matched to its direct address")
	}
	for _, n := range []*node.Node{a, b} {
		noMapped(t, n)
		ips := n.WireGuardEndpointIPs()
		require.Len(t, ips, 1, "%s's one peer is direct", n.Identity().Name)
		for _, ip := range ips {
			assert.False(t, strings.HasPrefix(ip.String(), "::ffff:"), "WireGuard endpoint %v", ip)
			assert.True(t, ip.Is4(), "WireGuard endpoint %v", ip)
		}
	}
}
