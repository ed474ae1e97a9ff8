package topology

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

const world6 = `
networks:
  internet: {cidr: 203.0.113.0/24, cidr6: "2001:db8::/64"}
  home: {cidr: 192.168.1.0/24, cidr6: "2001:db8:1::/64", uplink: internet, nat: symmetric}
  flat: {cidr6: "2001:db8:2::/64", uplink: internet, nat: {profile: ipv6-firewall, filtering: endpoint-independent, udp_timeout: 30s}}
  open: {cidr6: "2001:db8:3::/64", uplink: internet}
hosts:
  server: {network: internet, addr: 203.0.113.100}
  laptop: {network: home}
  phone: {network: flat}
  iot: {network: open}
`

func TestPlanIPv6(t *testing.T) {
	_, p := parse(t, world6)
	assert.Equal(t, netip.MustParsePrefix("2001:db8:1::/64"), p.Network("home").Config.Prefix6)
	assert.False(t, p.Network("flat").Config.Prefix.IsValid(), "IPv6-only")

	home := p.Router("home-nat")
	require.NotNil(t, home.Config.NAT, "symmetric NATs IPv4...")
	require.NotNil(t, home.Config.Stateful, "...and filters IPv6 as an RFC 6092 router")
	assert.Equal(t, nat.AddressAndPortDependent, home.Config.Stateful.Filtering)
	assert.Equal(t, "2001:db8:1::1", home.Config.Interfaces[0].Aliases[0].String(), "the gateway's IPv6 twin of 192.168.1.1")

	flat := p.Router("flat-gw")
	require.NotNil(t, flat, "ipv6-firewall translates nothing: a -gw router")
	assert.Nil(t, flat.Config.NAT)
	assert.Equal(t, nat.StatefulConfig{Filtering: nat.EndpointIndependent, UDPTimeout: 30 * time.Second}, *flat.Config.Stateful)
	assert.Equal(t, "ipv6-firewall*", flat.Profile)
	assert.Nil(t, p.Router("open-gw").Config.Stateful, "no nat: routed, unfiltered")
	assert.Equal(t, "symmetric + IPv6", p.NATLabel(&PlanNode{NATs: []string{"home-nat"}}),
		"the matrix keeps a dual-stack symmetric site apart from an IPv4-only one")
	assert.Equal(t, "ipv6-firewall*", p.NATLabel(&PlanNode{NATs: []string{"flat-gw"}}))
	assert.Equal(t, "ipv6-firewall*", p.NATLabel(&PlanNode{Network: "flat"}), "a node there: the firewall translates nothing, so it is not among NATs")
	assert.Equal(t, "none", p.NATLabel(&PlanNode{Network: "open"}))

	laptop := p.Host("laptop").Config
	assert.Equal(t, "192.168.1.2", laptop.Interfaces[0].Addr.String())
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("2001:db8:1::2")}, laptop.Interfaces[0].Aliases)
	assert.Equal(t, "192.168.1.1", laptop.Gateway.String())
	assert.Equal(t, "2001:db8:1::1", laptop.Gateway6.String())
	phone := p.Host("phone").Config
	assert.Equal(t, "2001:db8:2::2", phone.Interfaces[0].Addr.String())
	assert.False(t, phone.Gateway.IsValid())
	assert.Equal(t, "2001:db8:2::1", phone.Gateway6.String())
	// The server learns a route to every IPv6 prefix below: nothing
	// translates them.
	server := p.Host("server").Config
	assert.Contains(t, server.Routes, fabric.Route{Dst: netip.MustParsePrefix("2001:db8:1::/64"), Via: netip.MustParseAddr("2001:db8::1")})
	assert.Contains(t, server.Routes, fabric.Route{Dst: netip.MustParsePrefix("2001:db8:2::/64"), Via: netip.MustParseAddr("2001:db8::2")})
}

