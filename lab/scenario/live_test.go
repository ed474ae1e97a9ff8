package scenario

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/topology"
)

const liveWorld = `networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone}
  cafe: {cidr: 172.16.0.0/24, uplink: internet, nat: full-cone}
hosts:
  server: {network: internet, addr: 203.0.113.100}
  box: {network: home, kind: netns}
control: {host: server}
relays: {relay: {host: server}}
nodes:
  alice: {network: home, roams: [cafe]}
  bob: {network: internet}
  carol: {network: internet, start: false}
`

func livePlan(t testing.TB) *topology.Plan {
	t.Helper()
	_, plan, err := topology.Parse("t.yaml", []byte(liveWorld))
	require.NoError(t, err)
	return plan
}

// TestParseStep: one step, checked against the lab as it runs now, with
// positions in the step's own text.
func TestParseStep(t *testing.T) {
	plan := livePlan(t)
	up := LiveState{Running: []string{"alice", "bob"}}
	tests := []struct {
		name    string
		step    string
		st      LiveState
		want    string // the action's key
		wantErr string
	}{
		{name: "flow", step: "link_down: {link: home}", st: up, want: "link_down"},
		{name: "block style", step: "ping:\n  from: alice\n  to: bob\n  count: 2\n", st: up, want: "ping"},
		{name: "exec", step: "exec: {host: box, argv: [ip, addr], stdout_contains: 192.168.1.2}", st: up, want: "exec"},
		{name: "start a stopped node", step: "start: {node: carol}", st: up, want: "start"},
		{name: "unknown link", step: "link_down: {link: hom}", st: up,
			wantErr: "1 problem:\ndo:1:19: link_down.link: no node, host, router or network \"hom\"; name a node, host, network or router, or OWNER/INTERFACE"},
		{name: "node not running", step: "ping: {from: alice, to: carol}", st: up,
			wantErr: "1 problem:\ndo:1:25: ping.to: node carol is not running at this step; start it with a start step first, or list it in nodes"},
		{name: "already running", step: "start: {node: bob}", st: up,
			wantErr: "1 problem:\ndo:1:15: start.node: node bob is already running; stop it first, or use restart"},
		{name: "unknown key", step: "link_down: {link: home, for: 2s}", st: up,
			wantErr: "1 problem:\ndo:1:25: link_down: unknown key \"for\"; known keys: link"},
		{name: "no action", step: "name: hello", st: up,
			wantErr: "1 problem:\ndo:1:1: want one action key, got none; one of: " + strings.Join(actionKeys(), ", ")},
		{name: "background", step: "sleep: 1s\nbackground: x", st: up,
			wantErr: "1 problem:\ndo:2:13: background: a live lab runs one step at a time; run it without background"},
		{name: "join", step: "join: x", st: up,
			wantErr: "1 problem:\ndo:1:7: join: a live lab has no background steps to join"},
		{name: "heal what is not blackholed", step: "heal_direct: {between: [alice, bob]}", st: up,
			wantErr: "1 problem:\ndo:1:15: heal_direct: the direct path between alice and bob is not blackholed; blackhole it first"},
		{name: "heal what is", step: "heal_direct: {between: [alice, bob]}",
			st: LiveState{Running: []string{"alice", "bob"}, Holes: [][2]string{{"bob", "alice"}}}, want: "heal_direct"},
		{name: "moved already", step: "move: {node: alice, to: cafe}",
			st:      LiveState{Running: []string{"alice", "bob"}, Location: map[string]string{"alice": "cafe"}},
			wantErr: "1 problem:\ndo:1:25: move.to: node alice is on cafe already"},
		{name: "exec on an in-process host", step: "exec: {host: server, argv: [true]}", st: up,
			wantErr: "1 problem:\ndo:1:14: exec.host: host server is in-process (a gVisor stack), not a kernel host; set kind: netns on host server to run real programs in it"},
		{name: "exec on no host", step: "exec: {host: bx, argv: [true]}", st: up,
			wantErr: "1 problem:\ndo:1:14: exec.host: no host \"bx\"; did you mean \"box\"?"},
		{name: "exec without a program", step: "exec: {host: box, argv: []}", st: up,
			wantErr: "1 problem:\ndo:1:25: exec.argv: no program to run; write argv: [PROGRAM, ARG...]"},
		{name: "syntax", step: "ping: {from: alice", st: up, wantErr: "do:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseStep("do", []byte(tt.step), plan, tt.st)
			if tt.wantErr != "" {
				require.Error(t, err)
				if tt.name == "syntax" {
					assert.Contains(t, err.Error(), tt.wantErr)
					return
				}
				assert.Equal(t, tt.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			key, a := s.Action()
			assert.Equal(t, tt.want, key)
			assert.NotNil(t, a)
		})
	}
}

// TestExecRun: the step passes on the exit status and output it expects
// and says what differs otherwise.
func TestExecRun(t *testing.T) {
	tests := []struct {
		name    string
		step    Exec
		res     ExecResult
		wantErr string
	}{
		{name: "ok", step: Exec{Host: "box", Argv: []string{"ip", "addr"}, StdoutContains: "eth0"},
			res: ExecResult{Stdout: "2: eth0: <UP>"}},
		{name: "exit status", step: Exec{Host: "box", Argv: []string{"false"}, ExitCode: 0},
			res: ExecResult{ExitCode: 1}, wantErr: `false: exit status 1, want 0 (stdout "", stderr "")`},
		{name: "want failure", step: Exec{Host: "box", Argv: []string{"false"}, ExitCode: 1}, res: ExecResult{ExitCode: 1}},
		{name: "output", step: Exec{Host: "box", Argv: []string{"ping"}, StdoutContains: "1 received", StderrContains: "x"},
			res:     ExecResult{Stdout: "0 received", Stderr: "y"},
			wantErr: `ping: stdout does not contain "1 received"; stderr does not contain "x" (stdout "0 received", stderr "y")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &execEnv{res: tt.res}
			detail, _, err := tt.step.Run(t.Context(), env)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "exit status "+itoa(tt.res.ExitCode), detail)
			assert.Equal(t, tt.step.Argv, env.argv)
		})
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

type execEnv struct {
	Env
	res  ExecResult
	argv []string
}

func (e *execEnv) Within(ctx context.Context, d, def time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(d, def))
}

func (e *execEnv) Exec(_ context.Context, _ string, argv []string) (ExecResult, error) {
	e.argv = argv
	return e.res, nil
}

// FuzzParseStep: any text either parses into one step with an action or
// fails with an error, never a panic.
func FuzzParseStep(f *testing.F) {
	for _, s := range []string{"link_down: {link: home}", "ping: {from: alice, to: bob}", "exec: {host: box, argv: [sh, -c, 'exit 1'], exit_code: 1}",
		"join: x", "sleep: 1s\nbackground: y", "", "[]", "repeat: {times: 2, steps: [{sleep: 1s}]}", "move: {node: alice, to: cafe}",
		"assert_metric: {node: alice, metric: lattice_node_bytes_total, labels: {path: relay}, op: '<=', value: 1.5e6}"} {
		f.Add([]byte(s))
	}
	plan := livePlan(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseStep("do", data, plan, LiveState{Running: []string{"alice", "bob"}})
		if err != nil {
			return
		}
		if _, a := s.Action(); a == nil {
			t.Fatalf("parsed %q without an action", data)
		}
	})
}

func actionKeys() []string {
	var out []string
	for _, f := range actionFields() {
		out = append(out, f.key)
	}
	return out
}
