// Package labtest builds the topology most Lattice tests run on: an
// "internet" segment (203.0.113.0/24) with a public server host
// (203.0.113.100, and 203.0.113.101 for services that need a second
// address), and NATed sites, each a home-style 192.168.1.0/24 LAN with one
// host at 192.168.1.2 behind a router whose uplink is 203.0.113.(10+i).
package labtest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

// Addresses of the standard topology.
var (
	Internet  = netip.MustParsePrefix("203.0.113.0/24")
	LAN       = netip.MustParsePrefix("192.168.1.0/24")
	ServerIP  = netip.MustParseAddr("203.0.113.100")
	ServerAlt = netip.MustParseAddr("203.0.113.101")
	Gateway   = netip.MustParseAddr("192.168.1.1")
	HostIP    = netip.MustParseAddr("192.168.1.2")
)

// World is the standard topology. It is closed when the test ends.
type World struct {
	Fabric *fabric.Fabric
	Server *fabric.Host
	sites  int
}

// New builds the internet and the server host.
func New(t testing.TB, cfg fabric.Config) *World {
	t.Helper()
	f, err := fabric.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: Internet})
	require.NoError(t, err)
	server, err := f.AddHost(fabric.HostConfig{Name: "server", Interfaces: []fabric.InterfaceConfig{
		{Network: "internet", Addr: ServerIP, Aliases: []netip.Addr{ServerAlt}}}})
	require.NoError(t, err)
	return &World{Fabric: f, Server: server}
}

// Site is a LAN behind a NAT router with one host.
type Site struct {
	Host   *fabric.Host
	Router *fabric.Router
	// Public is the router's uplink address.
	Public netip.Addr
}

// Site adds a site whose router runs the named NAT profile; edit, if
// given, adjusts the profile first (e.g. to open a firewall port).
func (w *World) Site(t testing.TB, profile string, edit ...func(*nat.Config)) *Site {
	t.Helper()
	i := w.sites
	w.sites++
	lan := fmt.Sprintf("lan%d", i)
	_, err := w.Fabric.AddNetwork(fabric.NetworkConfig{Name: lan, Prefix: LAN})
	require.NoError(t, err)
	cfg, err := nat.Profile(profile)
	require.NoError(t, err)
	for _, e := range edit {
		e(&cfg)
	}
	public := netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)})
	r, err := w.Fabric.AddRouter(fabric.RouterConfig{Name: "nat" + lan, Uplink: "wan", NAT: &cfg, Interfaces: []fabric.InterfaceConfig{
		{Name: "lan", Network: lan, Addr: Gateway},
		{Name: "wan", Network: "internet", Addr: public},
	}})
	require.NoError(t, err)
	h, err := w.Fabric.AddHost(fabric.HostConfig{Name: "host" + lan, Gateway: Gateway,
		Interfaces: []fabric.InterfaceConfig{{Network: lan, Addr: HostIP}}})
	require.NoError(t, err)
	return &Site{Host: h, Router: r, Public: public}
}
