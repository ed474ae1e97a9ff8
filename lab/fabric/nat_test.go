package fabric

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/clock"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/natcheck"
)

var probeEndpoints = natcheck.Endpoints{Primary: serverIP, Alternate: serverAlt, Port: 3478, AltPort: 3479}

// discover runs RFC 5780-style discovery from a host behind a NAT built
// with cfg.
func discover(t *testing.T, cfg *nat.Config) (natcheck.Result, error) {
	t.Helper()
	w := newWorld(t, Config{})
	s := w.addSite(t, cfg, 1)
	ctx := ctxT(t, 20*time.Second)
	srv, err := natcheck.NewServer(ctx, w.server, probeEndpoints)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return natcheck.Discover(ctx, s.hosts[0], probeEndpoints, natcheck.Options{Wait: 200 * time.Millisecond})
}

func TestDiscoveryEveryMappingFiltering(t *testing.T) {
	behaviors := []nat.Behavior{nat.EndpointIndependent, nat.AddressDependent, nat.AddressAndPortDependent}
	for _, m := range behaviors {
		for _, f := range behaviors {
			for _, alloc := range []nat.PortAllocation{nat.Preserve, nat.Sequential, nat.Random} {
				t.Run(fmt.Sprintf("%s-mapping/%s-filtering/%s", m, f, alloc), func(t *testing.T) {
					t.Parallel()
					res, err := discover(t, &nat.Config{Mapping: m, Filtering: f, PortAllocation: alloc, Seed: 7})
					require.NoError(t, err)
					assert.True(t, res.NATed, "discovery did not notice the NAT")
					assert.Equal(t, m, res.Mapping, "mapping: %s", res)
					assert.Equal(t, f, res.Filtering, "filtering: %s", res)
					if alloc == nat.Preserve {
						// natcheck's client socket port is kept on the first mapping.
						assert.NotZero(t, res.Mapped[0].Port())
					}
				})
			}
		}
	}
}

func TestDiscoveryProfiles(t *testing.T) {
	for _, name := range nat.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := profile(t, name)
			res, err := discover(t, cfg)
			if len(cfg.Firewall.Rules) > 0 && name == "udp-blocked" {
				require.ErrorIs(t, err, natcheck.ErrNoResponse, "UDP must not get through a UDP-blocking firewall")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, cfg.Mapping, res.Mapping, "%s", res)
			assert.Equal(t, cfg.Filtering, res.Filtering, "%s", res)
		})
	}
}

func TestNoNATDiscovery(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := ctxT(t, 10*time.Second)
	h, err := w.f.AddHost(HostConfig{Name: "public", Interfaces: []InterfaceConfig{{Network: "internet", Addr: ip("203.0.113.5")}}})
	require.NoError(t, err)
	srv, err := natcheck.NewServer(ctx, w.server, probeEndpoints)
	require.NoError(t, err)
	defer srv.Close()
	res, err := natcheck.Discover(ctx, h, probeEndpoints, natcheck.Options{})
	require.NoError(t, err)
	assert.False(t, res.NATed, "%s %v", res, res.Mapped)
	assert.Equal(t, nat.EndpointIndependent, res.Filtering, "%s", res)
}

// TestHairpin sends from one host to another behind the same NAT, through
// the NAT's public address.
func TestHairpin(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("hairpin=%t", on), func(t *testing.T) {
			t.Parallel()
			cfg := profile(t, "full-cone")
			cfg.Hairpin = on
			w := newWorld(t, Config{})
			s := w.addSite(t, cfg, 2)
			ctx := ctxT(t, 10*time.Second)
			spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
			require.NoError(t, err)
			defer spc.Close()
			go udpEcho(spc)

			a, err := s.hosts[0].ListenPacket(ctx, "udp4", ":5000")
			require.NoError(t, err)
			defer a.Close()
			b, err := s.hosts[1].ListenPacket(ctx, "udp4", ":6000")
			require.NoError(t, err)
			defer b.Close()
			// Learn both public endpoints from the server.
			aExt, _, err := roundTrip(a, netip.MustParseAddrPort("203.0.113.100:3478"), "who", time.Second)
			require.NoError(t, err)
			bExt, _, err := roundTrip(b, netip.MustParseAddrPort("203.0.113.100:3478"), "who", time.Second)
			require.NoError(t, err)

			// a sends to b's public endpoint.
			_, err = a.WriteTo([]byte("hairpin"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(bExt)))
			require.NoError(t, err)
			_ = b.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 64)
			n, from, err := b.ReadFrom(buf)
			if !on {
				require.Error(t, err, "hairpinning is off, yet b received %q", buf[:n])
				assert.Equal(t, uint64(1), s.router.NAT().Stats().DroppedHairpinDisabled)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "hairpin", string(buf[:n]))
			// RFC 4787 REQ-9: the receiver sees the sender's external endpoint.
			assert.Equal(t, aExt, from.String())
		})
	}
}

