package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx/netxtest"
)

var (
	internet6 = netip.MustParsePrefix("2001:db8::/64")
	lan6      = netip.MustParsePrefix("2001:db8:1::/64")
	server6   = netip.MustParseAddr("2001:db8::100")
)

// dualWorld is an internet with a dual-stack server and a dual-stack home
// behind a router that NATs IPv4 and, with fw, filters IPv6 (RFC 6092);
// plus an IPv6-only mobile network routed without filtering.
type dualWorld struct {
	f              *Fabric
	server, client *Host
	mobile         *Host
	router         *Router
}

func newDualWorld(t testing.TB, fw *nat.StatefulConfig) *dualWorld {
	t.Helper()
	f, err := New(Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	for _, n := range []NetworkConfig{
		{Name: "internet", Prefix: internet, Prefix6: internet6},
		{Name: "home", Prefix: lan, Prefix6: lan6},
		{Name: "mobile", Prefix6: netip.MustParsePrefix("2001:db8:2::/64"), MTU: 1280},
	} {
		_, err := f.AddNetwork(n)
		require.NoError(t, err)
	}
	w := &dualWorld{f: f}
	w.server, err = f.AddHost(HostConfig{Name: "server", Interfaces: []InterfaceConfig{
		{Network: "internet", Addr: serverIP, Aliases: []netip.Addr{server6}}}, Gateway6: ip("2001:db8::1"),
		Routes: []Route{{Dst: lan6, Via: ip("2001:db8::10")}}})
	require.NoError(t, err)
	w.router, err = f.AddRouter(RouterConfig{Name: "home-nat", Interfaces: []InterfaceConfig{
		{Name: "lan", Network: "home", Addr: ip("192.168.1.1"), Aliases: []netip.Addr{ip("2001:db8:1::1")}},
		{Name: "wan", Network: "internet", Addr: ip("203.0.113.10"), Aliases: []netip.Addr{ip("2001:db8::10")}},
	}, Uplink: "wan", NAT: profile(t, "port-restricted-cone"), Stateful: fw})
	require.NoError(t, err)
	w.client, err = f.AddHost(HostConfig{Name: "client", Interfaces: []InterfaceConfig{
		{Network: "home", Addr: ip("192.168.1.2"), Aliases: []netip.Addr{ip("2001:db8:1::2")}}},
		Gateway: ip("192.168.1.1"), Gateway6: ip("2001:db8:1::1")})
	require.NoError(t, err)
	_, err = f.AddRouter(RouterConfig{Name: "carrier", Interfaces: []InterfaceConfig{
		{Name: "core", Network: "internet", Addr: ip("2001:db8::1")},
		{Name: "ran", Network: "mobile", Addr: ip("2001:db8:2::1")},
	}, Routes: []Route{{Dst: lan6, Via: ip("2001:db8::10")}}})
	require.NoError(t, err)
	w.mobile, err = f.AddHost(HostConfig{Name: "mobile", Interfaces: []InterfaceConfig{{Network: "mobile", Addr: ip("2001:db8:2::2")}},
		Gateway6: ip("2001:db8:2::1")})
	require.NoError(t, err)
	return w
}

// sendRecv sends msg from a socket on from to to and reads it where it
// arrives, returning the source address the receiver saw.
func sendRecv(t *testing.T, from net.PacketConn, to net.PacketConn, dst netip.AddrPort, msg string) (netip.AddrPort, error) {
	t.Helper()
	if _, err := from.WriteTo([]byte(msg), net.UDPAddrFromAddrPort(dst)); err != nil {
		return netip.AddrPort{}, err
	}
	require.NoError(t, to.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	buf := make([]byte, 2048)
	n, addr, err := to.ReadFrom(buf)
	if err != nil {
		return netip.AddrPort{}, err
	}
	assert.Equal(t, msg, string(buf[:n]))
	return addr.(*net.UDPAddr).AddrPort(), nil
}

func listen(t *testing.T, h *Host, network, addr string) net.PacketConn {
	t.Helper()
	pc, err := h.ListenPacket(context.Background(), network, addr)
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	return pc
}

func TestDualStackUDP(t *testing.T) {
	w := newDualWorld(t, nil)
	srv := listen(t, w.server, "udp", "[::]:3478") // dual-stack: both families
	cli := listen(t, w.client, "udp6", "[::]:4000")
	from, err := sendRecv(t, cli, srv, netip.AddrPortFrom(server6, 3478), "over ipv6")
	require.NoError(t, err)
	assert.Equal(t, "[2001:db8:1::2]:4000", from.String(), "IPv6 is routed, not translated")
	_, err = sendRecv(t, srv, cli, from, "back")
	require.NoError(t, err, "with no firewall the server reaches the client directly")

	cli4 := listen(t, w.client, "udp4", ":4001")
	from, err = sendRecv(t, cli4, srv, netip.AddrPortFrom(serverIP, 3478), "over ipv4")
	require.NoError(t, err)
	assert.Equal(t, ip("203.0.113.10"), from.Addr(), "IPv4 is NATed as before")

	// The IPv6-only host: "udp" with no address is IPv6; IPv4 has no route.
	mob := listen(t, w.mobile, "udp", ":5000")
	assert.True(t, mob.LocalAddr().(*net.UDPAddr).IP.To4() == nil, "%v", mob.LocalAddr())
	from, err = sendRecv(t, mob, srv, netip.AddrPortFrom(server6, 3478), "from mobile")
	require.NoError(t, err)
	assert.Equal(t, "[2001:db8:2::2]:5000", from.String())
	_, err = mob.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(serverIP, 3478)))
	assert.True(t, errors.Is(err, syscall.ENETUNREACH), "a dual-stack socket on an IPv6-only host: %v", err)
	_, err = cli4.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(server6, 3478)))
	assert.True(t, errors.Is(err, syscall.EAFNOSUPPORT), "an IPv4 socket reaches no IPv6: %v", err)
}

