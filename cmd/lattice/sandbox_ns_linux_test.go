//go:build pro

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/sandbox/podinit"
)

// nsWorld is a mesh with a peer "web" (HTTP on 8080, UDP echo on 7) and a
// pod sandbox daemon in namespace isolation, run as an unprivileged user.
type nsWorld struct {
	w      *meshtest.World
	web    *meshtest.Peer
	daemon *sandboxProc
	state  string
	tool   string // agenttool, runnable by the unprivileged user
	bin    string
	token  string
}

func newNSWorld(t *testing.T) *nsWorld {
	t.Helper()
	for _, p := range []string{"curl", "ping", "sh"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s (make deps installs it)", p)
		}
	}
	w := meshtest.Start(t)
	web := w.Peer(t, "web")
	web.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from web, you are %s", r.RemoteAddr)
	}))
	pc, err := web.Stack.ListenPacket(t.Context(), "udp", ":7")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("echo "), buf[:n]...), from)
		}
	}()
	bin, state, token := unprivilegedSetup(t)
	tool := filepath.Join(filepath.Dir(bin), "agenttool")
	build := exec.Command("go", "build", "-o", tool, "../../sandbox/testdata/agenttool")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building agenttool: %s", out)
	return &nsWorld{w: w, web: web, state: state, tool: tool, bin: bin, token: token}
}

// start runs `lattice sandbox start` (namespace isolation, the default).
func (n *nsWorld) start(t *testing.T) {
	t.Helper()
	n.daemon = startSandboxProc(t, n.bin, "sandbox", "start", "--name", "agent", "--server-url", n.w.NATSURL,
		"--token-file", n.token, "--state-dir", n.state, "--listen-addr", "127.0.0.1")
	n.daemon.wait(t, `(isolation namespace)`)
	n.daemon.wait(t, `control socket (\S+)`)
}

// exec runs argv as the daemon's agent with `lattice sandbox exec`.
func (n *nsWorld) exec(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e strings.Builder
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	code = executeIn(ctx, append([]string{"sandbox", "exec", "--state-dir", n.state, "--"}, argv...), strings.NewReader(""), &o, &e)
	return o.String(), e.String(), code
}

