package dns

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// TestDNS64BehindNAT64: an IPv6-only phone asks the carrier's DNS64 for
// an IPv4-only server's AAAA, gets it synthesized under the NAT64 prefix
// (and discovers that prefix from ipv4only.arpa), and reaches the server
// at that address through the NAT64.
func TestDNS64BehindNAT64(t *testing.T) {
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	defer f.Close()
	for _, n := range []fabric.NetworkConfig{
		{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")},
		{Name: "mobile", Prefix6: netip.MustParsePrefix("2001:db8:2::/64")},
	} {
		_, err := f.AddNetwork(n)
		require.NoError(t, err)
	}
	ip := netip.MustParseAddr
	server, err := f.AddHost(fabric.HostConfig{Name: "server", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.100")}}})
	require.NoError(t, err)
	_, err = f.AddRouter(fabric.RouterConfig{Name: "carrier", Interfaces: []fabric.InterfaceConfig{
		{Name: "ran", Network: "mobile", Addr: ip("2001:db8:2::1")},
		{Name: "wan", Network: "internet", Addr: ip("203.0.113.10")},
	}, Uplink: "wan", NAT64: &nat.NAT64Config{}})
	require.NoError(t, err)
	resolver, err := f.AddHost(fabric.HostConfig{Name: "dns64", Interfaces: []fabric.InterfaceConfig{{Network: "mobile", Addr: ip("2001:db8:2::53")}}, Gateway6: ip("2001:db8:2::1")})
	require.NoError(t, err)
	phone, err := f.AddHost(fabric.HostConfig{Name: "phone", Interfaces: []fabric.InterfaceConfig{{Network: "mobile", Addr: ip("2001:db8:2::2")}}, Gateway6: ip("2001:db8:2::1")})
	require.NoError(t, err)

	s, err := New(Config{DNS64: nat.WellKnownPrefix64, Records: map[string][]netip.Addr{"server.lab": {ip("203.0.113.100")}}})
	require.NoError(t, err)
	ctx := context.Background()
	l, err := s.Listen(ctx, resolver, "[::]:53")
	require.NoError(t, err)
	defer l.Close()

	pc, err := phone.ListenPacket(ctx, "udp6", ":5353")
	require.NoError(t, err)
	defer pc.Close()
	resolve := func(name string) []netip.Addr {
		t.Helper()
		_, err := pc.WriteTo(query(t, 9, name, dnsmessage.TypeAAAA), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[2001:db8:2::53]:53")))
		require.NoError(t, err)
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(2*time.Second)))
		buf := make([]byte, 512)
		n, _, err := pc.ReadFrom(buf)
		require.NoError(t, err, "no answer from the DNS64")
		var m dnsmessage.Message
		require.NoError(t, m.Unpack(buf[:n]))
		var out []netip.Addr
		for _, a := range m.Answers {
			if r, ok := a.Body.(*dnsmessage.AAAAResource); ok {
				out = append(out, netip.AddrFrom16(r.AAAA))
			}
		}
		return out
	}
	// RFC 7050: the prefix is what is left of ipv4only.arpa's AAAA.
	disc := resolve("ipv4only.arpa.")
	require.NotEmpty(t, disc)
	assert.Equal(t, nat.WellKnownPrefix64, netip.PrefixFrom(disc[0], 96).Masked())
	got := resolve("server.lab.")
	require.Equal(t, []netip.Addr{ip("64:ff9b::cb00:7164")}, got)
	// The same through the lab's stub lookups.
	at := netip.MustParseAddrPort("[2001:db8:2::53]:53")
	p, err := Prefix64(ctx, phone, at)
	require.NoError(t, err)
	assert.Equal(t, nat.WellKnownPrefix64, p)
	looked, err := LookupAAAA(ctx, phone, at, "server.lab")
	require.NoError(t, err)
	assert.Equal(t, got, looked)
	_, err = LookupAAAA(ctx, phone, at, "nope.lab")
	assert.EqualError(t, err, "dns: lookup nope.lab at [2001:db8:2::53]:53: server answered RCodeNameError")

	srv, err := server.ListenPacket(ctx, "udp4", ":7")
	require.NoError(t, err)
	defer srv.Close()
	_, err = pc.WriteTo([]byte("by name"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(got[0], 7)))
	require.NoError(t, err)
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(2*time.Second)))
	buf := make([]byte, 64)
	n, from, err := srv.ReadFrom(buf)
	require.NoError(t, err, "the synthesized address reaches the IPv4 server")
	assert.Equal(t, "by name", string(buf[:n]))
	assert.Equal(t, "203.0.113.10", from.(*net.UDPAddr).IP.String())
}