func TestIPv6FirewallFiltersInbound(t *testing.T) {
	w := newDualWorld(t, &nat.StatefulConfig{Filtering: nat.AddressAndPortDependent, UDPTimeout: 30 * time.Second})
	srv := listen(t, w.server, "udp6", "[::]:3478")
	other := listen(t, w.server, "udp6", "[::]:3479")
	cli := listen(t, w.client, "udp6", "[::]:4000")
	clientAt := netip.MustParseAddrPort("[2001:db8:1::2]:4000")

	_, err := sendRecv(t, srv, cli, clientAt, "unsolicited")
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "inbound before any outbound is filtered")
	assert.EqualValues(t, 1, w.router.Stats().Firewall)

	_, err = sendRecv(t, cli, srv, netip.AddrPortFrom(server6, 3478), "hello")
	require.NoError(t, err)
	_, err = sendRecv(t, srv, cli, clientAt, "reply")
	require.NoError(t, err, "the flow the client opened lets the reply in")
	_, err = sendRecv(t, other, cli, clientAt, "from another port")
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "address-and-port-dependent: another port of the same server stays out")

	w.f.Clock().(interface{ Advance(time.Duration) }).Advance(31 * time.Second)
	_, err = sendRecv(t, srv, cli, clientAt, "late")
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "the state expired after 30s idle")
	assert.Equal(t, 0, w.router.Stateful().States(w.f.Clock().Now()))
}

func TestIPv6TCPAndPacketTooBig(t *testing.T) {
	w := newDualWorld(t, &nat.StatefulConfig{})
	ctx := context.Background()
	ln, err := w.server.Listen(ctx, "tcp6", "[::]:80")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := w.client.Dial(dctx, "tcp", "[2001:db8::100]:80")
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "[2001:db8:1::2]", c.LocalAddr().String()[:len("[2001:db8:1::2]")])
	_, err = c.Write([]byte("ping6"))
	require.NoError(t, err)
	buf := make([]byte, 5)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping6", string(buf))

	// The mobile network's link is 1280 bytes: a 1400-byte packet from the
	// server draws a Packet Too Big from the carrier's router.
	srv := listen(t, w.server, "udp6", "[::]:0")
	_, err = srv.WriteTo(make([]byte, 1400), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[2001:db8:2::2]:9")))
	require.NoError(t, err)
	carrier := w.f.Router("carrier")
	require.Eventually(t, func() bool { return carrier.Stats().TooBig == 1 }, 5*time.Second, time.Millisecond)
	assert.EqualValues(t, 1, carrier.Stats().ICMPSent)
}

