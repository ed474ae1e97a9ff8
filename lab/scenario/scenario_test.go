package scenario

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
)

const inlineWorld = `topology:
  networks:
    internet: {cidr: 203.0.113.0/24}
    home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone}
    office: {cidr: 10.0.0.0/24, uplink: internet, nat: symmetric}
    cafe: {cidr: 172.16.0.0/24, uplink: internet, nat: full-cone}
  hosts:
    server: {network: internet, addr: 203.0.113.100, aliases: [203.0.113.101]}
  control: {host: server}
  relays: {relay: {host: server}}
  stun: {stun: {host: server, alternate: 203.0.113.101}}
  nodes:
    alice: {network: home, roams: [cafe]}
    bob: {network: office}
    carol: {network: internet, start: false}
    agent: {network: home, sandbox: pod}
    peer: {network: office, count: 2}
`

func TestParseGood(t *testing.T) {
	f, err := Parse("s.yaml", []byte(inlineWorld+`steps:
  - wait_path: {from: alice, to: bob, path: relay, within: 5s}
  - transfer: {from: alice, to: bob, bytes: 1MiB}
    background: bulk
  - move: {node: alice, to: cafe}
  - start: {node: carol}
  - join: bulk
  - stop: {service: relay}
  - link_down: home
  - link_up: alice
  - impair: {link: server/eth0, latency: 10ms}
  - block_udp: {network: office}
  - unblock_udp: {router: office-nat}
  - nat_reboot: {network: home}
  - advance_clock: 5m
  - blackhole_direct: {between: [alice, carol]}
  - heal_direct: {between: [carol, alice]}
  - sleep: 1s
  - discover_nat: {node: bob}
  - socks5_fetch: {node: agent, url: "http://bob/"}
  - stop: {node: peer}
  - full_mesh: {}
`), Options{})
	require.NoError(t, err)
	assert.Equal(t, "s", f.Name)
	require.NotNil(t, f.Plan())
	assert.Equal(t, "s", f.Plan().Name, "an inline topology takes the scenario's name")
	require.Len(t, f.Steps, 20)
	assert.Equal(t, "bulk", f.Steps[1].Background)
	assert.Equal(t, 5*time.Minute, f.Steps[12].AdvanceClk.By)
	assert.Equal(t, time.Second, time.Duration(*f.Steps[15].Sleep))
	assert.Equal(t, 10*time.Millisecond, f.Steps[8].Impair.Set.Latency)
	name, _ := f.Steps[6].Action()
	assert.Equal(t, "link_down", name)
	assert.Equal(t, "cafe", f.Plan().Node("alice").Roams[0].Network)
}

func TestParseTopologyFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "topologies"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scenarios"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "topologies", "t.yaml"), []byte(
		"networks: {internet: {cidr: 203.0.113.0/24}}\ncontrol: {network: internet}\nnodes: {a: {network: internet}, b: {network: internt}}\n"), 0o644))
	s := filepath.Join(dir, "scenarios", "s.yaml")
	require.NoError(t, os.WriteFile(s, []byte("topology: ../topologies/t.yaml\nsteps: [{ping: {from: a, to: c}}]\n"), 0o644))
	_, err := Load(s)
	require.Error(t, err)
	assert.Equal(t, "1 problem:\n"+filepath.Join(dir, "topologies", "t.yaml")+`:3:46: nodes.b.network: no network "internt"; did you mean "internet"?`,
		err.Error(), "the topology's problems, under its own name; the steps are not checked against a broken plan")

	require.NoError(t, os.WriteFile(s, []byte("topology: ../topologies/gone.yaml\nsteps: [{sleep: 1s}]\n"), 0o644))
	_, err = Load(s)
	assert.Equal(t, "1 problem:\n"+s+":1:11: topology: open "+filepath.Join(dir, "topologies", "gone.yaml")+": no such file or directory; the path is relative to the scenario file", err.Error())
}

