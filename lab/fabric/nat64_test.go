package fabric

import (
	"bytes"
	"crypto/sha256"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx/netxtest"
)

// world64 is an IPv4-only internet with an IPv4-only server, and an
// IPv6-only mobile network behind a NAT64 router (the well-known prefix).
type world64 struct {
	f             *Fabric
	server        *Host
	phone, phone2 *Host
	router        *Router
}

func newWorld64(t *testing.T, uplinkMTU, mobileMTU int) *world64 {
	t.Helper()
	f, err := New(Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	for _, n := range []NetworkConfig{
		{Name: "internet", Prefix: internet},
		{Name: "mobile", Prefix6: netip.MustParsePrefix("2001:db8:2::/64"), MTU: mobileMTU},
	} {
		_, err := f.AddNetwork(n)
		require.NoError(t, err)
	}
	w := &world64{f: f}
	w.server, err = f.AddHost(HostConfig{Name: "server", Interfaces: []InterfaceConfig{{Network: "internet", Addr: serverIP}}})
	require.NoError(t, err)
	w.router, err = f.AddRouter(RouterConfig{Name: "carrier-nat64", Interfaces: []InterfaceConfig{
		{Name: "ran", Network: "mobile", Addr: ip("2001:db8:2::1")},
		{Name: "wan", Network: "internet", Addr: ip("203.0.113.10"), MTU: uplinkMTU},
	}, Uplink: "wan", NAT64: &nat.NAT64Config{}})
	require.NoError(t, err)
	for i, h := range []**Host{&w.phone, &w.phone2} {
		*h, err = f.AddHost(HostConfig{Name: []string{"phone", "phone2"}[i], Interfaces: []InterfaceConfig{
			{Network: "mobile", Addr: netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 2, 15: byte(2 + i)})}},
			Gateway6: ip("2001:db8:2::1")})
		require.NoError(t, err)
	}
	return w
}

// server64 is the IPv4-only server under the NAT64 prefix.
var server64 = nat.Embed64(nat.WellKnownPrefix64, serverIP)

// TestNAT64 runs in virtual time: IPv6-only hosts reach the IPv4-only
// server at 64:ff9b::203.0.113.100 over UDP (echoed back), TCP (a transfer
// checked by SHA-256) and ping; each host has its own mapping; the server
// cannot reach in unsolicited.
func TestNAT64(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWorld64(t, 0, 0)
		srv := listen(t, w.server, "udp4", ":7")
		go func() { // a UDP echo server
			buf := make([]byte, 2048)
			for {
				n, from, err := srv.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = srv.WriteTo(buf[:n], from)
			}
		}()
		dst := netip.AddrPortFrom(server64, 7)
		var seen []netip.AddrPort
		for _, h := range []*Host{w.phone, w.phone2} {
			pc := listen(t, h, "udp6", ":5000")
			_, err := pc.WriteTo([]byte("echo me"), net.UDPAddrFromAddrPort(dst))
			require.NoError(t, err)
			require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
			buf := make([]byte, 64)
			n, from, err := pc.ReadFrom(buf)
			require.NoError(t, err, "%s: the echo", h.Name())
			assert.Equal(t, "echo me", string(buf[:n]))
			assert.Equal(t, dst, from.(*net.UDPAddr).AddrPort(), "the reply comes from the server's NAT64 address")
		}
		for _, m := range w.router.NAT64().Mappings(w.f.Clock().Now()) {
			assert.Equal(t, ip("203.0.113.10"), m.External.Addr())
			seen = append(seen, m.Inside)
		}
		assert.ElementsMatch(t, []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:2::2]:5000"), netip.MustParseAddrPort("[2001:db8:2::3]:5000")}, seen,
			"one mapping per host")

		// Unsolicited IPv4 to the NAT64's address, to the port of a live
		// mapping but another protocol's, and to a port with no mapping.
		pc := listen(t, w.phone, "udp6", ":6000")
		probe := listen(t, w.server, "udp4", ":8")
		before := w.router.Stats().NAT
		_, err := probe.WriteTo([]byte("knock"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.10:6000")))
		require.NoError(t, err)
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
		_, _, err = pc.ReadFrom(make([]byte, 64))
		assert.Error(t, err, "unsolicited IPv4 got in")
		assert.Equal(t, before+1, w.router.Stats().NAT, "dropped by the NAT64")

		// TCP: 1 MiB up, checked by SHA-256.
		l, err := w.server.Listen(t.Context(), "tcp4", ":9")
		require.NoError(t, err)
		defer l.Close()
		sum := netxtest.SinkDigest(l)
		c, err := w.phone.Dial(ctxT(t, 10*time.Second), "tcp6", netip.AddrPortFrom(server64, 9).String())
		require.NoError(t, err)
		data := bytes.Repeat([]byte("lattice nat64 "), 1<<16)
		_, err = c.Write(data)
		require.NoError(t, err)
		require.NoError(t, c.(interface{ CloseWrite() error }).CloseWrite())
		select {
		case got := <-sum:
			assert.Equal(t, sha256.Sum256(data), got)
		case <-time.After(time.Minute):
			t.Fatal("the transfer did not arrive within a minute of network time")
		}
		_ = c.Close()

		// Ping: ICMPv6 echo out, ICMP echo to the server, and back.
		reply := ping6(t, w.phone, server64, 77)
		assert.Equal(t, server64, reply, "the echo reply comes from the server's NAT64 address")
		// gVisor counts the reply after writing it, and a link with no
		// delay can carry it to the phone within that write: wait for the
		// count (exact in virtual time), do not read it the moment the
		// reply is in.
		echoReplies := w.server.Stack().Stats().ICMP.V4.PacketsSent.EchoReply
		assert.Eventually(t, func() bool { return echoReplies.Value() >= 1 }, time.Second, time.Millisecond, "the IPv4 server never counted its echo reply")
		assert.Equal(t, uint64(1), echoReplies.Value(), "the IPv4 server answered one ICMP echo")
		assert.Positive(t, w.router.NAT64().Stats().Translated)
	})
}