// TestNamespaceAgentUsesTheOverlay: an agent in namespace isolation, run
// by an unprivileged sandbox, has no proxy variables and needs none: curl
// fetches from a peer by name, ping gets an answer, UDP is echoed, a
// denied destination fails at once and is audited, and the exit code
// comes back.
func TestNamespaceAgentUsesTheOverlay(t *testing.T) {
	n := newNSWorld(t)
	n.start(t)
	script := `env | grep -i '_proxy=' && echo "PROXY VARIABLES SET"
curl -sS --max-time 20 --retry 10 --retry-all-errors --retry-delay 1 http://web:8080/; echo
ping -c 1 -W 10 web >/dev/null && echo "ping ok"
"$0" udp web:7 hello
t0=$(date +%s%N); curl -sS --max-time 10 http://169.254.169.254/ 2>&1; echo "metadata after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
t0=$(date +%s%N); "$0" udp 169.254.169.254:53 x 2>&1; echo "metadata udp after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
exit 7`
	out, errOut, code := n.exec(t, "sh", "-c", script, n.tool)
	t.Logf("agent stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, 7, code, "the agent's exit code")
	assert.NotContains(t, out, "PROXY VARIABLES SET")
	addr := n.daemonAddr(t)
	assert.Contains(t, out, "hello from web, you are "+addr+":", "curl by name, from the sandbox's overlay address")
	assert.Contains(t, out, "ping ok")
	assert.Contains(t, out, "udp reply: echo hello")
	assert.Contains(t, out, "Failed to connect to 169.254.169.254", "the metadata address is refused with a reset")
	var ms int
	_, err := fmt.Sscanf(out[strings.Index(out, "metadata after"):], "metadata after %d ms", &ms)
	require.NoError(t, err)
	assert.Less(t, ms, 2000, "a denied destination fails at once")
	assert.Contains(t, out, "udp refused: read udp", "a denied UDP flow is answered with an ICMP error")
	_, err = fmt.Sscanf(out[strings.Index(out, "metadata udp after"):], "metadata udp after %d ms", &ms)
	require.NoError(t, err)
	assert.Less(t, ms, 2000, "a denied UDP flow fails at once")

	events := readAudit(t, filepath.Join(n.state, "audit.jsonl"))
	assert.Contains(t, events, `"decision":"deny"`)
	assert.Contains(t, events, `"dst":"169.254.169.254:80"`)
	assert.Contains(t, events, `"dst":"169.254.169.254:53"`)
	assert.Contains(t, events, `"proto":"icmp"`, "the ping was decided and audited")
	assert.Contains(t, events, `"proto":"udp"`)
}

// daemonAddr is the sandbox's overlay address from its start line.
func (n *nsWorld) daemonAddr(t *testing.T) string {
	p := netip.MustParsePrefix(n.daemon.wait(t, `\) at (\S+), mode pod`))
	return p.Addr().String()
}

func readAudit(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestNamespaceAgentCannotEscape: each way around the sandbox fails for
// the agent: the state dir's credentials and audit log are hidden (and
// stay hidden when it tries to unmount what hides them) and read-only, the
// host's loopback and its network are out of reach, it has no raw
// sockets, it cannot signal or trace the sandbox or its init, and it
// cannot reconfigure its interface.
func TestNamespaceAgentCannotEscape(t *testing.T) {
	n := newNSWorld(t)
	var accepted atomic.Int32
	listen := func(addr string) string {
		ln, err := net.Listen("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	loopback := listen("127.0.0.1:0")
	host := hostAddr(t)
	_, port, _ := net.SplitHostPort(listen(net.JoinHostPort(host, "0")))
	n.start(t)
	out, errOut, code := n.exec(t, n.tool, "escape", n.state, fmt.Sprint(n.daemon.cmd.Process.Pid), loopback, net.JoinHostPort(host, port))
	t.Logf("agent stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Equal(t, 0, code)
	for _, c := range []string{"read credentials", "read audit log", "write state dir", "unmount state dir", "read credentials after unmount",
		"host loopback", "host network", "raw socket", "signal sandbox", "ptrace sandbox", "sandbox /proc entry", "ptrace init", "device down"} {
		assert.Contains(t, out, "ok "+c+":", "%s must fail", c)
	}
	assert.NotContains(t, out, "ESCAPED")
	assert.NotContains(t, out, "SLOW")
	assert.Zero(t, accepted.Load(), "no connection reached the host's listeners")
	_, err := os.Stat(filepath.Join(n.state, "planted"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.FileExists(t, filepath.Join(n.state, "credentials.json"), "the sandbox's own view is intact")
}

// hostAddr is one of the host's non-loopback IPv4 addresses.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr().String()
		}
	}
	t.Skip("needs a non-loopback IPv4 address on the host")
	return ""
}

// TestNamespaceAgentLeavesNothing: the agent's processes (and with them
// its namespaces and mounts) are gone after it exits, and after the
// sandbox is killed with SIGKILL while it runs. It looks only at its own
// sandbox's processes: the sandbox package's tests, run in parallel, have
// agents and inits of their own.
func TestNamespaceAgentLeavesNothing(t *testing.T) {
	n := newNSWorld(t)
	tmp := n.tmpDir(t)
	marker := fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano()%1e6)
	run := startSandboxProcEnv(t, []string{"TMPDIR=" + tmp}, n.bin, "sandbox", "run", "--name", "agent", "--server-url", n.w.NATSURL,
		"--token-file", n.token, "--state-dir", n.state, "--listen-addr", "127.0.0.1", "--", "sh", "-c", "sleep "+marker+" & wait; exit 3")
	sleeping := func(p procEntry) bool { return len(p.argv) == 2 && p.argv[0] == "sleep" && p.argv[1] == marker }
	require.Eventually(t, func() bool { return len(processes(sleeping)) > 0 }, 60*time.Second, 20*time.Millisecond, "the agent never ran:\n%s", &run.out)
	inits := processes(func(p procEntry) bool {
		return p.ppid == run.cmd.Process.Pid && len(p.argv) > 0 && p.argv[0] == podinit.Arg0
	})
	require.Len(t, inits, 1, "the sandbox's init")
	initPID := inits[0].pid

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGKILL))
	_ = run.cmd.Wait()
	mine := func(p procEntry) bool { return strings.Contains(strings.Join(p.argv, " "), marker) }
	assert.Eventually(t, func() bool { return len(processes(mine)) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the agent outlived the sandbox: %v", processes(mine))
	// The init's exit is what takes its namespaces and mounts down; a
	// zombie has exited, and only the host's init, its new parent, can
	// reap it now.
	assert.Eventually(t, func() bool { st := procState(initPID); return st == "" || st == "Z" }, 10*time.Second, 20*time.Millisecond,
		"init %d outlived the sandbox (state %s)", initPID, procState(initPID))

	run = startSandboxProcEnv(t, []string{"TMPDIR=" + tmp}, n.bin, "sandbox", "run", "--name", "agent", "--server-url", n.w.NATSURL,
		"--token-file", n.token, "--state-dir", n.state, "--listen-addr", "127.0.0.1", "--", "sh", "-c", "(sleep "+marker+" &) ; exit 3")
	err := run.cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "output:\n%s", &run.out)
	assert.Equal(t, 3, ee.ExitCode(), "sandbox run exits with the agent's code")
	assert.Empty(t, processes(mine), "the agent's orphan died with its PID namespace")
	leftovers, _ := filepath.Glob(filepath.Join(tmp, "lattice-resolv-*"))
	assert.Empty(t, leftovers)
}

// tmpDir is a TMPDIR for the sandbox, where its inits make their
// resolv.conf: the test's own, so that other tests' files are not counted.
func (n *nsWorld) tmpDir(t *testing.T) string {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(n.state), "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(tmp, unprivileged, unprivileged))
	}
	return tmp
}

// procEntry is a process as /proc shows it.
type procEntry struct {
	pid, ppid int
	argv      []string
}

// processes lists the processes other than the test's own that match.
func processes(match func(procEntry) bool) []procEntry {
	var ps []procEntry
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p procEntry
		if _, err := fmt.Sscanf(e.Name(), "%d", &p.pid); err != nil || p.pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue // gone, or a zombie
		}
		p.argv = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(st), ')'); i < 0 {
			continue
		} else if _, err := fmt.Sscanf(string(st[i+1:]), " %s %d", new(string), &p.ppid); err != nil {
			continue
		}
		if match(p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// procState is the state letter of process pid ("R", "S", "Z", ...), or
// "" if there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+3 > len(b) {
		return ""
	}
	return string(b[i+2 : i+3])
}

