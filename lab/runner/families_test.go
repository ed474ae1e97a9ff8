package runner

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/dns"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/stun"
)

// TestNodeReach: where each kind of node is told control is, and the
// NATS addresses control advertises, without a DNS64 in the topology
// (the scenarios nat64-mobile-* cover the lookups through one).
func TestNodeReach(t *testing.T) {
	const nets = `
networks:
  internet: {cidr: 203.0.113.0/24%s}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
  lte: {cidr6: "2001:db8:64::/64", uplink: internet, nat: {profile: nat64, prefix64: "2001:db8:46::/96"}}
hosts: {server: {network: internet, addr: 203.0.113.100}}
control: {host: server, port: 443}
nodes: {laptop: {network: home}, phone: {network: lte}}
`
	for _, tc := range []struct {
		name, cidr6               string
		laptop, phone, advertised string
		nat64                     string
	}{
		{"IPv4-only internet", "",
			"nats://203.0.113.100:443?insecure=1", "nats://[2001:db8:46::cb00:7164]:443?insecure=1",
			"nats://203.0.113.100:443,nats://[2001:db8:46::cb00:7164]:443", "2001:db8:46::/96"},
		{"dual-stack internet", `, cidr6: "2001:db8::/64"`,
			"nats://203.0.113.100:443?insecure=1", "nats://[2001:db8::64]:443?insecure=1",
			"nats://203.0.113.100:443,nats://[2001:db8::64]:443", "2001:db8:46::/96"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, err := topology.Parse("t.yaml", []byte(fmt.Sprintf(nets, tc.cidr6)))
			require.NoError(t, err)
			l := &Lab{plan: p}
			laptop, err := l.nodeReach(context.Background(), p.Node("laptop"))
			require.NoError(t, err)
			assert.Equal(t, reach{control: tc.laptop}, laptop)
			phone, err := l.nodeReach(context.Background(), p.Node("phone"))
			require.NoError(t, err)
			assert.Equal(t, reach{control: tc.phone, nat64: netip.MustParsePrefix(tc.nat64)}, phone)
			assert.Equal(t, tc.advertised, l.advertiseNATS())
		})
	}
}

// TestNodeReachRegisterKey: once control is up, each control URL a node
// is given carries control's register key, so that its first
// registration is one request.
func TestNodeReachRegisterKey(t *testing.T) {
	_, p, err := topology.Parse("t.yaml", []byte(`
networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
  lte: {cidr6: "2001:db8:64::/64", uplink: internet, nat: {profile: nat64, prefix64: "2001:db8:46::/96"}}
hosts: {server: {network: internet, addr: 203.0.113.100}}
control: {host: server, port: 443}
nodes: {laptop: {network: home}, phone: {network: lte}}
`))
	require.NoError(t, err)
	l := &Lab{plan: p}
	k := key.NewPrivate().Public()
	l.registerKey.Store(&k)
	for _, name := range []string{"laptop", "phone"} {
		r, err := l.nodeReach(context.Background(), p.Node(name))
		require.NoError(t, err)
		assert.Contains(t, r.control, "?insecure=1&key="+k.Hex(), name)
		assert.Equal(t, k, controlapi.URLControlKey(r.control), name)
	}
}

// TestServicesBothFamilies: on a dual-stack network control, the relay,
// STUN and DNS answer on their IPv6 twins as on their IPv4 addresses, and
// inspect lists both.
func TestServicesBothFamilies(t *testing.T) {
	_, plan, err := topology.Parse("t.yaml", []byte(`name: t
networks:
  internet: {cidr: 203.0.113.0/24, cidr6: "2001:db8::/64"}
hosts:
  server: {network: internet, addr: 203.0.113.100, aliases: [203.0.113.101]}
  client: {network: internet, addr: 203.0.113.50}
control: {host: server, addr: 203.0.113.101, port: 443}
relays: {relay: {host: server, port: 443}}
stun: {stun: {host: server}}
dns: {dns: {host: server}}
`))
	require.NoError(t, err)
	l, err := Up(t.Context(), Config{Plan: plan, StateDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })
	client := l.hostNet("client")
	for _, to := range []string{"203.0.113.101:443", "[2001:db8::65]:443", "203.0.113.100:443", "[2001:db8::64]:443"} {
		c, err := client.Dial(t.Context(), "tcp", to)
		require.NoError(t, err, "control's NATS or the relay's TCP on %s", to)
		require.NoError(t, c.Close())
	}
	for _, at := range []string{"203.0.113.100:53", "[2001:db8::64]:53"} {
		addrs, err := dns.LookupAAAA(t.Context(), client, netip.MustParseAddrPort(at), "control.lab")
		require.NoError(t, err, "DNS on %s", at)
		assert.Equal(t, []netip.Addr{netip.MustParseAddr("2001:db8::65")}, addrs)
	}
	pc, err := client.ListenPacket(t.Context(), "udp", "[::]:5000")
	require.NoError(t, err)
	defer pc.Close()
	for at, want := range map[string]string{"203.0.113.100:3478": "203.0.113.50:5000", "[2001:db8::64]:3478": "[2001:db8::32]:5000"} {
		mapped, err := stun.Bind(t.Context(), pc, netip.MustParseAddrPort(at))
		require.NoError(t, err, "STUN on %s", at)
		assert.Equal(t, want, mapped.String(), "STUN on %s", at)
	}
	for _, h := range l.Info().Hosts {
		if h.Name == "server" {
			assert.Equal(t, []string{"control 203.0.113.101:443 and [2001:db8::65]:443", "relay relay 203.0.113.100:443 and [2001:db8::64]:443",
				"stun stun 203.0.113.100:3478 and [2001:db8::64]:3478", "dns dns 203.0.113.100:53 and [2001:db8::64]:53"}, h.Services)
		}
	}
}