func TestMappingExpiry(t *testing.T) {
	cfg := profile(t, "port-restricted-cone")
	cfg.UDPTimeout = 30 * time.Second
	w := newWorld(t, Config{})
	s := w.addSite(t, cfg, 1)
	lab := w.f.Clock().(*clock.Lab)
	ctx := ctxT(t, 10*time.Second)

	spc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer spc.Close()
	cpc, err := s.hosts[0].ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer cpc.Close()

	_, err = cpc.WriteTo([]byte("open"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.100:3478")))
	require.NoError(t, err)
	buf := make([]byte, 64)
	_ = spc.SetReadDeadline(time.Now().Add(time.Second))
	_, ext, err := spc.ReadFrom(buf)
	require.NoError(t, err)

	reply := func() error {
		if _, err := spc.WriteTo([]byte("back"), ext); err != nil {
			return err
		}
		_ = cpc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, _, err := cpc.ReadFrom(buf)
		return err
	}
	lab.Advance(29 * time.Second)
	require.NoError(t, reply(), "mapping expired before its timeout")
	// Inbound does not refresh by default: the mapping dies 30s after the
	// last outbound packet.
	lab.Advance(2 * time.Second)
	require.Error(t, reply(), "mapping outlived its timeout")
	assert.Empty(t, s.router.NAT().Mappings(w.f.Clock().Now()))
}

func TestNATRebootBreaksFlows(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "port-restricted-cone"), 1)
	ctx := ctxT(t, 10*time.Second)
	l, err := w.server.Listen(ctx, "tcp4", "203.0.113.100:80")
	require.NoError(t, err)
	defer l.Close()
	go tcpEcho(l)
	c, err := s.hosts[0].Dial(ctx, "tcp4", "203.0.113.100:80")
	require.NoError(t, err)
	defer c.Close()
	echo := func(d time.Duration) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.ReadFull(c, make([]byte, 4))
		return err
	}
	require.NoError(t, echo(2*time.Second))
	s.router.NAT().Reboot()
	// The server's replies now hit a NAT with no mapping: the flow is dead.
	err = echo(500 * time.Millisecond)
	require.Error(t, err)
	assert.Positive(t, s.router.NAT().Stats().DroppedNoMapping)
}

// TestTCPSimultaneousOpen punches a TCP connection between two hosts behind
// endpoint-independent NATs: both learn each other's public endpoint and
// connect at the same time from a fixed local port.
func TestTCPSimultaneousOpen(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.addSite(t, profile(t, "port-restricted-cone"), 1).hosts[0]
	b := w.addSite(t, profile(t, "restricted-cone"), 1).hosts[0]
	ctx := ctxT(t, 15*time.Second)
	// Port preservation makes the public endpoints predictable; the test
	// still checks them through the NAT tables.
	aLocal, bLocal := netip.MustParseAddrPort("192.168.1.2:7001"), netip.MustParseAddrPort("192.168.1.2:7002")
	aPub, bPub := netip.MustParseAddrPort("203.0.113.10:7001"), netip.MustParseAddrPort("203.0.113.11:7002")

	type res struct {
		c   net.Conn
		err error
	}
	dial := func(h *Host, local, remote netip.AddrPort, out chan<- res) {
		var last error
		for ctx.Err() == nil {
			c, err := h.DialTCPFrom(ctxT(t, time.Second), local, remote)
			if err == nil {
				out <- res{c: c}
				return
			}
			last = err
			time.Sleep(20 * time.Millisecond)
		}
		out <- res{err: last}
	}
	ca, cb := make(chan res, 1), make(chan res, 1)
	go dial(a, aLocal, bPub, ca)
	go dial(b, bLocal, aPub, cb)
	ra, rb := <-ca, <-cb
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	defer ra.c.Close()
	defer rb.c.Close()
	assert.Equal(t, bPub.String(), ra.c.RemoteAddr().String())
	assert.Equal(t, aPub.String(), rb.c.RemoteAddr().String())
	_, err := ra.c.Write([]byte("punched"))
	require.NoError(t, err)
	buf := make([]byte, 7)
	_ = rb.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = io.ReadFull(rb.c, buf)
	require.NoError(t, err)
	assert.Equal(t, "punched", string(buf))
}