// TestNamespaceIsolationRefused: where user namespaces cannot be made (here
// user.max_user_namespaces=0 in a user namespace of the test's own), `sandbox
// start` refuses, naming the sysctl, the fix and --isolation proxy; with
// --isolation proxy it starts and says so.
func TestNamespaceIsolationRefused(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	w := webPeer(t)
	self, err := os.Executable()
	require.NoError(t, err)
	run := func(extra ...string) (string, error) {
		return sandboxStartIn(t, unshare, `echo 0 > /proc/sys/user/max_user_namespaces`, self, w.NATSURL, extra...)
	}
	out, err := run()
	require.Error(t, err, "start must refuse:\n%s", out)
	assert.Contains(t, out, "unprivileged user namespaces are disabled (user.max_user_namespaces=0): set it above 0")
	assert.Contains(t, out, "or pass --isolation proxy")

	out, _ = run("--isolation", "proxy")
	assert.Contains(t, out, "sandbox: isolation proxy:", "start says which isolation is in force")

	// A runtime's masked /proc, as Docker leaves it: the PID namespace
	// gets no /proc of its own, and start says so.
	if st, err := os.Stat("/proc/irq"); err == nil && st.IsDir() {
		out, err = sandboxStartIn(t, unshare, `mount -t tmpfs tmpfs /proc/irq`, self, w.NATSURL)
		require.Error(t, err, "start must refuse:\n%s", out)
		assert.Contains(t, out, "mounting /proc for the agent's PID namespace")
		assert.Contains(t, out, "procMount: Unmasked")
	}
}

