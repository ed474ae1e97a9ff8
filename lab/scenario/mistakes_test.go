package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// TestMistakes: the slips people make writing a scenario by hand, each
// reported at the offending key or value (inlineWorld is lines 1-17) with
// what was wrong.
func TestMistakes(t *testing.T) {
	tests := []struct{ name, steps, want string }{
		{
			name:  "misspelled step kind",
			steps: "steps:\n  - pnig: {from: alice, to: bob}\n",
			want: `s.yaml:19:5: steps[1]: unknown key "pnig"; did you mean "ping"? (known keys: name, background, wait_path, assert_path, ping, fetch, tcp_idle, wait_presence, transfer, stream, time_to_direct, full_mesh, assert_metric, start, stop, restart, start_refused, move, link_down, link_up, impair, block_udp, unblock_udp, nat_reboot, advance_clock, blackhole_direct, heal_direct, sleep, join, assert_nat_mapping, discover_nat, socks5_fetch, egress, forward, agent_run, exec, repeat, steady)
s.yaml:19:5: steps[1]: want one action key, got none; one of: wait_path, assert_path, ping, fetch, tcp_idle, wait_presence, transfer, stream, time_to_direct, full_mesh, assert_metric, start, stop, restart, start_refused, move, link_down, link_up, impair, block_udp, unblock_udp, nat_reboot, advance_clock, blackhole_direct, heal_direct, sleep, join, assert_nat_mapping, discover_nat, socks5_fetch, egress, forward, agent_run, exec, repeat, steady`,
		},
		{
			name:  "step naming an undefined node",
			steps: "steps:\n  - ping: {from: alice, to: zed}\n",
			want:  `s.yaml:19:29: steps[1].ping.to: no node "zed"; nodes: alice, bob, carol, agent, peer-1, peer-2`,
		},
		{
			name:  "negative count",
			steps: "steps:\n  - ping: {from: alice, to: bob, count: -1}\n",
			want:  `s.yaml:19:41: steps[1].ping.count: want an integer from 1 to 10000, got -1`,
		},
		{
			name:  "word where a number is wanted",
			steps: "steps:\n  - ping: {from: alice, to: bob, count: three}\n",
			want:  `s.yaml:19:41: steps[1].ping.count: want an integer, got "three"`,
		},
		{
			name:  "duration without unit",
			steps: "timeout: 60\nsteps:\n  - sleep: 1s\n",
			want:  `s.yaml:18:10: timeout: want a duration such as 500ms, 3s or 1m30s, got number 60; add a unit: 60s or 60ms`,
		},
		{
			name:  "zero timeout",
			steps: "timeout: 0s\nsteps:\n  - sleep: 1s\n",
			want:  `s.yaml:18:10: timeout: want a duration from 1s to 24h0m0s, got 0s`,
		},
		{
			name:  "negative sleep",
			steps: "steps:\n  - sleep: -1s\n",
			want:  `s.yaml:19:12: steps[1].sleep: want a duration such as 500ms, 3s or 1m30s, got the negative -1s`,
		},
		{
			name:  "zero repeat",
			steps: "steps:\n  - repeat: {times: 0, steps: [{sleep: 1s}]}\n",
			want:  `s.yaml:19:21: steps[1].repeat.times: want an integer from 1 to 100000, got 0`,
		},
		{
			name:  "unknown path kind",
			steps: "steps:\n  - wait_path: {from: alice, to: bob, path: sideways}\n",
			want:  `s.yaml:19:45: steps[1].wait_path.path: unknown value "sideways"; one of: direct, relay`,
		},
		{
			name:  "string where a list is wanted",
			steps: "nodes: alice\nsteps:\n  - sleep: 1s\n",
			want:  `s.yaml:18:8: nodes: want a list, got "alice"; for one item write [alice]`,
		},
		{
			name:  "node listed twice",
			steps: "nodes: [alice, bob, alice]\nsteps:\n  - sleep: 1s\n",
			want:  `s.yaml:18:21: nodes[3]: node "alice" is listed twice (first as nodes[1]); list each node once`,
		},
		{
			name:  "duplicate steps key",
			steps: "steps:\n  - sleep: 1s\nsteps:\n  - sleep: 2s\n",
			want:  `s.yaml:20:1: steps: duplicate key "steps", first at 18:1; remove one of them`,
		},
		{
			name:  "tab indentation",
			steps: "steps:\n  - sleep: 1s\n\t- sleep: 1s\n",
			want:  `s.yaml:20:1: yaml: found character '\t' that cannot start any token; YAML indents with spaces, never tabs`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("s.yaml", []byte(inlineWorld+tt.steps), Options{})
			require.Error(t, err)
			assert.ErrorIs(t, err, strictyaml.ErrInvalid)
			lines := strings.SplitN(err.Error(), "\n", 2)
			require.Len(t, lines, 2)
			assert.Equal(t, tt.want, lines[1])
		})
	}
}

// TestMistakenFiles: an empty scenario, and a scenario or topology path that
// is a directory, are refused saying so.
func TestMistakenFiles(t *testing.T) {
	_, err := Parse("s.yaml", nil, Options{})
	assert.EqualError(t, err, `2 problems:
s.yaml:1:1: missing required key "topology"; topology: The topology: a path to a topology file (relative to this file), or a topology written inline
s.yaml:1:1: missing required key "steps"; steps: The timeline, run in order`)

	dir := t.TempDir()
	_, err = Load(dir)
	assert.EqualError(t, err, "read "+dir+": is a directory, not a YAML file")

	s := filepath.Join(dir, "s.yaml")
	require.NoError(t, os.WriteFile(s, []byte("topology: .\nsteps:\n  - sleep: 1s\n"), 0o644))
	_, err = Load(s)
	assert.EqualError(t, err, "1 problem:\n"+s+":1:11: topology: read "+dir+": is a directory, not a YAML file; the path is relative to the scenario file")

	// A topology given to run the scenario on is read as given: no hint
	// that sends the user looking next to the scenario.
	_, err = Parse(s, []byte("topology: t.yaml\nsteps:\n  - sleep: 1s\n"), Options{Topology: dir})
	assert.EqualError(t, err, "1 problem:\n"+s+":1:11: topology: read "+dir+": is a directory, not a YAML file")
}