func TestIPv6Validation(t *testing.T) {
	f, err := New(Config{})
	require.NoError(t, err)
	defer f.Close()
	_, err = f.AddNetwork(NetworkConfig{Name: "none"})
	assert.ErrorContains(t, err, "no prefix")
	_, err = f.AddNetwork(NetworkConfig{Name: "swapped", Prefix: internet6})
	assert.ErrorContains(t, err, "not an IPv4 prefix")
	_, err = f.AddNetwork(NetworkConfig{Name: "v6", Prefix6: lan6})
	require.NoError(t, err)
	_, err = f.AddHost(HostConfig{Name: "h", Interfaces: []InterfaceConfig{{Network: "v6", Addr: ip("192.168.1.2")}}})
	assert.ErrorContains(t, err, "outside")
	_, err = f.AddHost(HostConfig{Name: "h", Interfaces: []InterfaceConfig{{Network: "v6", Addr: ip("2001:db8:1::2")}}, Gateway6: ip("192.168.1.1")})
	assert.ErrorContains(t, err, "is an IPv4 address")
	_, err = f.AddHost(HostConfig{Name: "h", Interfaces: []InterfaceConfig{{Network: "v6", Addr: ip("2001:db8:1::2")}},
		Routes: []Route{{Dst: internet, Via: ip("2001:db8:1::1")}}})
	assert.ErrorContains(t, err, "different families")
	for _, n := range []NetworkConfig{{Name: "v6b", Prefix6: lan6}, {Name: "mid", Prefix: internet, Prefix6: internet6}} {
		_, err = f.AddNetwork(n)
		require.NoError(t, err)
	}
	// A NAT between them separates IPv4 realms, not IPv6 ones.
	_, err = f.AddRouter(RouterConfig{Name: "r1", Interfaces: []InterfaceConfig{
		{Network: "v6", Addr: ip("2001:db8:1::1")}, {Name: "wan", Network: "mid", Addr: ip("203.0.113.1"), Aliases: []netip.Addr{ip("2001:db8::1")}}},
		Uplink: "wan", NAT: profile(t, "full-cone")})
	require.NoError(t, err)
	_, err = f.AddRouter(RouterConfig{Name: "r2", Interfaces: []InterfaceConfig{
		{Network: "v6b", Addr: ip("2001:db8:1::1")}, {Name: "wan", Network: "mid", Addr: ip("203.0.113.2"), Aliases: []netip.Addr{ip("2001:db8::2")}}},
		Uplink: "wan", NAT: profile(t, "full-cone")})
	assert.ErrorContains(t, err, "IPv6 prefixes overlap")
}

// FuzzRouterInput6 is FuzzRouterInput for IPv6 frames through a router
// with the RFC 6092 filter: no panic, every frame accounted once.
func FuzzRouterInput6(f *testing.F) {
	fab, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fab.Close() })
	for _, n := range []NetworkConfig{{Name: "lan", Prefix6: lan6}, {Name: "internet", Prefix6: internet6}} {
		if _, err := fab.AddNetwork(n); err != nil {
			f.Fatal(err)
		}
	}
	r, err := fab.AddRouter(RouterConfig{Name: "fw", Interfaces: []InterfaceConfig{
		{Name: "lan", Network: "lan", Addr: ip("2001:db8:1::1"), MTU: 1280},
		{Name: "wan", Network: "internet", Addr: ip("2001:db8::10")},
	}, Uplink: "wan", Stateful: &nat.StatefulConfig{}})
	if err != nil {
		f.Fatal(err)
	}
	lanIfc, wanIfc := r.Interface("lan"), r.Interface("wan")
	host, srv := netip.MustParseAddrPort("[2001:db8:1::2]:4000"), netip.MustParseAddrPort("[2001:db8::100]:3478")
	f.Add(ipv6Frame(lanIfc.mac, protoUDP, host, srv, 100), false)
	f.Add(ipv6Frame(wanIfc.mac, protoUDP, srv, host, 100), true)
	f.Add(ipv6Frame(wanIfc.mac, protoUDP, srv, host, 1400), true) // packet too big
	f.Add(ipv6Frame(lanIfc.mac, protoICMPv6, host, netip.AddrPortFrom(ip("2001:db8:1::1"), 0), 8), false)
	f.Add(ipv6Frame(lanIfc.mac, protoTCP, host, srv, 0), false)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x60}, false)
	f.Fuzz(func(t *testing.T, frame []byte, outside bool) {
		in := lanIfc
		if outside {
			in = wanIfc
		}
		st := r.Stats()
		fr := getFrame(len(frame))
		copy(fr, frame)
		r.input(in, fr)
		now := r.Stats()
		if got := now.total() - st.total() - (now.ICMPSent - st.ICMPSent); got != 1 {
			t.Fatalf("frame accounted %d times: %+v", got, now)
		}
	})
}

