package node_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/stun"
)

var (
	internet6 = netip.MustParsePrefix("2001:db8::/64")
	server6   = netip.MustParseAddr("2001:db8::100")
)

// dualSite is how newDualWorld builds one site: its IPv4 NAT profile and
// whether its LAN and uplink also speak IPv6 (behind an ipv6-firewall).
type dualSite struct {
	nat  string
	ipv6 bool
}

// newDualWorld is newLabWorld on a dual-stack internet: the server also
// has 2001:db8::100 (with a second STUN server there), and each site is
// the standard 192.168.1.0/24 LAN behind its NAT, plus, where ipv6 is set,
// 2001:db8:<i+1>::/64 routed untranslated through an RFC 6092 stateful
// firewall. Sites are added before the server and control start.
func newDualWorld(t testing.TB, sites ...dualSite) (*labWorld, []*fabric.Host) {
	t.Helper()
	f, err := fabric.New(fabric.Config{Seed: 1})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24"), Prefix6: internet6})
	require.NoError(t, err)
	wan6 := func(i int) netip.Addr { return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(0x10 + i)}) }
	lan6 := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(i + 1)}), 64)
	}
	in6 := func(p netip.Prefix, last byte) netip.Addr {
		b := p.Addr().As16()
		b[15] = last
		return netip.AddrFrom16(b)
	}
	var serverRoutes []fabric.Route
	for i, s := range sites {
		if s.ipv6 {
			serverRoutes = append(serverRoutes, fabric.Route{Dst: lan6(i), Via: wan6(i)})
		}
	}
	var hosts []*fabric.Host
	for i, s := range sites {
		lan := fmt.Sprintf("lan%d", i)
		ncfg := fabric.NetworkConfig{Name: lan, Prefix: netip.MustParsePrefix("192.168.1.0/24")}
		if s.ipv6 {
			ncfg.Prefix6 = lan6(i)
		}
		_, err := f.AddNetwork(ncfg)
		require.NoError(t, err)
		cfg, err := nat.Profile(s.nat)
		require.NoError(t, err)
		rc := fabric.RouterConfig{Name: "nat" + lan, Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
			{Name: "lan", Network: lan, Addr: netip.MustParseAddr("192.168.1.1")},
			{Name: "wan", Network: "internet", Addr: netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)})},
		}}
		hc := fabric.HostConfig{Name: "host" + lan, Gateway: netip.MustParseAddr("192.168.1.1"),
			Interfaces: []fabric.InterfaceConfig{{Network: lan, Addr: netip.MustParseAddr("192.168.1.2")}}}
		if s.ipv6 {
			fw, err := nat.FirewallProfile("ipv6-firewall")
			require.NoError(t, err)
			rc.Stateful = &fw
			rc.Interfaces[0].Aliases = []netip.Addr{in6(lan6(i), 1)}
			rc.Interfaces[1].Aliases = []netip.Addr{wan6(i)}
			for j, o := range sites {
				if j != i && o.ipv6 {
					rc.Routes = append(rc.Routes, fabric.Route{Dst: lan6(j), Via: wan6(j)})
				}
			}
			hc.Interfaces[0].Aliases = []netip.Addr{in6(lan6(i), 2)}
			hc.Gateway6 = in6(lan6(i), 1)
		}
		_, err = f.AddRouter(rc)
		require.NoError(t, err)
		h, err := f.AddHost(hc)
		require.NoError(t, err)
		hosts = append(hosts, h)
	}
	server, err := f.AddHost(fabric.HostConfig{Name: "server", Routes: serverRoutes, Interfaces: []fabric.InterfaceConfig{
		{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100"),
			Aliases: []netip.Addr{netip.MustParseAddr("203.0.113.101"), server6}}}})
	require.NoError(t, err)
	var stuns []*stun.Server
	for _, a := range []string{"203.0.113.100:3478", "[2001:db8::100]:3478"} {
		st, err := stun.NewServer(stun.Config{Network: server, Primary: netip.MustParseAddrPort(a)})
		require.NoError(t, err)
		require.NoError(t, st.Start(t.Context()))
		t.Cleanup(func() { st.Close() })
		stuns = append(stuns, st)
	}
	w := &labWorld{f: f, server: server, secret: []byte("lab-relay-secret-0123456789abcdef"), stun: stuns[0],
		tls: meshtest.SelfSignedTLS(t), storePath: filepath.Join(t.TempDir(), "registry.json")}
	w.ctrlOpts = append(w.ctrlOpts, func(c *control.Config) { c.STUN = append(c.STUN, "[2001:db8::100]:3478") })
	w.startRelay(t)
	w.startControl(t)
	t.Cleanup(func() {
		w.ctrl.Close()
		w.relay.Close()
	})
	return w, hosts
}

