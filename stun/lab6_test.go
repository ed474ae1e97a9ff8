package stun_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/stun"
)

// The dual-stack lab: the STUN server host has an IPv4 address and two
// IPv6 ones; the client's home router NATs IPv4 (symmetric) and filters
// IPv6 as an RFC 6092 home router (ipv6-firewall), translating none of it.
var (
	lab6Primary   = netip.MustParseAddrPort("[2001:db8::100]:3478")
	lab6Alternate = netip.MustParseAddrPort("[2001:db8::101]:3479")
	lab6Client    = netip.MustParseAddr("2001:db8:1::2")
)

type lab6World struct {
	v4, v6 *stun.Server
	client *fabric.Host
}

func newLab6(t *testing.T) lab6World {
	t.Helper()
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	lan6 := netip.MustParsePrefix("2001:db8:1::/64")
	for _, n := range []fabric.NetworkConfig{
		{Name: "internet", Prefix: labInternet, Prefix6: netip.MustParsePrefix("2001:db8::/64")},
		{Name: "lan", Prefix: labLAN, Prefix6: lan6},
	} {
		_, err := f.AddNetwork(n)
		require.NoError(t, err)
	}
	serverHost, err := f.AddHost(fabric.HostConfig{
		Name: "stun",
		Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: labPrimary.Addr(),
			Aliases: []netip.Addr{lab6Primary.Addr(), lab6Alternate.Addr()}}},
		Routes: []fabric.Route{{Dst: lan6, Via: netip.MustParseAddr("2001:db8::10")}},
	})
	require.NoError(t, err)
	symmetric, err := nat.Profile("symmetric")
	require.NoError(t, err)
	fw, err := nat.FirewallProfile("ipv6-firewall")
	require.NoError(t, err)
	_, err = f.AddRouter(fabric.RouterConfig{
		Name: "router",
		Interfaces: []fabric.InterfaceConfig{
			{Name: "lan", Network: "lan", Addr: labGateway, Aliases: []netip.Addr{netip.MustParseAddr("2001:db8:1::1")}},
			{Name: "wan", Network: "internet", Addr: labWAN, Aliases: []netip.Addr{netip.MustParseAddr("2001:db8::10")}},
		},
		Uplink: "wan", NAT: &symmetric, Stateful: &fw,
	})
	require.NoError(t, err)
	client, err := f.AddHost(fabric.HostConfig{
		Name:       "client",
		Interfaces: []fabric.InterfaceConfig{{Network: "lan", Addr: netip.MustParseAddr("192.168.1.2"), Aliases: []netip.Addr{lab6Client}}},
		Gateway:    labGateway, Gateway6: netip.MustParseAddr("2001:db8:1::1"),
	})
	require.NoError(t, err)
	return lab6World{
		v4:     startServer(t, stun.Config{Network: serverHost, Primary: labPrimary}),
		v6:     startServer(t, stun.Config{Network: serverHost, Primary: lab6Primary, Alternate: lab6Alternate}),
		client: client,
	}
}

// TestBindDualStack: one host, two families, two answers: over IPv4 the
// symmetric NAT's public address (a random port), over IPv6 the host's own
// address and port, which the firewall passed untranslated. This is why a
// node behind symmetric NATs can still go direct: its IPv6 server-reflexive
// candidate is its host candidate.
func TestBindDualStack(t *testing.T) {
	w := newLab6(t)
	ctx := ctxT(t, 5*time.Second)
	c4, err := w.client.ListenPacket(ctx, "udp4", ":51820")
	require.NoError(t, err)
	defer c4.Close()
	mapped, err := stun.Bind(ctx, c4, labPrimary)
	require.NoError(t, err)
	assert.Equal(t, labWAN, mapped.Addr(), "IPv4: the NAT's address")

	c6, err := w.client.ListenPacket(ctx, "udp6", "[::]:51821") // [::]:51820 would clash with 0.0.0.0:51820, as on Linux
	require.NoError(t, err)
	defer c6.Close()
	mapped, err = stun.Bind(ctx, c6, lab6Primary)
	require.NoError(t, err)
	assert.Equal(t, netip.AddrPortFrom(lab6Client, 51821), mapped, "IPv6: the host's own endpoint")
	checkServerStats(t, w.v6)
}

// TestDiscoverIPv6Firewall: RFC 5780 discovery over IPv6 sees no NAT
// (the mapped address is the client's own), endpoint-independent
// "mapping" (nothing is mapped) and the firewall's address-and-port-
// dependent filtering.
func TestDiscoverIPv6Firewall(t *testing.T) {
	w := newLab6(t)
	res, err := stun.Discover(ctxT(t, 15*time.Second), w.client, lab6Primary, labOptions)
	require.NoError(t, err)
	assert.False(t, res.NATed, "%s: %v", res, res.Mapped)
	assert.Equal(t, lab6Client, res.Mapped[0].Addr())
	assert.Equal(t, stun.EndpointIndependent, res.Mapping, "%s", res)
	assert.Equal(t, stun.AddressAndPortDependent, res.Filtering, "%s", res)
	assert.Equal(t, lab6Alternate, res.Other)
	checkServerStats(t, w.v6)
}
