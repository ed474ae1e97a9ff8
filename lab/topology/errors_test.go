package topology

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// TestErrors: every problem of a file at once, each at its position, with
// what was expected.
func TestErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "dangling references and impossible values",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
  home:
    cidr: 192.168.1.0/24
    uplink: internt
    nat: symetric
  office:
    cidr: 10.0.0.0/24
    uplink: internet
    gateway: 10.0.1.1
  lab:
    cidr: 10.0.0.0/16
    uplink: office
  loop1: {cidr: 172.16.0.0/24, uplink: loop2}
  loop2: {cidr: 172.16.1.0/24, uplink: loop1}
  tiny: {cidr: 10.9.9.0/31}
  island: {cidr: 198.51.100.0/24, nat: full-cone}
hosts:
  server: {network: internet, addr: 203.0.113.100}
control: {host: srv}
relays:
  relay: {host: server, port: 443}
  relay2: {network: home}
stun:
  stun: {host: server, alternate: 203.0.113.101}
nodes:
  alice: {network: home, addr: 10.0.0.5}
  bob: {network: offce}
  carol: {host: server, count: 3}
  server: {network: internet}
  dave: {}
  eve: {network: office, addr: 10.0.0.1}
`,
			want: `14 problems:
t.yaml:5:13: networks.home.uplink: no network "internt"; did you mean "internet"?
t.yaml:6:10: networks.home.nat: unknown value "symetric"; did you mean "symmetric"? (one of: full-cone, restricted-cone, port-restricted-cone, symmetric, cgnat, udp-blocked, ipv6-firewall, nat64)
t.yaml:10:14: networks.office.gateway: 10.0.1.1 is not on network office; office is 10.0.0.0/24
t.yaml:13:13: networks.lab.uplink: lab-gw joins lab (10.0.0.0/16) and office (10.0.0.0/24), which overlap; renumber one of the networks
t.yaml:14:40: networks.loop1.uplink: uplinks form a loop: loop1 → loop2 → loop1; one network at the top has no uplink
t.yaml:16:16: networks.tiny.cidr: 10.9.9.0/31 leaves no room for hosts; use /30 or shorter
t.yaml:17:40: networks.island.nat: nat needs an uplink: it configures the gateway router between island and its uplink; add uplink: NETWORK (the network the gateway router joins this one to)
t.yaml:20:17: control.host: no host "srv"; hosts: server
t.yaml:25:35: stun.stun.alternate: 203.0.113.101 is not an address of host server; add it to host server's aliases
t.yaml:27:32: nodes.alice.addr: 10.0.0.5 is not on network home; home is 192.168.1.0/24
t.yaml:28:18: nodes.bob.network: no network "offce"; did you mean "office"?
t.yaml:29:32: nodes.carol.count: count needs a host per node, not host server; use network: NAME so each node gets a host of its own
t.yaml:30:3: nodes.server: name "server" is already the host declared at 19:3; networks, routers, hosts, services and nodes share one namespace
t.yaml:31:3: nodes.dave: node dave runs nowhere; add network: NAME (a host of its own) or host: NAME (a declared host)`,
		},
		{
			name: "typos in nested keys",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
  home:
    cidr: 192.168.1.0/24
    uplink: internet
    nat: {profile: symmetric, mapping: endpoint-independant, udp_timout: 30s, port_range: 5000-4000}
    link: {latncy: 10ms, loss: 2, rate: fast}
`,
			want: `6 problems:
t.yaml:6:40: networks.home.nat.mapping: unknown value "endpoint-independant"; did you mean "endpoint-independent"? (one of: endpoint-independent, address-dependent, address-and-port-dependent)
t.yaml:6:62: networks.home.nat: unknown key "udp_timout"; did you mean "udp_timeout"? (known keys: profile, mapping, filtering, ports, port_range, hairpin, udp_timeout, tcp_timeout, tcp_transitory_timeout, icmp_timeout, refresh, max_mappings, prefix64)
t.yaml:6:91: networks.home.nat.port_range: port range "5000-4000" is reversed; write 4000-5000
t.yaml:7:12: networks.home.link: unknown key "latncy"; did you mean "latency"? (known keys: latency, jitter, loss, duplicate, reorder, reorder_delay, rate, queue, mtu, down, egress, ingress)
t.yaml:7:32: networks.home.link.loss: want a fraction from 0 to 1 or a percentage such as 1%, got "2" (outside 0-100%)
t.yaml:7:41: networks.home.link.rate: want a bandwidth such as 100Mbit, 1.5Gbit or 500kbit, got "fast"`,
		},
		{
			name: "ports and addresses taken",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
  lan: {cidr: 10.0.0.0/30, uplink: internet, nat: full-cone}
hosts:
  server: {network: internet, addr: 203.0.113.100}
  twin: {network: internet, addr: 203.0.113.100}
  edge: {network: internet, addr: 203.0.113.255}
control: {host: server, port: 443}
relays:
  relay: {host: server, port: 443}
stun:
  stun: {host: server, alternate: 203.0.113.100}
nodes:
  a: {network: lan}
  b: {network: lan}
`,
			want: `5 problems:
t.yaml:6:35: hosts.twin.addr: 203.0.113.100 on internet is already host server's; leave addr out to get the next free one
t.yaml:7:35: hosts.edge.addr: 203.0.113.255 is internet's network or broadcast address; use 203.0.113.1 to 203.0.113.254
t.yaml:10:31: relays.relay.port: tcp port 443 on host server is already control's; give one of them another port
t.yaml:12:35: stun.stun.alternate: the alternate address must differ from the primary 203.0.113.100
t.yaml:15:3: nodes.b: network lan has no free address left for node b; widen lan's cidr 10.0.0.0/30`,
		},
		{
			name: "netns hosts and gvisor sandboxes",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
  lan: {cidr: 10.0.0.0/24, uplink: internet, nat: full-cone}
hosts:
  server: {network: internet}
  two: {kind: netns, interfaces: [{network: internet}, {network: lan}]}
  routed: {kind: netns, network: lan, routes: [{to: 198.51.100.0/24, via: 10.0.0.1}]}
  pod: {kind: netns, network: lan}
control: {host: server}
nodes:
  a: {host: server, sandbox: gvisor}
  b: {host: pod, sandbox: gvisor}
  c: {host: pod, sandbox: gvisor}
  d: {network: lan, roams: [internet], sandbox: {mode: gvisor, socks5: 127.0.0.1:1080, forwards: ["80"]}}
`,
			want: `8 problems:
t.yaml:6:34: hosts.two.interfaces: a netns host has one interface (its TUN into the fabric), not 2; use network: NAME
t.yaml:7:47: hosts.routed.routes: a netns host has a default route only; give it a gateway instead
t.yaml:11:13: nodes.a.host: a gvisor sandbox runs in a kernel network namespace, and host server is in-process; set kind: netns on host server, or give the node network: NAME (a namespace of its own)
t.yaml:13:3: nodes.c.listen_port: udp port 51820 on host pod is already node b's; give one of them another port
t.yaml:13:13: nodes.c.host: host pod already runs gvisor sandbox b (each creates wg0 there); give each gvisor sandbox a host of its own
t.yaml:14:28: nodes.d.roams: a gvisor sandbox cannot roam: its pod is a kernel namespace on one network; use a regular node or a pod sandbox to roam
t.yaml:14:72: nodes.d.sandbox.socks5: gvisor mode has no SOCKS5 proxy; omit it: the agent's sockets route into wg0 by themselves
t.yaml:14:98: nodes.d.sandbox.forwards: gvisor mode has no inbound forwards; omit them: peers reach the agent's listeners on its overlay address`,
		},
		{
			name: "services out of reach",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
  office: {cidr: 10.0.0.0/24, uplink: internet, nat: symmetric}
  island: {cidr: 172.16.0.0/24}
control: {network: home}
relays:
  relay: {network: island}
nodes:
  desk: {network: office, count: 2}
`,
			want: `2 problems:
t.yaml:10:3: nodes.desk: node desk-1 on office cannot reach control: home is behind home-nat, and a NAT lets no connection in; put services on the top network (the internet) or on the node's side of every NAT
t.yaml:10:3: nodes.desk: node desk-1 on office cannot reach relay: office and island have no uplink in common; put services on the top network (the internet) or on the node's side of every NAT`,
		},
		{
			name: "no control, placement mistakes",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
hosts:
  both: {network: internet, interfaces: [{network: internet}]}
  none: {}
  server: {network: internet}
routers:
  lonely: {interfaces: [{network: internet}], uplink: nowhere, nat: full-cone}
nodes:
  a: {network: internet, host: server}
  b: {network: internet, count: 2, addr: 203.0.113.9}
  c: {host: server, link: {latency: 1ms}}
  d: {network: internet, sandbox: {mode: pod, socks5: localhost:1080, forwards: ["x=1", "80=localhost:80"]}}
  e: {network: internet, sandbox: {socks5: off}, ice: {retry_min: 10s, retry_max: 1s}}
`,
			want: `13 problems:
t.yaml:4:41: hosts.both.interfaces: both network and interfaces; use network (one interface) or interfaces (several), not both
t.yaml:5:3: hosts.none: host none is attached to no network; add network: NAME, or interfaces: [{network: NAME}]
t.yaml:8:24: routers.lonely.interfaces: a router needs at least two interfaces, got 1
t.yaml:8:55: routers.lonely.uplink: router lonely has no interface on "nowhere"
t.yaml:10:3: nodes: nodes need a control service to register with; add control: {host: NAME} or control: {network: NAME}
t.yaml:10:16: nodes.a.network: both host and network; host runs it on a declared host; network gives it a host of its own
t.yaml:11:42: nodes.b.addr: each of the 2 nodes needs an address of its own; omit addr: each node gets the next free address
t.yaml:12:3: nodes.c: addr, aliases and link belong to the host, not a node on it; set addr, aliases and link on the host
t.yaml:13:55: nodes.d.sandbox.socks5: bad listen address "localhost:1080"; write ADDRESS:PORT, e.g. 127.0.0.1:1080, or "off"
t.yaml:13:82: nodes.d.sandbox.forwards[1]: bad port in "x=1"; write PORT=HOST:PORT or PORT
t.yaml:13:89: nodes.d.sandbox.forwards[2]: bad target in "80=localhost:80"; write PORT=HOST:PORT or PORT
t.yaml:14:36: nodes.e.sandbox: missing required key "mode"; mode: pod: the overlay on an in-process netstack, reached through SOCKS5/HTTP proxies
t.yaml:14:56: nodes.e.ice: retry_min 10s is longer than retry_max 1s`,
		},
		{
			name: "firewall",
			in: `networks:
  internet: {cidr: 203.0.113.0/24}
  corp:
    cidr: 10.0.0.0/24
    uplink: internet
    firewall:
      default: block
      rules:
        - {action: deny, proto: icmp, ports: [1-2]}
        - {proto: udp}
        - {action: allow, ports: [0, 90-80]}
`,
			want: `5 problems:
t.yaml:7:16: networks.corp.firewall.default: unknown value "block"; one of: allow, deny
t.yaml:9:46: networks.corp.firewall.rules[1].ports: icmp has no ports; use proto tcp, udp or any
t.yaml:10:12: networks.corp.firewall.rules[2]: missing required key "action"; action: What the rule does
t.yaml:11:35: networks.corp.firewall.rules[3].ports[1]: want a port (1-65535) or a range LO-HI such as 8000-8999, got "0"
t.yaml:11:38: networks.corp.firewall.rules[3].ports[2]: port range "90-80" is reversed; write 80-90`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p, err := Parse("t.yaml", []byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, strictyaml.ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

// TestMistakes: the slips people make writing a topology by hand, each
// reported at the offending key or value with what was wrong.
func TestMistakes(t *testing.T) {
	const base = `networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: full-cone}