// TestSymmetricDefeatsPunching is the control for the test above: with
// address-and-port-dependent mapping the public port a peer sees for the
// server is not the one used towards another peer.
func TestSymmetricMappingDiffersPerDestination(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "symmetric"), 1)
	ctx := ctxT(t, 10*time.Second)
	for _, p := range []string{"203.0.113.100:3478", "203.0.113.101:3478"} {
		pc, err := w.server.ListenPacket(ctx, "udp4", p)
		require.NoError(t, err)
		defer pc.Close()
		go udpEcho(pc)
	}
	c, err := s.hosts[0].ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer c.Close()
	m1, _, err := roundTrip(c, netip.MustParseAddrPort("203.0.113.100:3478"), "x", time.Second)
	require.NoError(t, err)
	m2, _, err := roundTrip(c, netip.MustParseAddrPort("203.0.113.101:3478"), "x", time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, m1, m2)
}

func TestDoubleNAT(t *testing.T) {
	// home LAN → home NAT → ISP CGNAT segment (100.64/10) → CGNAT → internet
	w := newWorld(t, Config{})
	f := w.f
	_, err := f.AddNetwork(NetworkConfig{Name: "isp", Prefix: netip.MustParsePrefix("100.64.0.0/10")})
	require.NoError(t, err)
	_, err = f.AddNetwork(NetworkConfig{Name: "home", Prefix: lan})
	require.NoError(t, err)
	cg, err := f.AddRouter(RouterConfig{Name: "cgnat", Interfaces: []InterfaceConfig{
		{Name: "isp", Network: "isp", Addr: ip("100.64.0.1")},
		{Name: "wan", Network: "internet", Addr: ip("203.0.113.50")},
	}, Uplink: "wan", NAT: profile(t, "cgnat")})
	require.NoError(t, err)
	home, err := f.AddRouter(RouterConfig{Name: "home", Interfaces: []InterfaceConfig{
		{Name: "lan", Network: "home", Addr: ip("192.168.1.1")},
		{Name: "wan", Network: "isp", Addr: ip("100.64.7.7")},
	}, Gateway: ip("100.64.0.1"), Uplink: "wan", NAT: profile(t, "port-restricted-cone")})
	require.NoError(t, err)
	h, err := f.AddHost(HostConfig{Name: "laptop", Interfaces: []InterfaceConfig{{Network: "home", Addr: ip("192.168.1.20")}}, Gateway: ip("192.168.1.1")})
	require.NoError(t, err)

	ctx := ctxT(t, 10*time.Second)
	srv, err := natcheck.NewServer(ctx, w.server, probeEndpoints)
	require.NoError(t, err)
	defer srv.Close()
	res, err := natcheck.Discover(ctx, h, probeEndpoints, natcheck.Options{})
	require.NoError(t, err)
	assert.True(t, res.NATed)
	assert.Equal(t, ip("203.0.113.50"), res.Mapped[0].Addr(), "traffic must leave through the CGNAT's address")
	// The stricter of the two filters wins.
	assert.Equal(t, nat.AddressAndPortDependent, res.Filtering, "%s", res)
	assert.NotEmpty(t, home.NAT().Mappings(f.Clock().Now()))
	assert.NotEmpty(t, cg.NAT().Mappings(f.Clock().Now()))
	_, err = h.Ping(ctx, serverIP)
	require.NoError(t, err, "ping through two NATs")
}

func TestFirewallUDPBlocked(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "udp-blocked"), 1)
	h := s.hosts[0]
	ctx := ctxT(t, 10*time.Second)
	for _, port := range []string{"443", "8080"} {
		l, err := w.server.Listen(ctx, "tcp4", "203.0.113.100:"+port)
		require.NoError(t, err)
		defer l.Close()
		go tcpEcho(l)
	}
	pc, err := w.server.ListenPacket(ctx, "udp4", "203.0.113.100:3478")
	require.NoError(t, err)
	defer pc.Close()
	go udpEcho(pc)

	c, err := h.Dial(ctx, "tcp4", "203.0.113.100:443")
	require.NoError(t, err, "TCP 443 is allowed")
	c.Close()
	_, err = h.Dial(ctxT(t, 500*time.Millisecond), "tcp4", "203.0.113.100:8080")
	require.Error(t, err, "TCP 8080 must be blocked")
	cpc, err := h.ListenPacket(ctx, "udp4", ":4000")
	require.NoError(t, err)
	defer cpc.Close()
	_, _, err = roundTrip(cpc, netip.MustParseAddrPort("203.0.113.100:3478"), "x", 300*time.Millisecond)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "UDP must be blocked, got %v", err)
	assert.Positive(t, s.router.Stats().Firewall)
}

func TestMappingsListed(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.addSite(t, profile(t, "full-cone"), 1)
	ctx := ctxT(t, 5*time.Second)
	_, err := s.hosts[0].Ping(ctx, serverIP)
	require.NoError(t, err)
	ms := s.router.NAT().Mappings(w.f.Clock().Now())
	require.Len(t, ms, 1)
	assert.True(t, strings.Contains(ms[0].Proto.String(), "icmp"), "%v", ms[0])
}
