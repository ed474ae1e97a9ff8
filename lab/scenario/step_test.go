package scenario

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/stun"
)

// TestDescribe: every step has an action and a label made from it, as
// progress output and reports show them.
func TestDescribe(t *testing.T) {
	f, err := Parse("s.yaml", []byte(inlineWorld+`steps:
  - wait_path: {from: alice, to: bob, path: relay}
  - assert_path: {from: alice, to: bob, path: relay}
  - ping: {from: alice, to: bob}
  - fetch: {from: alice, url: "http://bob/"}
  - transfer: {from: alice, to: bob, bytes: 1MiB}
    background: bulk
  - time_to_direct: {from: alice, to: bob}
  - full_mesh: {}
  - assert_metric: {node: alice, metric: lattice_node_peers, labels: {path: direct}, op: ">=", value: 1}
  - start: {node: carol}
  - stop: {service: relay}
  - restart: {service: control}
  - move: {node: alice, to: cafe}
  - link_down: home
  - link_up: home
  - impair: {link: alice, latency: 10ms}
  - block_udp: {network: office}
  - unblock_udp: {router: office-nat}
  - nat_reboot: {network: home}
  - advance_clock: 5m
  - blackhole_direct: {between: [alice, carol]}
  - heal_direct: {between: [carol, alice]}
  - sleep: 1s
  - join: bulk
  - discover_nat: {node: bob}
  - socks5_fetch: {node: agent, url: "http://bob/"}
  - egress: {node: agent, to: "bob:80", expect: allowed}
  - repeat: {times: 3, steps: [{sleep: 1s}]}
  - steady: {goroutines: 5, heap: 1MiB, steps: [{sleep: 1s}, {sleep: 2s}]}
  - tcp_idle: {from: alice, to: server, idle: 2h, expect: alive}
  - wait_presence: {from: alice, peer: bob, status: offline}
  - assert_nat_mapping: {node: alice, expect: present, min_age: 10m}
  - stream: {from: alice, to: bob, bytes: 1MiB, through: [{restart: {service: control}}, {sleep: 1s}]}
  - stop: {node: carol}
  - start_refused: {node: carol, error: join token expired}
`), Options{})
	require.NoError(t, err)
	want := [][2]string{
		{"wait_path", "wait until alice → bob is relay"},
		{"assert_path", "alice → bob is relay"},
		{"ping", "ping alice → bob"},
		{"fetch", "alice fetches http://bob/"},
		{"transfer", "transfer 1MiB alice → bob"},
		{"time_to_direct", "time to direct alice → bob"},
		{"full_mesh", "full mesh"},
		{"assert_metric", `alice's lattice_node_peers{path="direct"} >= 1`},
		{"start", "start node carol"},
		{"stop", "stop service relay"},
		{"restart", "restart service control"},
		{"move", "move alice to cafe"},
		{"link_down", "link down home"},
		{"link_up", "link up home"},
		{"impair", "impair alice"},
		{"block_udp", "block udp office"},
		{"unblock_udp", "unblock udp office-nat"},
		{"nat_reboot", "nat reboot home"},
		{"advance_clock", "advance the NAT clock by 5m0s"},
		{"blackhole_direct", "blackhole direct alice ↔ carol"},
		{"heal_direct", "heal direct carol ↔ alice"},
		{"sleep", "sleep 1s"},
		{"join", "join bulk"},
		{"discover_nat", "discover bob's NAT (RFC 5780)"},
		{"socks5_fetch", "agent fetches http://bob/ through its SOCKS5 proxy"},
		{"egress", "agent connects to bob:80 (want allowed)"},
		{"repeat", "repeat 3 × 1 step"},
		{"steady", "steady over 2 steps (goroutines +5, heap +1.0MiB)"},
		{"tcp_idle", "TCP alice → server idle 2h0m0s (want alive)"},
		{"wait_presence", "wait until alice shows bob offline"},
		{"assert_nat_mapping", "alice's udp mapping is present, made 10m0s ago or earlier"},
		{"stream", "stream 1MiB alice → bob through restart service control, sleep 1s"},
		{"stop", "stop node carol"},
		{"start_refused", "start node carol, refused: join token expired"},
	}
	require.Len(t, f.Steps, len(want))
	for i, w := range want {
		name, a := f.Steps[i].Action()
		require.NotNil(t, a, "step %d", i+1)
		assert.Equal(t, w[0], name, "step %d", i+1)
		assert.Equal(t, w[1], a.Describe(), "step %d", i+1)
	}
	assert.Equal(t, "forward", keyOf(&Step{Forward: &Forward{}}))
	assert.Equal(t, "bob reaches agent's forwarded port 8080", (&Forward{Node: "agent", Port: 8080, From: "bob"}).Describe())
	assert.Equal(t, "agent_run", keyOf(&Step{AgentRun: &AgentRun{}}))
	assert.Equal(t, "agent run", (&AgentRun{Node: "agent"}).Describe())
	assert.Equal(t, "exec", keyOf(&Step{Exec: &Exec{}}))
	assert.Equal(t, "exec on box: ip addr", (&Exec{Host: "box", Argv: []string{"ip", "addr"}}).Describe())
	assert.Len(t, actionFields(), len(want)+3-1, "every action is covered (stop twice)")
	name, a := (&Step{}).Action()
	assert.Empty(t, name)
	assert.Nil(t, a)
}