// noMapped fails if anything in the status, as `lattice status --json`
// prints it, is an IPv4-mapped IPv6 address.
func noMapped(t *testing.T, n *node.Node) {
	t.Helper()
	js, err := json.Marshal(n.Status())
	require.NoError(t, err)
	assert.NotContains(t, string(js), "::ffff:", "status of %s", n.Identity().Name)
}

// TestDirectOverIPv6BehindSymmetricNATs: both IPv4 NATs are symmetric,
// so over IPv4 the pair stays on the relay (TestPathMatrix); both sites
// also have IPv6 behind an RFC 6092 firewall, and the pair goes direct
// over IPv6, host candidate to host candidate.
func TestDirectOverIPv6BehindSymmetricNATs(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		_, hosts := newDualWorld(t, dualSite{"symmetric", true}, dualSite{"symmetric", true})
		na, nb := &stockNetstack{}, &stockNetstack{}
		a := startNode(t, hosts[0], "alpha", na, exactICE)
		b := startNode(t, hosts[1], "beta", nb, exactICE)
		serveEcho(t, nb, 7)
		start := time.Now()
		eventuallyEcho(t, na, b.Address().Addr(), 7, 20*time.Second, "alpha to beta") // lazy nodes need traffic
		st := waitPath(t, a, node.PathDirect, 10*time.Second)
		t.Logf("direct over %s after %v; local candidates %q", st.Endpoint, time.Since(start), st.ICE.LocalCandidates)
		ep := netip.MustParseAddrPort(st.Endpoint)
		assert.Equal(t, netip.MustParseAddrPort("[2001:db8:2::2]:51820"), ep, "alpha reaches beta's IPv6 host address")
		assert.Equal(t, netip.MustParseAddrPort("[2001:db8:1::2]:51820"), netip.MustParseAddrPort(waitPath(t, b, node.PathDirect, 10*time.Second).Endpoint))
		local := fmt.Sprint(st.ICE.LocalCandidates)
		assert.Contains(t, local, "udp4 srflx 203.0.113.10:", "IPv4 server-reflexive candidate")
		assert.Contains(t, local, "udp6 srflx [2001:db8:1::2]:51820", "IPv6 server-reflexive candidate (the firewall translates nothing)")
		assert.Contains(t, local, "udp6 host [2001:db8:1::2]:51820", "IPv6 host candidate")
		assert.Equal(t, 2, strings.Count(local, " srflx "), "one server-reflexive candidate per family, not one per interface address: %v", st.ICE.LocalCandidates)

		before := a.Status()[0]
		eventuallyEcho(t, na, b.Address().Addr(), 7, 5*time.Second, "alpha to beta, direct")
		after := a.Status()[0]
		assert.Greater(t, after.TxDirect, before.TxDirect, "the echo went direct")
		assert.Equal(t, before.TxRelay, after.TxRelay, "once direct, nothing goes through the relay")
		noMapped(t, a)
		noMapped(t, b)
	})
}