// ipv6Frame builds an Ethernet frame with an IPv6 packet (transport
// checksum left zero); ICMPv6 is an echo request.
func ipv6Frame(dst mac, proto byte, from, to netip.AddrPort, payload int) []byte {
	l4 := 8
	if proto == protoTCP {
		l4 = 20
	}
	f := make([]byte, ethHeaderLen+ipv6HeaderLen+l4+payload)
	writeEth(f, dst, mac{}, etherTypeIPv6)
	p := f[ethHeaderLen:]
	p[0], p[6], p[7] = 0x60, proto, 64
	binary.BigEndian.PutUint16(p[4:], uint16(l4+payload))
	copy(p[8:24], from.Addr().AsSlice())
	copy(p[24:40], to.Addr().AsSlice())
	t := p[ipv6HeaderLen:]
	binary.BigEndian.PutUint16(t[0:], from.Port())
	binary.BigEndian.PutUint16(t[2:], to.Port())
	switch proto {
	case protoUDP:
		binary.BigEndian.PutUint16(t[4:], uint16(8+payload))
	case protoTCP:
		t[12], t[13] = 5<<4, 0x02
	case protoICMPv6:
		t[0], t[1] = icmp6EchoRequest, 0
	}
	return f
}

// FuzzUDPDeliver6 is FuzzUDPDeliver for a dual-stack socket on [::]: IPv6
// frames are taken or left for gVisor untouched, and nothing panics.
func FuzzUDPDeliver6(f *testing.F) {
	w := newDualWorld(f, nil)
	pc, err := w.server.ListenPacket(f.Context(), "udp", "[::]:3478")
	if err != nil {
		f.Fatal(err)
	}
	defer pc.Close()
	var m mac
	from := netip.MustParseAddrPort("[2001:db8:1::2]:5000")
	f.Add(ipv6Frame(m, protoUDP, from, netip.AddrPortFrom(server6, 3478), 20))
	f.Add(ipv6Frame(m, protoTCP, from, netip.AddrPortFrom(server6, 3478), 0))
	f.Add(ipv4Frame(m, m, protoUDP, netip.MustParseAddrPort("198.51.100.1:5000"), netip.MustParseAddrPort("203.0.113.100:3478"), 20))
	buf := make([]byte, 70000)
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr := getFrame(len(frame))
		copy(fr, frame)
		if !w.server.udp.deliver(fr) {
			if string(fr) != string(frame) {
				t.Fatal("a frame left for gVisor was modified")
			}
			putFrame(fr)
		}
		_ = pc.SetReadDeadline(time.Now())
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				break
			}
		}
	})
}

// BenchmarkDualStackUDP: 1400-byte datagrams from a dual-stack home host
// to the server, over IPv4 through the NAT and over IPv6 through the
// RFC 6092 filter, in the same run (compare the two).
func BenchmarkDualStackUDP(b *testing.B) {
	for _, tc := range []struct {
		name, network, local string
		dst                  netip.AddrPort
	}{
		{"ipv4-nat", "udp4", ":4000", netip.AddrPortFrom(serverIP, 3478)},
		{"ipv6-firewall", "udp6", "[::]:4000", netip.AddrPortFrom(server6, 3478)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := newDualWorld(b, &nat.StatefulConfig{Filtering: nat.AddressAndPortDependent})
			rx, err := w.server.ListenPacket(b.Context(), tc.network, tc.local[:len(tc.local)-4]+"3478")
			require.NoError(b, err)
			tx, err := w.client.ListenPacket(b.Context(), tc.network, tc.local)
			require.NoError(b, err)
			benchUDP(b, tx, rx, tc.dst)
		})
	}
}

// TestHostConformanceIPv6 runs the netx conformance suite between two
// hosts on an IPv6-only segment: the contract holds over IPv6 too.
func TestHostConformanceIPv6(t *testing.T) {
	netxtest.Run(t, func(t *testing.T) netxtest.Env {
		f, err := New(Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, f.Close()) })
		_, err = f.AddNetwork(NetworkConfig{Name: "v6", Prefix6: lan6})
		require.NoError(t, err)
		s, err := f.AddHost(HostConfig{Name: "server", Interfaces: []InterfaceConfig{{Network: "v6", Addr: ip("2001:db8:1::100")}}})
		require.NoError(t, err)
		c, err := f.AddHost(HostConfig{Name: "client", Interfaces: []InterfaceConfig{{Network: "v6", Addr: ip("2001:db8:1::7")}}})
		require.NoError(t, err)
		return netxtest.Env{Server: s, Client: c, ServerAddr: ip("2001:db8:1::100"), ClientAddr: ip("2001:db8:1::7"),
			Blackhole: netip.MustParseAddrPort("[2001:db8:1::200]:80")}
	})
}
