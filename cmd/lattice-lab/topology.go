package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/natcheck"
)

// topology declares a lab: the networks, routers and hosts to build, which
// host serves the tests and which hosts are clients. It is what a topology
// file will describe once run accepts one.
type builtinTopology struct {
	networks []fabric.NetworkConfig
	routers  []routerSpec
	hosts    []fabric.HostConfig
	// server is the public host that runs the test services.
	server string
	// probe are the server's endpoints for NAT behaviour discovery.
	probe natcheck.Endpoints
	// clients are the hosts that exercise the server, each behind its NATs.
	clients []client
}

// routerSpec is a router with its NAT profile.
type routerSpec struct {
	cfg fabric.RouterConfig
	// profile names cfg.NAT's nat.Profile, for people reading the output.
	profile string
}

// client is a host and the NAT routers between it and the internet,
// innermost first.
type client struct {
	host string
	nats []string
}

var (
	internetPrefix = netip.MustParsePrefix("203.0.113.0/24") // TEST-NET-3 (RFC 5737)
	serverAddr     = netip.MustParseAddr("203.0.113.100")
	serverAltAddr  = netip.MustParseAddr("203.0.113.101")
)

// Well-known ports of the services run on the server.
const (
	echoPort     = 7    // RFC 862 echo
	sinkPort     = 9000 // TCP transfer sink
	probePort    = 3478 // STUN's port, as RFC 5780 discovery uses
	probeAltPort = 3479
)

// defaultTopology is the built-in topology: a public server and three
// clients behind the NATs peers meet most, including a double NAT.
func defaultTopology() (*builtinTopology, error) {
	ip := netip.MustParseAddr
	t := &builtinTopology{
		networks: []fabric.NetworkConfig{
			{Name: "internet", Prefix: internetPrefix},
			{Name: "home", Prefix: netip.MustParsePrefix("192.168.1.0/24")},
			{Name: "office", Prefix: netip.MustParsePrefix("10.0.0.0/24")},
			// A carrier's shared address space (RFC 6598) and a home LAN
			// behind it that reuses home's prefix, as real homes do.
			{Name: "carrier", Prefix: netip.MustParsePrefix("100.64.0.0/10")},
			{Name: "flat", Prefix: netip.MustParsePrefix("192.168.1.0/24")},
		},
		hosts: []fabric.HostConfig{
			{Name: "server", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: serverAddr, Aliases: []netip.Addr{serverAltAddr}}}},
			{Name: "laptop", Interfaces: []fabric.InterfaceConfig{{Network: "home", Addr: ip("192.168.1.2")}}, Gateway: ip("192.168.1.1")},
			{Name: "desktop", Interfaces: []fabric.InterfaceConfig{{Network: "office", Addr: ip("10.0.0.2")}}, Gateway: ip("10.0.0.1")},
			{Name: "tablet", Interfaces: []fabric.InterfaceConfig{{Network: "flat", Addr: ip("192.168.1.2")}}, Gateway: ip("192.168.1.1")},
		},
		server: "server",
		probe:  natcheck.Endpoints{Primary: serverAddr, Alternate: serverAltAddr, Port: probePort, AltPort: probeAltPort},
		clients: []client{
			{host: "laptop", nats: []string{"home-nat"}},
			{host: "desktop", nats: []string{"office-nat"}},
			{host: "tablet", nats: []string{"flat-nat", "carrier-nat"}},
		},
	}
	natRouter := func(name, profile, lanNet string, lan netip.Addr, wanNet string, wan, gw netip.Addr) error {
		cfg, err := nat.Profile(profile)
		if err != nil {
			return fmt.Errorf("router %s: %w", name, err)
		}
		t.routers = append(t.routers, routerSpec{profile: profile, cfg: fabric.RouterConfig{
			Name: name,
			Interfaces: []fabric.InterfaceConfig{
				{Name: "lan", Network: lanNet, Addr: lan},
				{Name: "wan", Network: wanNet, Addr: wan},
			},
			Gateway: gw,
			Uplink:  "wan",
			NAT:     &cfg,
		}})
		return nil
	}
	for _, err := range []error{
		natRouter("home-nat", "port-restricted-cone", "home", ip("192.168.1.1"), "internet", ip("203.0.113.10"), netip.Addr{}),
		natRouter("office-nat", "symmetric", "office", ip("10.0.0.1"), "internet", ip("203.0.113.11"), netip.Addr{}),
		natRouter("carrier-nat", "cgnat", "carrier", ip("100.64.0.1"), "internet", ip("203.0.113.12"), netip.Addr{}),
		natRouter("flat-nat", "full-cone", "flat", ip("192.168.1.1"), "carrier", ip("100.64.0.2"), ip("100.64.0.1")),
	} {
		if err != nil {
			return nil, fmt.Errorf("default topology: %w", err)
		}
	}
	return t, nil
}