func keyOf(s *Step) string {
	name, _ := s.Action()
	return name
}

// fakeEnv is an Env whose answers a test sets; what is not set fails.
type fakeEnv struct {
	Env // nil: a call to anything not overridden panics
	ids map[string][]string
	st  []node.PeerStatus
	err error
}

func (e *fakeEnv) Within(ctx context.Context, d, def time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		d = def
	}
	return context.WithTimeoutCause(ctx, d, errors.New("not within "+d.String()))
}

func (e *fakeEnv) Plan() *topology.Plan {
	return &topology.Plan{Nodes: []topology.PlanNode{{Name: "alice"}}}
}

func (e *fakeEnv) NodeIdentity(name string) (string, netip.Addr, error) {
	id := e.ids[name][0]
	if len(e.ids[name]) > 1 {
		e.ids[name] = e.ids[name][1:]
	}
	return id, netip.MustParseAddr("100.64.0.1"), nil
}
func (e *fakeEnv) LastIdentity(string) (string, netip.Addr, bool) { return "", netip.Addr{}, false }
func (e *fakeEnv) StopNode(string) error                          { return nil }
func (e *fakeEnv) StartNodes(context.Context, ...string) error    { return nil }
func (e *fakeEnv) CheckPath(string, string, string) (node.PeerStatus, error) {
	if len(e.st) == 0 {
		return node.PeerStatus{}, e.err
	}
	st := e.st[0]
	e.st = e.st[1:]
	return st, nil
}
func (e *fakeEnv) DiscoverNAT(context.Context, string, string) (stun.Result, error) {
	return stun.Result{NATed: true, Mapping: stun.EndpointIndependent, Filtering: stun.AddressDependent}, nil
}
func (e *fakeEnv) ExpectedNAT(string) (m, f nat.Behavior, natted bool) {
	return nat.EndpointIndependent, nat.AddressAndPortDependent, true
}

// TestRun runs steps against a fake lab: what each asks of it and makes
// of the answers.
func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		action     Action
		env        *fakeEnv
		wantDetail string
		wantErr    string
	}{
		{
			name:       "restart keeps the identity",
			action:     &Restart{Node: "alice"},
			env:        &fakeEnv{ids: map[string][]string{"alice": {"n1"}}},
			wantDetail: "same identity n1, 100.64.0.1",
		},
		{
			name:    "restart with a new identity",
			action:  &Restart{Node: "alice"},
			env:     &fakeEnv{ids: map[string][]string{"alice": {"n1", "n2"}}},
			wantErr: "alice came back as n2, was n1",
		},
		{
			name:       "assert_path holds",
			action:     &PathHold{From: "alice", To: "bob", Path: "direct", For: 30 * time.Millisecond},
			env:        &fakeEnv{st: []node.PeerStatus{{Path: node.PathDirect, Endpoint: "203.0.113.1:51820"}, {Path: node.PathDirect, Endpoint: "203.0.113.1:51820"}, {Path: node.PathDirect, Endpoint: "203.0.113.1:51820"}}},
			wantDetail: "direct to 203.0.113.1:51820",
		},
		{
			name:    "assert_path breaks",
			action:  &PathHold{From: "alice", To: "bob", Path: "direct", For: time.Minute},
			env:     &fakeEnv{st: []node.PeerStatus{{Path: node.PathDirect}}, err: errors.New("path is relay, want direct")},
			wantErr: "path is relay, want direct",
		},
		{
			name:       "discover_nat differs from the plan",
			action:     &Discover{Node: "alice"},
			env:        &fakeEnv{},
			wantDetail: "endpoint-independent mapping, address-dependent filtering",
			wantErr:    "discovered endpoint-independent mapping, address-dependent filtering, want endpoint-independent mapping, address-and-port-dependent filtering",
		},
		{
			name:    "sleep ends with its context",
			action:  ptr(Sleep(time.Hour)),
			env:     &fakeEnv{},
			wantErr: "context canceled",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, ok := tt.action.(*Sleep); ok {
				c, cancelNow := context.WithCancel(ctx)
				cancelNow()
				ctx = c
			}
			detail, _, err := tt.action.Run(ctx, tt.env)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, err.Error())
			} else {
				require.NoError(t, err)
			}
			if tt.wantDetail != "" {
				assert.Equal(t, tt.wantDetail, detail)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
