package topology

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

const world64 = `
networks:
  internet: {cidr: 203.0.113.0/24}
  mobile: {cidr6: "2001:db8:2::/64", uplink: internet, nat: nat64}
  carrier: {cidr: 198.51.100.0/24, cidr6: "2001:db8::/64"}
  lte: {cidr6: "2001:db8:3::/64", uplink: carrier, nat: {profile: nat64, prefix64: "2001:db8:64::/96", udp_timeout: 30s, port_range: 20000-29999}}
hosts:
  server: {network: internet, addr: 203.0.113.100}
  phone: {network: mobile}
  tablet: {network: lte}
`

func TestPlanNAT64(t *testing.T) {
	_, p := parse(t, world64)
	r := p.Router("mobile-nat")
	require.NotNil(t, r, "a translating gateway is NAME-nat")
	require.NotNil(t, r.Config.NAT64)
	assert.Nil(t, r.Config.NAT)
	assert.Equal(t, nat.NAT64Config{}, *r.Config.NAT64, "defaults: the well-known prefix")
	assert.Nil(t, r.Config.Stateful, "an IPv4-only uplink: no native IPv6 to filter")
	assert.Equal(t, "nat64", r.Profile)

	lte := p.Router("lte-nat")
	require.NotNil(t, lte)
	assert.Equal(t, nat.NAT64Config{Prefix: netip.MustParsePrefix("2001:db8:64::/96"), UDPTimeout: 30 * time.Second, PortMin: 20000, PortMax: 29999}, *lte.Config.NAT64)
	require.NotNil(t, lte.Config.Stateful, "a dual-stack uplink: native IPv6 is routed and filtered")
	assert.Equal(t, "nat64*", lte.Profile)

	var b strings.Builder
	require.NoError(t, p.WriteDOT(&b))
	assert.Contains(t, b.String(), "NAT nat64*", "a NAT64 with a filtered dual-stack uplink is drawn as a NAT")
	assert.NotContains(t, b.String(), "filter nat64")

	phone := p.Host("phone").Config
	assert.False(t, phone.Gateway.IsValid(), "IPv6-only")
	assert.Equal(t, "2001:db8:2::1", phone.Gateway6.String())
}

// TestNAT64Fabric builds the plan: the IPv6-only phone reaches the
// IPv4-only server at 64:ff9b::203.0.113.100 and hears its reply; the
// server cannot send to the phone first.
func TestNAT64Fabric(t *testing.T) {
	_, p := parse(t, world64)
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, p.AddTo(f))
	ctx := context.Background()
	srv, err := f.Host("server").ListenPacket(ctx, "udp4", ":7")
	require.NoError(t, err)
	defer srv.Close()
	pc, err := f.Host("phone").ListenPacket(ctx, "udp6", ":5000")
	require.NoError(t, err)
	defer pc.Close()

	_, err = pc.WriteTo([]byte("hi"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[64:ff9b::cb00:7164]:7")))
	require.NoError(t, err)
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(time.Second)))
	buf := make([]byte, 16)
	n, from, err := srv.ReadFrom(buf)
	require.NoError(t, err)
	assert.Equal(t, "hi", string(buf[:n]))
	assert.Equal(t, p.Router("mobile-nat").Config.Interfaces[1].Addr.String(), from.(*net.UDPAddr).IP.String(), "the gateway's uplink address")
	_, err = srv.WriteTo([]byte("back"), from)
	require.NoError(t, err)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
	n, back, err := pc.ReadFrom(buf)
	require.NoError(t, err)
	assert.Equal(t, "back", string(buf[:n]))
	assert.Equal(t, "[64:ff9b::cb00:7164]:7", back.String())
}

func TestNAT64Errors(t *testing.T) {
	const up = "networks:\n  i: {cidr: 10.0.0.0/24}\n"
	for _, tc := range []struct{ name, src, want string }{
		{"dual-stack", up + `  a: {cidr: 10.1.0.0/24, cidr6: "2001:db8:1::/64", uplink: i, nat: nat64}`,
			"t.yaml:3:68: networks.a.nat: nat64 translates IPv6 to IPv4, and a has the IPv4 cidr 10.1.0.0/24; drop cidr (a NAT64 network is IPv6-only), or pick a NAT profile"},
		{"v6-only uplink", "networks:\n  i: {cidr6: \"2001:db8::/64\"}\n" + `  a: {cidr6: "2001:db8:1::/64", uplink: i, nat: nat64}`,
			"t.yaml:3:49: networks.a.nat: nat64 needs an IPv4 uplink, and i is IPv6-only; give i a cidr"},
		{"knob", up + `  a: {cidr6: "2001:db8:1::/64", uplink: i, nat: {profile: nat64, filtering: address-dependent}}`,
			"nat64 maps and filters endpoint-independently (RFC 6146): filtering does not apply"},
		{"prefix length", up + `  a: {cidr6: "2001:db8:1::/64", uplink: i, nat: {profile: nat64, prefix64: "64:ff9b::/64"}}`,
			"nat: nat64 prefix 64:ff9b::/64 is not a /96"},
		{"prefix host bits", up + `  a: {cidr6: "2001:db8:1::/64", uplink: i, nat: {profile: nat64, prefix64: "64:ff9b::1/96"}}`,
			"t.yaml:3:76: networks.a.nat.prefix64: \"64:ff9b::1/96\" has host bits set; did you mean 64:ff9b::/96?"},
		{"prefix without nat64", up + `  a: {cidr: 10.1.0.0/24, uplink: i, nat: {profile: full-cone, prefix64: "64:ff9b::/96"}}`,
			"prefix64 is the NAT64 prefix, and a's nat is full-cone; use nat: nat64"},
		{"firewall", up + `  a: {cidr6: "2001:db8:1::/64", uplink: i, nat: nat64, firewall: {default: deny}}`,
			"nat64 takes none"},
		{"nat44 to a v6-only uplink", "networks:\n  i: {cidr6: \"2001:db8::/64\"}\n  a: {cidr: 10.1.0.0/24, uplink: i, nat: full-cone}",
			"t.yaml:3:42: networks.a.nat: NAT profiles translate IPv4, and the uplink i is IPv6-only; give i a cidr, or use nat: ipv6-firewall"},
		{"explicit router", up + "  b: {cidr: 10.2.0.0/24}\nrouters:\n  r: {interfaces: [{network: i}, {network: b}], uplink: i, nat: nat64}",
			"nat64 is a network gateway's profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse("t.yaml", []byte(tc.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