// addTo builds the topology on f: networks, then routers, then hosts.
func (t *builtinTopology) addTo(f *fabric.Fabric) error {
	for _, nc := range t.networks {
		if _, err := f.AddNetwork(nc); err != nil {
			return fmt.Errorf("add network %s: %w", nc.Name, err)
		}
	}
	for _, r := range t.routers {
		if _, err := f.AddRouter(r.cfg); err != nil {
			return fmt.Errorf("add router %s: %w", r.cfg.Name, err)
		}
	}
	for _, hc := range t.hosts {
		if _, err := f.AddHost(hc); err != nil {
			return fmt.Errorf("add host %s: %w", hc.Name, err)
		}
	}
	return nil
}

func (t *builtinTopology) router(name string) routerSpec {
	for _, r := range t.routers {
		if r.cfg.Name == name {
			return r
		}
	}
	panic(fmt.Sprintf("topology has no router %q", name)) // unreachable: clients name declared routers
}

// uplinkAddr is the address of the router's NAT uplink: its public address.
func (r routerSpec) uplinkAddr() netip.Addr {
	for _, ifc := range r.cfg.Interfaces {
		if ifc.Name == r.cfg.Uplink {
			return ifc.Addr
		}
	}
	return netip.Addr{}
}

// publicAddr is the address the internet sees c's traffic come from: the
// outermost NAT's.
func (t *builtinTopology) publicAddr(c client) netip.Addr {
	return t.router(c.nats[len(c.nats)-1]).uplinkAddr()
}

// natLabel names c's NATs for the output: "home-nat", or "flat-nat behind
// carrier-nat" for a double NAT.
func (c client) natLabel() string { return strings.Join(c.nats, " behind ") }

// expected returns the mapping and filtering c's chain of NATs shows from
// outside. Behaviours are ordered from least to most restrictive, and a chain
// is as restrictive as its most restrictive member: a packet must pass every
// filter on its way in, and a new outer mapping for some destination means a
// new external endpoint however the inner NAT mapped it.
func (t *builtinTopology) expected(c client) (nat.Mapping, nat.Filtering) {
	var m nat.Mapping
	var f nat.Filtering
	for _, name := range c.nats {
		cfg := t.router(name).cfg.NAT
		m = max(m, cfg.Mapping)
		f = max(f, cfg.Filtering)
	}
	return m, f
}

// describe lists, one line each, the server and every client's path to the
// internet.
func (t *builtinTopology) describe() []string {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, hc := range t.hosts {
		if hc.Name == t.server {
			addrs := []string{hc.Interfaces[0].Addr.String()}
			for _, a := range hc.Interfaces[0].Aliases {
				addrs = append(addrs, a.String())
			}
			where := hc.Interfaces[0].Network
			for _, nc := range t.networks {
				if nc.Name == where {
					where += " " + nc.Prefix.String()
				}
			}
			fmt.Fprintf(tw, "%s\t%s\ton %s\n", hc.Name, strings.Join(addrs, ", "), where)
		}
	}
	for _, c := range t.clients {
		var addr string
		for _, hc := range t.hosts {
			if hc.Name == c.host {
				addr = hc.Interfaces[0].Addr.String()
			}
		}
		path := []string{}
		for _, name := range c.nats {
			r := t.router(name)
			path = append(path, fmt.Sprintf("%s %v (%s)", name, r.uplinkAddr(), r.profile))
		}
		fmt.Fprintf(tw, "%s\t%s\t→ %s\n", c.host, addr, strings.Join(path, " → "))
	}
	_ = tw.Flush() // writes to a bytes.Buffer cannot fail
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}