// TestDualStackMeetsIPv4Only: a dual-stack node behind a symmetric NAT
// and an IPv4-only node behind a full-cone NAT (its socket falls back to
// udp4) go direct over IPv4, as the pair did before IPv6.
func TestDualStackMeetsIPv4Only(t *testing.T) {
	inVirtualTime(t, func(t *testing.T) {
		_, hosts := newDualWorld(t, dualSite{"symmetric", true}, dualSite{"full-cone", false})
		na, nb := &stockNetstack{}, &stockNetstack{}
		a := startNode(t, hosts[0], "alpha", na, exactICE)
		b := startNode(t, hosts[1], "beta", nb, exactICE)
		serveEcho(t, nb, 7)
		eventuallyEcho(t, na, b.Address().Addr(), 7, 20*time.Second, "alpha to beta")
		st := waitPath(t, a, node.PathDirect, 10*time.Second)
		assert.Equal(t, "203.0.113.11:51820", st.Endpoint, "beta's full-cone mapping")
		sb := waitPath(t, b, node.PathDirect, 10*time.Second)
		ep := netip.MustParseAddrPort(sb.Endpoint)
		assert.True(t, ep.Addr().Is4() && ep.Addr() == netip.MustParseAddr("203.0.113.10"), "beta reaches alpha's symmetric mapping: %v", ep)
		for _, c := range sb.ICE.LocalCandidates {
			assert.NotContains(t, c, "udp6", "beta's socket is IPv4 only")
		}
		noMapped(t, a)
		noMapped(t, b)
	})
}

// expectDirectDualStack is expectDirect with IPv6: two sites whose IPv6
// is routed untranslated through RFC 6092 filters go direct over it,
// whatever their IPv4 NATs (each side's checks to the other's host
// candidate open its own filter for the answers), even udp-blocked ones,
// whose firewall is IPv4's. family is the address family the direct path
// must use: 6 where only IPv6 can carry it, 4 where only IPv4 exists on
// both, 0 where both work (ICE nominates whichever pair succeeds first).
func expectDirectDualStack(a, b dualSite) (direct bool, family int) {
	v4 := expectDirect(a.nat, b.nat)
	switch {
	case a.ipv6 && b.ipv6 && v4:
		return true, 0
	case a.ipv6 && b.ipv6:
		return true, 6
	}
	return v4, 4
}

// TestPathMatrixDualStack is TestPathMatrix with IPv6: every pair of NAT
// profiles with both sites dual-stack, and each profile against an
// IPv4-only symmetric site, ends on the path expectDirectDualStack says,
// over the family it says (where only one can carry it).
func TestPathMatrixDualStack(t *testing.T) {
	profiles := nat.ProfileNames()
	type pair struct{ a, b dualSite }
	var pairs []pair
	for i, pa := range profiles {
		for _, pb := range profiles[i:] {
			pairs = append(pairs, pair{dualSite{pa, true}, dualSite{pb, true}})
		}
		pairs = append(pairs, pair{dualSite{pa, true}, dualSite{"symmetric", false}})
	}
	for _, p := range pairs {
		name := fmt.Sprintf("%s+%s", p.a.nat, p.b.nat)
		if !p.b.ipv6 {
			name += "-ipv4only"
		}
		t.Run(name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T) {
				_, hosts := newDualWorld(t, p.a, p.b)
				na, nb := &stockNetstack{}, &stockNetstack{}
				a := startNode(t, hosts[0], "alpha", na, exactICE)
				b := startNode(t, hosts[1], "beta", nb, exactICE)
				serveEcho(t, nb, 7)
				eventuallyEcho(t, na, b.Address().Addr(), 7, 20*time.Second, name)
				direct, family := expectDirectDualStack(p.a, p.b)
				var st node.PeerStatus
				if direct {
					st = waitPath(t, a, node.PathDirect, 8*time.Second)
					ep := netip.MustParseAddrPort(st.Endpoint)
					if family != 0 {
						assert.Equal(t, family == 6, ep.Addr().Is6(), "direct to %v", ep)
					}
				} else {
					require.Eventually(t, func() bool {
						s := a.Status()
						return len(s) == 1 && s[0].ICE.Err != ""
					}, 10*time.Second, 50*time.Millisecond, "ICE never gave up: %+v", a.Status())
					st = a.Status()[0]
					assert.Equal(t, node.PathRelay, st.Path, "%+v", st)
				}
				eventuallyEcho(t, na, b.Address().Addr(), 7, 10*time.Second, name+" on "+string(st.Path))
				noMapped(t, a)
				t.Logf("%s: %s %s", name, st.Path, st.Endpoint)
			})
		})
	}
}
