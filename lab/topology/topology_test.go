package topology

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/nat"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func parse(t *testing.T, src string) (*File, *Plan) {
	t.Helper()
	f, p, err := Parse("t.yaml", []byte(src))
	require.NoError(t, err)
	return f, p
}

const world = `
networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone, public: 203.0.113.10}
  carrier: {cidr: 100.64.0.0/10, uplink: internet, nat: cgnat}
  flat: {cidr: 192.168.1.0/24, uplink: carrier, nat: {profile: full-cone, udp_timeout: 30s}}
  dmz: {cidr: 198.51.100.0/24, uplink: internet}
hosts:
  server: {network: internet, addr: 203.0.113.100, aliases: [203.0.113.101]}
control: {host: server, addr: 203.0.113.101, port: 443}
relays:
  relay: {host: server}
stun:
  stun: {host: server, alternate: 203.0.113.101}
defaults:
  ice: {attempt_timeout: 2s}
  link: {latency: 5ms}
nodes:
  alice: {network: home, ice: {retry_min: 1s}}
  peer: {network: flat, count: 3, relay_transport: quic}
  agent: {network: dmz, sandbox: pod, start: false, link: {loss: 1%, egress: {latency: 20ms}}}
`

func TestPlan(t *testing.T) {
	f, p := parse(t, world)
	assert.Equal(t, "t", f.Name, "the file's base name by default")
	assert.Equal(t, uint64(1), p.Seed)
	assert.Equal(t, DefaultToken, p.Token)

	home := p.Router("home-nat")
	require.NotNil(t, home)
	assert.Equal(t, "port-restricted-cone", home.Profile)
	assert.Equal(t, "home", home.For)
	assert.Equal(t, []fabric.InterfaceConfig{
		{Name: "lan", Network: "home", Addr: netip.MustParseAddr("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: netip.MustParseAddr("203.0.113.10")},
	}, home.Config.Interfaces)
	assert.False(t, home.Config.Gateway.IsValid(), "the internet has no gateway")

	carrier := p.Router("carrier-nat")
	assert.Equal(t, netip.MustParseAddr("203.0.113.1"), carrier.Config.Interfaces[1].Addr, "the first free internet address")
	flat := p.Router("flat-nat")
	assert.Equal(t, "full-cone*", flat.Profile, "a profile with knobs changed")
	assert.Equal(t, 30*time.Second, flat.Config.NAT.UDPTimeout)
	assert.Equal(t, netip.MustParseAddr("100.64.0.2"), flat.Config.Interfaces[1].Addr)
	assert.Equal(t, netip.MustParseAddr("100.64.0.1"), flat.Config.Gateway, "default route to the carrier's gateway")

	dmz := p.Router("dmz-gw")
	require.NotNil(t, dmz)
	assert.Nil(t, dmz.Config.NAT)
	assert.Equal(t, []fabric.Route{{Dst: netip.MustParsePrefix("198.51.100.0/24"), Via: netip.MustParseAddr("203.0.113.2")}},
		p.Host("server").Config.Routes, "internet hosts learn the route to a routed (unNATed) network")
	assert.Equal(t, p.Host("server").Config.Routes, p.Router("home-nat").Config.Routes, "so do the routers there")
	assert.Empty(t, p.Router("flat-nat").Config.Routes, "beyond a NAT, nobody needs it")

	assert.Equal(t, netip.MustParseAddrPort("203.0.113.101:443"), p.Control.Addr)
	assert.Equal(t, []PlanService{{Name: "relay", Host: "server", Addr: netip.MustParseAddrPort("203.0.113.100:443")}}, p.Relays)
	assert.Equal(t, netip.MustParseAddrPort("203.0.113.101:3479"), p.STUN[0].Alternate)

	require.Len(t, p.Nodes, 5)
	alice := p.Node("alice")
	assert.Equal(t, PlanNode{Name: "alice", Group: "alice", Host: "alice", Network: "home", Addr: netip.MustParseAddr("192.168.1.2"),
		Start: true, ListenPort: DefaultNodePort, RelayTransport: "tcp",
		ICE: ICESettings{AttemptTimeout: 2 * time.Second, RetryMin: time.Second}, NATs: []string{"home-nat"}}, *alice)
	assert.Equal(t, "port-restricted-cone", p.NATLabel(alice))
	peers := p.Group("peer")
	require.Len(t, peers, 3)
	assert.Equal(t, "peer-1", peers[0].Name)
	assert.Equal(t, "quic", peers[2].RelayTransport)
	assert.Equal(t, netip.MustParseAddr("192.168.1.4"), peers[2].Addr)
	assert.Equal(t, "full-cone* behind cgnat", p.NATLabel(peers[0]))
	agent := p.Node("agent")
	assert.False(t, agent.Start)
	assert.Equal(t, &Sandbox{Mode: "pod", SOCKS5: "127.0.0.1:1080"}, agent.Sandbox)
	assert.Equal(t, "none", p.NATLabel(agent))

	ah := p.Host("alice").Config
	assert.Equal(t, netip.MustParseAddr("192.168.1.1"), ah.Gateway)
	assert.Equal(t, 5*time.Millisecond, ah.Interfaces[0].Egress.Latency, "defaults.link")
	gh := p.Host("agent").Config.Interfaces[0]
	assert.Equal(t, 20*time.Millisecond, gh.Egress.Latency)
	assert.Zero(t, gh.Egress.Loss, "egress replaces the shared impairments")
	assert.Equal(t, 0.01, gh.Ingress.Loss)
}

// TestAddTo builds a plan on the fabric: every node host reaches the
// server through its NATs, and the routed network is reachable from the
// internet.
func TestAddTo(t *testing.T) {
	_, p := parse(t, world)
	f, err := fabric.New(fabric.Config{Seed: p.Seed})
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, p.AddTo(f))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, n := range p.Nodes {
		_, err := f.Host(n.Host).Ping(ctx, netip.MustParseAddr("203.0.113.100"))
		assert.NoError(t, err, "%s pings the server", n.Name)
	}
	_, err = f.Host("server").Ping(ctx, p.Node("agent").Addr)
	assert.NoError(t, err, "the server pings into the routed dmz")
	_, err = f.Host("server").Ping(ctx, p.Node("alice").Addr)
	assert.Error(t, err, "but not behind a NAT")
}

// TestNetnsHosts: a gvisor sandbox gets a namespace of its own, declared
// netns hosts become kernel hosts, and building them needs root.
func TestNetnsHosts(t *testing.T) {
	_, p := parse(t, `networks:
  internet: {cidr: 203.0.113.0/24}
  lan: {cidr: 10.0.0.0/24, uplink: internet, nat: full-cone}
hosts:
  server: {network: internet}
  box: {network: lan, kind: netns}
control: {host: server}
nodes:
  agent: {network: lan, sandbox: gvisor}
  web: {network: internet}
  kern: {host: box}
`)
	kinds := map[string]string{}
	for _, h := range p.Hosts {
		kinds[h.Config.Name] = h.Kind
	}
	assert.Equal(t, map[string]string{"server": "inprocess", "box": "netns", "agent": "netns", "web": "inprocess"}, kinds)
	assert.True(t, p.NeedsRoot())
	assert.Equal(t, "off", p.Node("agent").Sandbox.SOCKS5, "gvisor mode has no proxy")
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	defer f.Close()
	err = p.AddTo(f)
	if os.Geteuid() != 0 {
		require.ErrorContains(t, err, "needs root")
		return
	}
	require.NoError(t, err)
	require.NotNil(t, f.KernelHost("agent"))
	require.NotNil(t, f.KernelHost("box"))
	assert.Nil(t, f.Host("box"))
	ifs, err := f.KernelHost("box").Interfaces()
	require.NoError(t, err)
	assert.Contains(t, ifs[len(ifs)-1].Addrs, netip.PrefixFrom(p.Node("kern").Addr, 24))
}

func TestProfilesMatchNAT(t *testing.T) {
	field, _ := reflect.TypeFor[NAT]().FieldByName("Profile")
	assert.Equal(t, strings.Join(append(nat.ProfileNames(), firewall6Profile, nat64Profile), "|"), field.Tag.Get("enum"), "the format lists every NAT profile, the IPv6 firewall and NAT64")
}

func TestEgressPolicyPath(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte("default: deny\nrules:\n  - allow: peer:*\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("rules: [{alow: x}]\n"), 0o644))
	topo := filepath.Join(dir, "t.yaml")
	require.NoError(t, os.WriteFile(topo, []byte(`networks: {internet: {cidr: 203.0.113.0/24}}
control: {network: internet}
nodes:
  good: {network: internet, sandbox: {mode: pod, egress_policy: agent.yaml}}
  bad: {network: internet, sandbox: {mode: pod, egress_policy: bad.yaml}}
  gone: {network: internet, sandbox: {mode: pod, egress_policy: gone.yaml}}
`), 0o644))
	_, _, err := Load(topo)
	require.Error(t, err)
	bad, gone := filepath.Join(dir, "bad.yaml"), filepath.Join(dir, "gone.yaml")
	assert.Equal(t, "4 problems:\n"+
		topo+":5:64: nodes.bad.sandbox.egress_policy: the egress policy has 2 problem(s), listed under its own name\n"+
		topo+":6:65: nodes.gone.sandbox.egress_policy: stat "+gone+": no such file or directory; the path is relative to the topology file\n"+
		bad+":1:10: rule 1: unknown key \"alow\"; did you mean \"allow\"? want allow or deny, and optionally ports and proto\n"+
		bad+":1:10: rule 1: want allow: or deny: naming a destination", err.Error())
}
