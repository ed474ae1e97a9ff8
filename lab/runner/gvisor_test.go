package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/sandbox"
)

// TestGVisorSandbox: a gvisor sandbox in the lab is a process in its own
// namespace, serving the product's control socket; agents run in runsc
// there and see peers by name; their output is bounded; a bad agent is an
// error that says why; and closing the lab leaves no process, container,
// namespace or rule behind.
func TestGVisorSandbox(t *testing.T) {
	if err := GVisorReady(); err != nil {
		t.Skip(err)
	}
	_, plan, err := topology.Parse("t.yaml", []byte(`
networks:
  internet: {cidr: 203.0.113.0/24}
  pods: {cidr: 10.0.0.0/24, uplink: internet, nat: symmetric}
hosts:
  server: {network: internet}
control: {host: server}
relays: {relay: {host: server}}
nodes:
  agent: {network: pods, sandbox: gvisor}
  web: {network: internet}
`))
	require.NoError(t, err)
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	l, err := Up(ctx, Config{Plan: plan, StateDir: state, Progress: func(s string) { t.Log(s) }})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			l.Close()
		}
	}()
	rn, err := l.node("agent")
	require.NoError(t, err)
	gv, ok := rn.(*gvisorNode)
	require.True(t, ok, "agent is a gvisor node, not a %T", rn)
	ns := gv.kernel.NetnsPath()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = l.WaitPath(wctx, "agent", "web", "direct") // web is on the internet: the NAT lets its answers in
	wcancel()
	require.NoError(t, err)

	// The child is the product's sandbox daemon: its control socket in
	// the state dir answers as `lattice sandbox agent status` would ask.
	sc := sandbox.NewClient(filepath.Join(state, "sandboxes", "agent", sandbox.SocketName))
	defer sc.Close()
	st, err := sc.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, sandbox.ModeGVisor, st.Mode)
	assert.Equal(t, gv.addr(), st.Address.Addr())

	res, err := l.AgentRun(ctx, "agent", []string{"sh", "-c", "cat /etc/hosts; echo to stderr >&2; exit 4"})
	require.NoError(t, err)
	assert.Equal(t, 4, res.Code)
	assert.Contains(t, res.Stdout, "web web.lattice")
	assert.Equal(t, "to stderr\n", res.Stderr)
	res, err = l.AgentRun(ctx, "agent", []string{"sh", "-c", "head -c 70000 /dev/zero | tr '\\0' x; echo end"})
	require.NoError(t, err)
	assert.Equal(t, "[…]"+strings.Repeat("x", sandbox.MaxExecOutput-4)+"end\n", res.Stdout, "the output's last 64 KiB, marked as cut")
	_, err = l.AgentRun(ctx, "agent", []string{"no-such-agent"})
	assert.ErrorContains(t, err, `agent "no-such-agent"`)
	_, err = l.AgentRun(ctx, "web", []string{"true"})
	assert.ErrorContains(t, err, "node web is not a gvisor sandbox")

	out, err := exec.Command("nsenter", "--net="+ns, "ip", "-br", "addr", "show", "wg0").CombinedOutput()
	require.NoError(t, err, "wg0 is in the pod's namespace: %s", out)
	pid := gv.child.cmd.Process.Pid

	require.NoError(t, l.Close())
	closed = true
	_, err = os.Stat(ns)
	assert.True(t, os.IsNotExist(err), "the namespace is gone")
	assert.Error(t, exec.Command("kill", "-0", strconv.Itoa(pid)).Run(), "the sandbox process has exited")
	bin, err := runsc.Find("")
	require.NoError(t, err)
	list, err := exec.Command(bin, "--root", filepath.Join(state, "sandboxes", "agent", "runsc", "state"), "list", "--quiet").CombinedOutput()
	require.NoError(t, err, "%s", list)
	assert.Empty(t, strings.TrimSpace(string(list)), "no container left")
}

// BenchmarkGVisorAgentRun: one agent (/bin/true) run in runsc in a gvisor
// sandbox, asked over the sandbox's control socket: what an agent_run
// step costs beyond the agent itself.
func BenchmarkGVisorAgentRun(b *testing.B) {
	if err := GVisorReady(); err != nil {
		b.Skip(err)
	}
	_, plan, err := topology.Parse("t.yaml", []byte(`
networks:
  internet: {cidr: 203.0.113.0/24}
hosts:
  server: {network: internet}
control: {host: server}
relays: {relay: {host: server}}
nodes:
  agent: {network: internet, sandbox: gvisor}
`))
	require.NoError(b, err)
	l, err := Up(b.Context(), Config{Plan: plan, StateDir: b.TempDir()})
	require.NoError(b, err)
	defer l.Close()
	for b.Loop() {
		res, err := l.AgentRun(b.Context(), "agent", []string{"true"})
		require.NoError(b, err)
		require.Equal(b, 0, res.Code)
	}
}
