package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/netns"
)

// testNetns makes a network namespace with lo up, or skips without root
// and the tools.
func testNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables)")
	}
	for _, tool := range []string{"ip", "iptables", "iptables-restore", "ip6tables", "ip6tables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	ns := fmt.Sprintf("lsbxdef-%d", os.Getpid()%100000)
	out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "10.203.0.2/32", "dev", "lo"}} {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return ns
}

// inNetns makes a kernelEgress whose iptables run in ns.
func inNetns(ns, src string, t *testing.T) *kernelEgress {
	k := newKernelEgress("wg0", netip.MustParsePrefix("100.64.0.7/10"), mustPolicy(t, src), func() []nodePeer { return nil }, slog.New(slog.DiscardHandler))
	k.v6 = true
	k.run = func(tool string, args []string, stdin string) error {
		return runTool("ip", append([]string{"netns", "exec", ns, tool}, args...), stdin)
	}
	return k
}

// dialIn connects to addr from inside ns, where a listener on addr
// accepts; it returns the dial's error.
func dialIn(t *testing.T, ns, addr string) error {
	t.Helper()
	var dialErr error
	require.NoError(t, netns.Do("/run/netns/"+ns, func() error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		dialErr = err
		return nil
	}))
	return dialErr
}

// TestKernelDefaultsRefuse: in a real network namespace, the installed
// LATTICE-DEFAULTS refuses connections to loopback in both families and
// to the namespace's own address, lets through what a rule names, and
// leaves nothing behind once removed.
func TestKernelDefaultsRefuse(t *testing.T) {
	ns := testNetns(t)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "10.203.0.2:0"} {
		require.NoError(t, dialIn(t, ns, addr), "%s before the rules", addr)
	}

	k := inNetns(ns, "", t)
	require.NoError(t, k.installDefaults())
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "10.203.0.2:0"} {
		err := dialIn(t, ns, addr)
		assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "%s refused by the defaults: %v", addr, err)
	}
	k.removeDefaults()
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command("ip", "netns", "exec", ns, tool, "-S").CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.NotContains(t, string(out), defaultsChain, tool)
	}
	require.NoError(t, dialIn(t, ns, "127.0.0.1:0"), "open again after removal")

	named := inNetns(ns, "rules:\n  - allow: [127.0.0.1, 10.203.0.2]\n", t)
	require.NoError(t, named.installDefaults())
	t.Cleanup(named.removeDefaults)
	assert.NoError(t, dialIn(t, ns, "127.0.0.1:0"), "named loopback address")
	assert.NoError(t, dialIn(t, ns, "10.203.0.2:0"), "named host address")
	err := dialIn(t, ns, "127.0.0.2:0")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "an unnamed loopback address: %v", err)
	out, err := exec.Command("ip", "netns", "exec", ns, "ip6tables", "-S", defaultsChain).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.True(t, strings.Contains(string(out), "64:ff9b::7f00:0/104"), "NAT64 of loopback in ip6tables:\n%s", out)

	// The hook removed by someone else: the chain still goes.
	out, err = exec.Command("ip", "netns", "exec", ns, "iptables", "-D", "OUTPUT", "-j", defaultsChain).CombinedOutput()
	require.NoError(t, err, "%s", out)
	named.removeDefaults()
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command("ip", "netns", "exec", ns, tool, "-S").CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.NotContains(t, string(out), defaultsChain, tool)
	}
}