control: {network: internet}
`
	tests := []struct {
		name, in, want string
	}{
		{
			name: "empty file",
			in:   "",
			want: `t.yaml:1:1: missing required key "networks"; networks: Network segments by name`,
		},
		{
			name: "only comments",
			in:   "# networks:\n#   internet: {cidr: 203.0.113.0/24}\n",
			want: `t.yaml:1:1: missing required key "networks"; networks: Network segments by name`,
		},
		{
			name: "misspelled key",
			in:   base + "nodes:\n  a: {network: home}\n  b: {netwrok: home}\n",
			want: `t.yaml:7:3: nodes.b: node b runs nowhere; add network: NAME (a host of its own) or host: NAME (a declared host)
t.yaml:7:7: nodes.b: unknown key "netwrok"; did you mean "network"? (known keys: host, network, addr, aliases, link, count, roams, sandbox, start, listen_port, relay_transport, ice, mtu)`,
		},
		{
			name: "duplicate node name",
			in:   base + "nodes:\n  a: {network: home}\n  a: {network: internet}\n",
			want: `t.yaml:7:3: nodes.a: name "a" is already declared at 6:3; give each its own name, or remove one`,
		},
		{
			name: "duplicate network name, rest still checked",
			in:   "networks:\n  internet: {cidr: 203.0.113.0/24}\n  home: {cidr: 192.168.1.0/24, uplink: internet}\n  internet: {cidr: 198.51.100.0/24}\ncontrol: {network: internet}\nnodes:\n  a: {network: hom}\n",
			want: `t.yaml:4:3: networks.internet: name "internet" is already declared at 2:3; give each its own name, or remove one