// TestIPv6Fabric builds the plan and sends UDP over IPv6: the phone behind
// an endpoint-independent ipv6-firewall is reached by anyone once it has
// sent; the laptop behind the symmetric NAT's IPv6 firewall only by the
// endpoint it sent to; the iot host by anyone.
func TestIPv6Fabric(t *testing.T) {
	_, p := parse(t, world6)
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, p.AddTo(f))
	ctx := context.Background()
	listen := func(host, addr string) net.PacketConn {
		pc, err := f.Host(host).ListenPacket(ctx, "udp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { pc.Close() })
		return pc
	}
	srv, srv2 := listen("server", "[::]:3478"), listen("server", "[::]:3479")
	arrives := func(from, to net.PacketConn, dst string) bool {
		_, err := from.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(dst)))
		require.NoError(t, err)
		require.NoError(t, to.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
		_, _, err = to.ReadFrom(make([]byte, 16))
		if err != nil {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		}
		return err == nil
	}
	for _, tc := range []struct {
		host, addr string
		filtered   bool // before sending
		otherPort  bool // after sending to srv, srv2 gets in
	}{
		{"laptop", "[2001:db8:1::2]:4000", true, false},
		{"phone", "[2001:db8:2::2]:4000", true, true},
		{"iot", "[2001:db8:3::2]:4000", false, true},
	} {
		pc := listen(tc.host, "[::]:4000")
		assert.Equal(t, !tc.filtered, arrives(srv, pc, tc.addr), "%s: unsolicited", tc.host)
		assert.True(t, arrives(pc, srv, "[2001:db8::64]:3478"), "%s: out to the server", tc.host)
		assert.True(t, arrives(srv, pc, tc.addr), "%s: the reply", tc.host)
		assert.Equal(t, tc.otherPort, arrives(srv2, pc, tc.addr), "%s: from another port", tc.host)
	}
}

func TestIPv6Errors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no prefix", "networks: {a: {mtu: 1400}}", "network a has no prefix"},
		{"v6 in cidr", `networks: {a: {cidr: "2001:db8::/64"}}`, "IPv6 prefixes go in cidr6"},
		{"v4 in cidr6", "networks: {a: {cidr6: 10.0.0.0/8}}", "is not an IPv6 prefix"},
		{"cidr6 too small", `networks: {a: {cidr: 10.0.0.0/16, cidr6: "2001:db8::/120"}}`, "every IPv4 address needs its IPv6 twin"},
		{"nat on v6-only", `networks: {i: {cidr6: "2001:db8::/64"}, a: {cidr6: "2001:db8:1::/64", uplink: i, nat: symmetric}}`, "use nat: ipv6-firewall"},
		{"firewall without v6", `networks: {i: {cidr: 10.0.0.0/24}, a: {cidr: 10.1.0.0/24, uplink: i, nat: ipv6-firewall}}`, "has no cidr6"},
		{"firewall knob", `networks: {i: {cidr6: "2001:db8::/64"}, a: {cidr6: "2001:db8:1::/64", uplink: i, nat: {profile: ipv6-firewall, hairpin: true}}}`, "hairpin does not apply"},
		{"v6 overlap", `networks: {i: {cidr: 10.0.0.0/24, cidr6: "2001:db8::/64"}, a: {cidr: 10.1.0.0/24, cidr6: "2001:db8::/64", uplink: i, nat: full-cone}}`, "IPv6 is never translated"},
		{"node v6-only", `networks: {i: {cidr: 10.0.0.0/24}, a: {cidr6: "2001:db8::/64", uplink: i}}
nodes: {n: {network: a}}
control: {network: i}`, "node n has only IPv6 and control only IPv4 (10.0.0.2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse("t.yaml", []byte(tc.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestGraphIPv6(t *testing.T) {
	_, p := parse(t, world6)
	var b strings.Builder
	require.NoError(t, p.WriteDOT(&b))
	dot := b.String()
	assert.Contains(t, dot, `192.168.1.0/24\n2001:db8:1::/64`, "a dual-stack network shows both prefixes")
	assert.Contains(t, dot, `filter ipv6-firewall*`)
	assert.Contains(t, dot, `NAT symmetric`)
}
