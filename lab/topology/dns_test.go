package topology

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
)

// world64 with services and nodes: a dual-stack server, an IPv6-only
// carrier behind NAT64 with a DNS64, an IPv4-only home.
const worldDNS = `
networks:
  internet: {cidr: 203.0.113.0/24, cidr6: "2001:db8::/64"}
  mobile: {cidr6: "2001:db8:2::/64", uplink: internet, nat: nat64}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
hosts:
  server: {network: internet, addr: 203.0.113.100, aliases: [203.0.113.101]}
control: {host: server, addr: 203.0.113.101}
relays: {relay: {host: server}}
stun: {stun: {host: server, alternate: 203.0.113.101}}
dns: {resolver: {network: mobile, dns64: "64:ff9b::/96"}}
nodes:
  phone: {network: mobile}
  laptop: {network: home}
  box: {host: server}
`

// TestPlanDNS: services on a dual-stack network listen on their twins
// too (aliases' included), nodes may be IPv6-only, and the DNS server's
// table names every host, node and service.
func TestPlanDNS(t *testing.T) {
	_, p := parse(t, worldDNS)
	ap := netip.MustParseAddrPort
	assert.Equal(t, []netip.AddrPort{ap("203.0.113.101:4222"), ap("[2001:db8::65]:4222")}, p.Control.Addrs(), "the alias's twin")
	assert.Equal(t, ap("[2001:db8::64]:443"), p.Relays[0].Addr6)
	assert.Equal(t, ap("[2001:db8::65]:3479"), p.STUN[0].Alternate6)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("203.0.113.101"), netip.MustParseAddr("2001:db8::64"), netip.MustParseAddr("2001:db8::65")},
		p.Host("server").Config.Interfaces[0].Aliases, "an alias, then the twins of the address and of the alias")
	assert.Equal(t, "2001:db8:2::3", p.Node("phone").Addr.String(), "an IPv6-only node, placed after the services")

	require.Len(t, p.DNS, 1)
	d := p.DNS[0]
	assert.Equal(t, nat.WellKnownPrefix64, d.DNS64)
	assert.Equal(t, ap("[2001:db8:2::2]:53"), d.Addr, "on a host of its own on mobile")
	assert.False(t, d.Addr6.IsValid(), "IPv6-only: no twin")
	ips := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	assert.Equal(t, ips("203.0.113.101", "2001:db8::65"), d.Records["control.lab"])
	assert.Equal(t, ips("203.0.113.100", "2001:db8::64"), d.Records["relay.lab"])
	assert.Equal(t, ips("203.0.113.100", "203.0.113.101", "2001:db8::64", "2001:db8::65"), d.Records["server.lab"])
	assert.Equal(t, d.Records["server.lab"], d.Records["box.lab"], "a node on a declared host is that host")
	assert.Equal(t, ips("192.168.1.2"), d.Records["laptop.lab"])
	assert.Equal(t, ips("2001:db8:2::3"), d.Records["phone.lab"])
	assert.Equal(t, ips("2001:db8:2::2"), d.Records["resolver.lab"])
	assert.Equal(t, []string{"dns resolver :53 (DNS64)"}, p.roles()["resolver"], "graphs show it")
}

// TestDNSErrors: the dns service's and the address families' mistakes,
// each at its position.
func TestDNSErrors(t *testing.T) {
	const nets = `networks:
  internet: {cidr: 203.0.113.0/24}
  mobile: {cidr6: "2001:db8:2::/64", uplink: internet, nat: nat64}
  open: {cidr6: "2001:db8:3::/64", uplink: internet}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
`
	for _, tc := range []struct{ name, in, want string }{
		{
			name: "dns64 prefixes",
			in: nets + `hosts: {server: {network: internet}}
dns:
  a: {host: server, dns64: "64:ff9b::/64"}
  b: {host: server, port: 5353, dns64: 10.0.0.0/24}
  c: {host: server, port: 5354, dns64: "2001:db8:64::/96"}
  d: {host: server, port: 53}
  e: {network: mobile, dnss64: "64:ff9b::/96"}
`,
			want: `5 problems:
t.yaml:8:28: dns.a.dns64: dns64 64:ff9b::/64 is not a /96 (RFC 6052's format, the one nat64 uses); use the nat64 networks' prefix64, 64:ff9b::/96 unless they set one
t.yaml:9:40: dns.b.dns64: dns64 10.0.0.0/24 is not an IPv6 prefix; use the nat64 networks' prefix64, 64:ff9b::/96 unless they set one
t.yaml:10:40: dns.c.dns64: no nat64 network translates 2001:db8:64::/96: its synthesized addresses would lead nowhere; the nat64 networks here use 64:ff9b::/96
t.yaml:11:27: dns.d.port: udp port 53 on host server is already dns a's; give one of them another port
t.yaml:12:24: dns.e: unknown key "dnss64"; did you mean "dns64"? (known keys: host, network, addr, aliases, link, port, dns64)`,
		},
		{
			name: "families",
			in: nets + `hosts: {server: {network: internet}}
control: {host: server}
relays: {relay: {network: open}}
nodes:
  phone: {network: mobile}
  iot: {network: open}
  laptop: {network: home}
`,
			want: `3 problems:
t.yaml:10:3: nodes.phone: node phone reaches relay over IPv6 only, and internet on the way has no IPv6; give internet a cidr6
t.yaml:11:3: nodes.iot: node iot has only IPv6 and control only IPv4 (203.0.113.4); give the service's network a cidr6, or put the node's network behind nat: nat64
t.yaml:12:3: nodes.laptop: node laptop has only IPv4 and relay only IPv6 (2001:db8:3::2); give the service's network a cidr, or the node's a cidr6`,
		},
		{
			name: "kernel hosts",
			in: `networks:
  internet: {cidr: 203.0.113.0/24, cidr6: "2001:db8::/64"}
  old: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
hosts:
  server: {network: internet}
  ns: {kind: netns, network: internet}
  ns4: {kind: netns, network: old}
control: {host: server}
nodes:
  g: {network: internet, sandbox: gvisor}
`,
			want: `2 problems:
t.yaml:6:3: hosts.ns: host ns is a kernel (netns) host, and those speak IPv4 only; network internet has IPv6; put it on a network without cidr6, or use an in-process host
t.yaml:10:3: nodes.g: host g is a kernel (netns) host, and those speak IPv4 only; network internet has IPv6; put it on a network without cidr6, or use an in-process host`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse("t.yaml", []byte(tc.in))
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}