// errorTests are scenarios with problems and every problem reported.
var errorTests = []struct{ name, steps, want string }{
	{
		name: "steps naming nothing",
		steps: `steps:
  - wait_path: {from: alise, to: bob, path: direct}
  - ping: {from: alice, to: alice}
  - transfer: {from: alice, to: peer, bytes: 0}
  - fetch: {from: bob, url: "http://nobody/"}
  - stop: {service: relay2}
  - link_down: nowhere
  - nat_reboot: {network: internet}
  - block_udp: {router: home-nat}
  - block_udp: {router: home-nat}
  - unblock_udp: {network: office}
  - join: later
  - discover_nat: {node: bob, stun: nope}
`,
		want: `12 problems:
s.yaml:19:23: steps[1].wait_path.from: no node "alise"; did you mean "alice"?
s.yaml:20:29: steps[2].ping.to: from and to are both alice
s.yaml:21:33: steps[3].transfer.to: no node "peer"; peer is a count of nodes; name one, e.g. peer-1
s.yaml:21:46: steps[3].transfer.bytes: nothing to send
s.yaml:22:29: steps[4].fetch.url: URL host "nobody" is no node; nodes: alice, bob, carol, agent, peer-1, peer-2
s.yaml:23:21: steps[5].stop.service: no service "relay2"; did you mean "relay"?
s.yaml:24:16: steps[6].link_down.link: no node, host, router or network "nowhere"; name a node, host, network or router, or OWNER/INTERFACE
s.yaml:25:18: steps[7].nat_reboot: network internet has no gateway router; NAT routers: home-nat, office-nat, cafe-nat
s.yaml:27:17: steps[9].block_udp: home-nat's UDP is already blocked
s.yaml:28:19: steps[10].unblock_udp: office-nat's UDP is not blocked; block it first with block_udp
s.yaml:29:11: steps[11].join: no background step "later" to join; name the background id of an earlier step
s.yaml:30:37: steps[12].discover_nat.stun: no STUN server "nope" with an alternate address; STUN servers with an alternate address: stun`,
	},
	{
		name: "timeline state",
		steps: `nodes: [alice, bob, peer]
steps:
  - ping: {from: alice, to: carol}
  - start: {node: alice}
  - stop: {node: bob}
  - wait_path: {from: bob, to: alice, path: direct}
  - stop: {service: relay}
  - stop: {service: relay}
  - move: {node: alice, to: office}
  - move: {node: alice, to: home}
  - blackhole_direct: {between: [alice]}
  - heal_direct: {between: [alice, bob]}
  - sleep: 1s
    background: x
  - sleep: 1s
    background: x
  - join: x
  - join: x
`,
		want: `10 problems:
s.yaml:20:29: steps[1].ping.to: node carol is not running at this step; start it with a start step first, or list it in nodes
s.yaml:21:19: steps[2].start.node: node alice is already running; stop it first, or use restart
s.yaml:23:23: steps[4].wait_path.from: node bob is not running at this step; start it with a start step first, or list it in nodes
s.yaml:25:21: steps[6].stop.service: service relay is not running; start it first
s.yaml:26:29: steps[7].move.to: node alice cannot move to "office"; add it to the node's roams (it may move to: home, cafe)
s.yaml:27:29: steps[8].move.to: node alice is on home already
s.yaml:28:33: steps[9].blackhole_direct.between: want two nodes, got 1
s.yaml:29:19: steps[10].heal_direct: the direct path between alice and bob is not blackholed; blackhole it first
s.yaml:33:17: steps[12].background: background id "x" is used twice; give each background step its own id
s.yaml:35:11: steps[14].join: no background step "x" to join; it was joined already`,
	},
	{
		name: "sandbox steps and requirements",
		steps: `steps:
  - socks5_fetch: {node: bob, url: "http://alice/"}
  - egress: {node: agent, to: "203.0.113.100:80", expect: maybe}
  - forward: {node: agent, port: 8080, from: bob}
  - agent_run: {node: agent, argv: [true]}
  - {}
  - wait_path: {from: a, to: b, path: direct}
    ping: {from: a, to: b}
`,
		want: `8 problems:
s.yaml:19:26: steps[1].socks5_fetch.node: node bob is not a pod sandbox; give the node sandbox: pod in the topology
s.yaml:20:59: steps[2].egress.expect: unknown value "maybe"; one of: allowed, denied
s.yaml:21:34: steps[3].forward.port: sandbox agent forwards no port 8080; add it to the sandbox's forwards
s.yaml:22:23: steps[4].agent_run.node: node agent is not a gvisor sandbox; give the node sandbox: gvisor in the topology
s.yaml:23:5: steps[5]: want one action key, got none; one of: wait_path, assert_path, ping, fetch, tcp_idle, wait_presence, transfer, stream, time_to_direct, full_mesh, assert_metric, start, stop, restart, start_refused, move, link_down, link_up, impair, block_udp, unblock_udp, nat_reboot, advance_clock, blackhole_direct, heal_direct, sleep, join, assert_nat_mapping, discover_nat, socks5_fetch, egress, forward, agent_run, exec, repeat, steady
s.yaml:24:5: steps[6]: one action per entry, got wait_path and ping; split it into 2 entries
s.yaml:24:23: steps[6].wait_path.from: no node "a"; nodes: alice, bob, carol, agent, peer-1, peer-2
s.yaml:24:30: steps[6].wait_path.to: no node "b"; nodes: alice, bob, carol, agent, peer-1, peer-2`,
	},
	{
		name: "long-horizon steps",
		steps: `nodes: [alice, bob]
steps:
  - assert_nat_mapping: {node: carol, expect: present}
  - assert_nat_mapping: {node: alice, expect: absent, min_age: 1m}
  - assert_nat_mapping: {node: nobody, expect: gone}
  - tcp_idle: {from: carol, to: sever, idle: 2h, expect: alive}
  - tcp_idle: {from: alice, to: server, expect: alive}
  - wait_presence: {from: alice, peer: carol, status: offline}
  - wait_presence: {from: alice, peer: alice, status: online}
  - wait_presence: {from: carol, peer: bobby, status: away}
`,
		want: `11 problems:
s.yaml:20:32: steps[1].assert_nat_mapping.node: node carol has no NAT in front of it; name a node on a network behind a NAT
s.yaml:21:64: steps[2].assert_nat_mapping.min_age: min_age needs expect: present; drop min_age, or expect present
s.yaml:22:32: steps[3].assert_nat_mapping.node: no node "nobody"; nodes: alice, bob, carol, agent, peer-1, peer-2
s.yaml:22:48: steps[3].assert_nat_mapping.expect: unknown value "gone"; one of: present, absent
s.yaml:23:22: steps[4].tcp_idle.from: node carol is not running at this step; start it with a start step first, or list it in nodes
s.yaml:23:33: steps[4].tcp_idle.to: no host "sever"; did you mean "server"?
s.yaml:24:16: steps[5].tcp_idle: missing required key "idle"; idle: How long the connection stays silent after its first echo
s.yaml:26:40: steps[7].wait_presence.peer: from and peer are both alice
s.yaml:27:27: steps[8].wait_presence.from: node carol is not running at this step; start it with a start step first, or list it in nodes
s.yaml:27:40: steps[8].wait_presence.peer: no node "bobby"; did you mean "bob"?
s.yaml:27:55: steps[8].wait_presence.status: unknown value "away"; one of: online, offline`,
	},
	{
		name: "no steps",
		steps: `steps: []
`,
		want: `1 problem:
s.yaml:18:8: steps: a scenario needs at least one step; add steps, e.g. - wait_path: {from: a, to: b, path: direct}`,
	},
}

func TestErrors(t *testing.T) {
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("s.yaml", []byte(inlineWorld+tt.steps), Options{})
			require.Error(t, err)
			assert.ErrorIs(t, err, strictyaml.ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}