// sandboxStartIn runs `lattice sandbox start` in a user and mount namespace of
// its own after setup (a shell command), until it exits or says which
// isolation is in force, then stops it.
func sandboxStartIn(t *testing.T, unshare, setup, self, natsURL string, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"-Urm", "sh", "-c", setup + ` && exec "$@"`, "sh", self,
		"sandbox", "start", "--name", "agent", "--server-url", natsURL, "--token", meshtest.Token,
		"--state-dir", "mem:", "--listen-addr", "127.0.0.1"}, extra...)
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), execMainEnv+"=1")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "sandbox: isolation") && time.Now().Before(deadline) {
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	return out.String(), <-done
}

// TestNamespaceSpareLeavesNothing: a sandbox daemon keeps an agent's init
// made ahead (a spare), and makes another when an agent takes it; neither
// a stop nor SIGKILL of the daemon leaves the spare (and with it its
// namespaces, mounts and resolv.conf) behind.
func TestNamespaceSpareLeavesNothing(t *testing.T) {
	n := newNSWorld(t)
	tmp := n.tmpDir(t)
	start := func() (daemon, spare int) {
		n.daemon = startSandboxProcEnv(t, []string{"TMPDIR=" + tmp}, n.bin, "sandbox", "start", "--name", "agent", "--server-url", n.w.NATSURL,
			"--token-file", n.token, "--state-dir", n.state, "--listen-addr", "127.0.0.1")
		n.daemon.wait(t, `control socket (\S+)`)
		daemon = n.daemon.cmd.Process.Pid
		inits := func() []procEntry {
			return processes(func(p procEntry) bool { return p.ppid == daemon && len(p.argv) > 0 && p.argv[0] == podinit.Arg0 })
		}
		require.Eventually(t, func() bool { return len(inits()) == 1 }, 30*time.Second, 20*time.Millisecond, "the daemon's spare init: %v", inits())
		first := inits()[0].pid
		_, _, code := n.exec(t, "sh", "-c", "exit 4")
		require.Equal(t, 4, code, "the agent's exit code")
		require.Eventually(t, func() bool { p := inits(); return len(p) == 1 && p[0].pid != first }, 30*time.Second, 20*time.Millisecond,
			"the next spare init: %v", inits())
		return daemon, inits()[0].pid
	}
	gone := func(pid int) bool { st := procState(pid); return st == "" || st == "Z" }

	_, spare := start()
	n.daemon.stop(t)
	assert.True(t, gone(spare), "the spare init %d outlived the daemon's stop (state %s)", spare, procState(spare))

	_, spare = start()
	require.NoError(t, n.daemon.cmd.Process.Signal(syscall.SIGKILL))
	_ = n.daemon.cmd.Wait()
	assert.Eventually(t, func() bool { return gone(spare) }, 10*time.Second, 20*time.Millisecond,
		"the spare init %d outlived the daemon's SIGKILL (state %s)", spare, procState(spare))
	leftovers, _ := filepath.Glob(filepath.Join(tmp, "lattice-resolv-*"))
	assert.Empty(t, leftovers)
}