// ping6 sends an ICMPv6 echo request from h to dst on h's own stack (the
// host's Ping speaks IPv4 only) and returns the reply's source.
func ping6(t *testing.T, h *Host, dst netip.Addr, seq uint16) netip.Addr {
	t.Helper()
	var wq waiter.Queue
	ep, terr := h.Stack().NewEndpoint(icmp.ProtocolNumber6, ipv6.ProtocolNumber, &wq)
	require.Nil(t, terr)
	c := gonet.NewUDPConn(&wq, ep)
	defer c.Close()
	req := make([]byte, header.ICMPv6EchoMinimumSize+4)
	header.ICMPv6(req).SetType(header.ICMPv6EchoRequest)
	header.ICMPv6(req).SetSequence(seq)
	copy(req[header.ICMPv6EchoMinimumSize:], "ping")
	_, err := c.WriteTo(req, &net.UDPAddr{IP: dst.AsSlice()})
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 256)
	n, from, err := c.ReadFrom(buf)
	require.NoError(t, err, "no echo reply")
	require.GreaterOrEqual(t, n, header.ICMPv6EchoMinimumSize)
	assert.Equal(t, header.ICMPv6EchoReply, header.ICMPv6(buf[:n]).Type())
	assert.Equal(t, seq, header.ICMPv6(buf[:n]).Sequence())
	assert.Equal(t, "ping", string(buf[header.ICMPv6EchoMinimumSize:n]))
	a, _ := netip.AddrFromSlice(from.(*net.UDPAddr).IP)
	return a
}

// TestNAT64PacketTooBig: an IPv6 packet that fits the mobile network but
// not the IPv4 uplink once translated is answered with Packet Too Big
// naming the IPv6 size that fits (uplink MTU + 20), and the host's next
// send at that size arrives.
func TestNAT64PacketTooBig(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWorld64(t, 1400, 0)
		srv := listen(t, w.server, "udp4", ":7")
		pc := listen(t, w.phone, "udp6", ":5000")
		dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(server64, 7))
		_, err := pc.WriteTo(make([]byte, 1452), dst) // 1500 bytes of IPv6, 1480 of IPv4
		require.NoError(t, err)
		require.NoError(t, srv.SetReadDeadline(time.Now().Add(time.Second)))
		_, _, err = srv.ReadFrom(make([]byte, 2048))
		assert.Error(t, err, "too big for the uplink")
		assert.Equal(t, uint64(1), w.router.Stats().TooBig)
		assert.Equal(t, uint64(1), w.router.Stats().ICMPSent, "packet too big sent")
		_, err = pc.WriteTo(make([]byte, 1420-48), dst)
		require.NoError(t, err)
		require.NoError(t, srv.SetReadDeadline(time.Now().Add(time.Second)))
		n, _, err := srv.ReadFrom(make([]byte, 2048))
		require.NoError(t, err, "1420 bytes of IPv6 are 1400 of IPv4")
		assert.Equal(t, 1420-48, n)
	})
}