t.yaml:7:16: nodes.a.network: no network "hom"; did you mean "home"?`,
		},
		{
			name: "duplicate key in a node",
			in:   base + "nodes:\n  a:\n    network: home\n    network: internet\n",
			want: `t.yaml:8:5: nodes.a.network: duplicate key "network", first at 7:5; remove one of them`,
		},
		{
			name: "node and host share a name",
			in:   base + "nodes:\n  a: {network: home}\nhosts:\n  a: {network: internet}\n",
			want: `t.yaml:6:3: nodes.a: name "a" is already the host declared at 8:3; networks, routers, hosts, services and nodes share one namespace`,
		},
		{
			name: "count zero",
			in:   base + "nodes:\n  a: {network: home, count: 0}\n",
			want: `t.yaml:6:29: nodes.a.count: want an integer from 1 to 1000, got 0`,
		},
		{
			name: "count negative",
			in:   base + "nodes:\n  a: {network: home, count: -2}\n",
			want: `t.yaml:6:29: nodes.a.count: want an integer from 1 to 1000, got -2`,
		},
		{
			name: "count a word",
			in:   base + "nodes:\n  a: {network: home, count: two}\n",
			want: `t.yaml:6:29: nodes.a.count: want an integer, got "two"`,
		},
		{
			name: "negative latency",
			in:   base + "nodes:\n  a: {network: home}\nhosts:\n  h: {network: home, link: {latency: -5ms}}\n",
			want: `t.yaml:8:38: hosts.h.link.latency: want a duration such as 500ms, 3s or 1m30s, got the negative -5ms`,
		},
		{
			name: "duration without unit",
			in:   base + "hosts:\n  h: {network: home, link: {latency: 10}}\n",
			want: `t.yaml:6:38: hosts.h.link.latency: want a duration such as 500ms, 3s or 1m30s, got number 10; add a unit: 10s or 10ms`,
		},
		{
			name: "string where a list is wanted",
			in:   base + "nodes:\n  a: {network: home, roams: internet}\n",
			want: `t.yaml:6:29: nodes.a.roams: want a list, got "internet"; for one item write [internet]`,
		},
		{
			name: "unknown NAT profile",
			in:   "networks:\n  internet: {cidr: 203.0.113.0/24}\n  home: {cidr: 192.168.1.0/24, uplink: internet, nat: {profile: fullcone}}\n",
			want: `t.yaml:3:65: networks.home.nat.profile: unknown value "fullcone"; did you mean "full-cone"? (one of: full-cone, restricted-cone, port-restricted-cone, symmetric, cgnat, udp-blocked, ipv6-firewall, nat64)`,
		},
		{
			name: "port zero",
			in:   base + "nodes:\n  a: {network: home, listen_port: 0}\n",
			want: `t.yaml:6:35: nodes.a.listen_port: want an integer from 1 to 65535, got 0`,
		},
		{
			name: "tab indentation",
			in:   base + "nodes:\n\ta: {network: home}\n",
			want: `t.yaml:6:1: yaml: found character '\t' that cannot start any token; YAML indents with spaces, never tabs`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p, err := Parse("t.yaml", []byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, strictyaml.ErrInvalid)
			var es *strictyaml.Errors
			require.ErrorAs(t, err, &es)
			lines := strings.SplitN(err.Error(), "\n", 2)
			require.Len(t, lines, 2)
			assert.Equal(t, tt.want, lines[1])
		})
	}
}

// TestLoadNotAFile: a path that is no readable file is refused naming it,
// once.
func TestLoadNotAFile(t *testing.T) {
	dir := t.TempDir()
	_, _, err := Load(dir)
	assert.EqualError(t, err, "read "+dir+": is a directory, not a YAML file")

	gone := filepath.Join(dir, "gone.yaml")
	_, _, err = Load(gone)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.EqualError(t, err, "open "+gone+": no such file or directory")
}