// TestNAT64Hairpin: an IPv6-only host reaches another behind the same
// NAT64 through the other's mapping at the NAT64 address (RFC 6146
// section 3.8), seeing the sender's mapping as the source.
func TestNAT64Hairpin(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWorld64(t, 0, 0)
		srv := listen(t, w.server, "udp4", ":7")
		a, b := listen(t, w.phone, "udp6", ":5000"), listen(t, w.phone2, "udp6", ":6000")
		public := func(pc net.PacketConn) netip.AddrPort { // the mapping pc's packet to the server got
			t.Helper()
			_, err := pc.WriteTo([]byte("hi"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(server64, 7)))
			require.NoError(t, err)
			require.NoError(t, srv.SetReadDeadline(time.Now().Add(time.Second)))
			_, from, err := srv.ReadFrom(make([]byte, 16))
			require.NoError(t, err)
			return from.(*net.UDPAddr).AddrPort()
		}
		pa, pb := public(a), public(b)
		_, err := a.WriteTo([]byte("hairpin"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(nat.Embed64(nat.WellKnownPrefix64, pb.Addr()), pb.Port())))
		require.NoError(t, err)
		require.NoError(t, b.SetReadDeadline(time.Now().Add(time.Second)))
		buf := make([]byte, 16)
		n, from, err := b.ReadFrom(buf)
		require.NoError(t, err, "hairpinned through the NAT64")
		assert.Equal(t, "hairpin", string(buf[:n]))
		assert.Equal(t, netip.AddrPortFrom(nat.Embed64(nat.WellKnownPrefix64, pa.Addr()), pa.Port()), from.(*net.UDPAddr).AddrPort())
	})
}

// TestNAT64FragmentationNeeded: an IPv4 datagram with DF that would exceed
// the IPv6 network's MTU once translated is answered with "fragmentation
// needed" naming the IPv4 size that fits (MTU - 20); one that fits arrives.
func TestNAT64FragmentationNeeded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWorld64(t, 0, 1280)
		srv := listen(t, w.server, "udp4", ":7")
		pc := listen(t, w.phone, "udp6", ":5000")
		_, err := pc.WriteTo([]byte("hi"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(server64, 7)))
		require.NoError(t, err)
		require.NoError(t, srv.SetReadDeadline(time.Now().Add(time.Second)))
		_, from, err := srv.ReadFrom(make([]byte, 64))
		require.NoError(t, err)
		_, err = srv.WriteTo(make([]byte, 1300), from) // 1328 bytes of IPv4 with DF, 1348 of IPv6
		require.NoError(t, err)
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
		_, _, err = pc.ReadFrom(make([]byte, 2048))
		assert.Error(t, err, "too big for the mobile network")
		st := w.router.Stats()
		assert.Equal(t, uint64(1), st.TooBig)
		assert.Equal(t, uint64(1), st.ICMPSent, "fragmentation needed sent")
		assert.Equal(t, 1260, w.server.udp.pmtu.get(ip("203.0.113.10"), w.f.Clock()), "the server learnt the size that fits")
		_, err = srv.WriteTo(make([]byte, 1232), from) // 1260 bytes of IPv4, 1280 of IPv6
		require.NoError(t, err)
		require.NoError(t, pc.SetReadDeadline(time.Now().Add(time.Second)))
		n, _, err := pc.ReadFrom(make([]byte, 2048))
		require.NoError(t, err)
		assert.Equal(t, 1232, n)
	})
}

// FuzzRouterNAT64 feeds arbitrary frames to a NAT64 router's inside and
// outside interfaces: no panic, and every frame accounted once (an ICMP
// error the router sent counts as forwarded besides).
func FuzzRouterNAT64(f *testing.F) {
	fab, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fab.Close() })
	for _, n := range []NetworkConfig{{Name: "mobile", Prefix6: netip.MustParsePrefix("2001:db8:2::/64")}, {Name: "internet", Prefix: internet}} {
		if _, err := fab.AddNetwork(n); err != nil {
			f.Fatal(err)
		}
	}
	r, err := fab.AddRouter(RouterConfig{Name: "nat64", Interfaces: []InterfaceConfig{
		{Name: "ran", Network: "mobile", Addr: ip("2001:db8:2::1")},
		{Name: "wan", Network: "internet", Addr: ip("203.0.113.10"), MTU: 1400},
	}, Uplink: "wan", NAT64: &nat.NAT64Config{}})
	if err != nil {
		f.Fatal(err)
	}
	ran, wan := r.Interface("ran"), r.Interface("wan")
	phone, srv := netip.MustParseAddrPort("[2001:db8:2::2]:4000"), netip.AddrPortFrom(server64, 3478)
	var other mac
	f.Add(ipv6Frame(ran.mac, protoUDP, phone, srv, 100), false)
	f.Add(ipv6Frame(ran.mac, protoTCP, phone, srv, 0), false)
	f.Add(ipv6Frame(ran.mac, protoICMPv6, phone, srv, 8), false)
	f.Add(ipv6Frame(ran.mac, protoUDP, phone, srv, 1400), false) // too big once translated
	f.Add(ipv4Frame(wan.mac, other, protoUDP, netip.AddrPortFrom(serverIP, 3478), netip.MustParseAddrPort("203.0.113.10:4000"), 100), true)
	f.Add(ipv4Frame(wan.mac, other, protoICMP, netip.AddrPortFrom(serverIP, 0), netip.AddrPortFrom(ip("203.0.113.10"), 0), 8), true)
	f.Fuzz(func(t *testing.T, frame []byte, outside bool) {
		in := ran
		if outside {
			in = wan
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
