package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/testbin"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// unprivileged is the user the sandbox runs as when the test is root.
const unprivileged = 65534 // nobody

// sandboxProc is `lattice sandbox start` running as its own process.
type sandboxProc struct {
	cmd *exec.Cmd
	out syncBuffer
}

// startSandboxProc runs this test binary as lattice with args, as an
// unprivileged user when the test runs as root.
func startSandboxProc(t testing.TB, bin string, args ...string) *sandboxProc {
	t.Helper()
	return startSandboxProcEnv(t, nil, bin, args...)
}

// startSandboxProcEnv is startSandboxProc with env added to the test's.
func startSandboxProcEnv(t testing.TB, env []string, bin string, args ...string) *sandboxProc {
	t.Helper()
	p := &sandboxProc{cmd: exec.Command(bin, args...)}
	p.cmd.Env = append(append(os.Environ(), execMainEnv+"=1"), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	// A child the sandbox left behind keeps the output pipe open: Wait
	// returns anyway, and the test says what was left.
	p.cmd.WaitDelay = 10 * time.Second
	if os.Geteuid() == 0 {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivileged, Gid: unprivileged}}
	}
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
	return p
}

// wait waits for a line matching re and returns its first group.
func (p *sandboxProc) wait(t testing.TB, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	require.Eventually(t, func() bool {
		m = rx.FindStringSubmatch(p.out.String())
		return m != nil
	}, 30*time.Second, 20*time.Millisecond, "no %q in output:\n%s", re, &p.out)
	return m[1]
}

func (p *sandboxProc) stop(t testing.TB) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	err := p.cmd.Wait()
	require.NoError(t, err, "output:\n%s", &p.out)
	assert.Contains(t, p.out.String(), "sandbox: stopped")
}

// procStatus returns fields of /proc/PID/status.
func procStatus(t testing.TB, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// unprivilegedSetup makes a copy of this test binary that the
// unprivileged user can run (testbin), and a state directory it owns.
func unprivilegedSetup(t testing.TB) (bin, state, token string) {
	t.Helper()
	bin = testbin.ForAnyone(t, "lattice")
	dir := filepath.Dir(bin)
	state = filepath.Join(dir, "state")
	require.NoError(t, os.Mkdir(state, 0o700))
	token = filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte(meshtest.Token+"\n"), 0o600))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(state, unprivileged, unprivileged))
		require.NoError(t, os.Chown(token, unprivileged, unprivileged))
	}
	return bin, state, token
}

// TestSandboxStartUnprivileged: `lattice sandbox start --mode pod` as an
// unprivileged user with no capabilities registers, reaches one peer
// directly and one through the relay, serves curl through SOCKS5, and
// keeps its identity across a restart.
func TestSandboxStartUnprivileged(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("needs curl (make deps installs it)")
	}
	w := meshtest.Start(t)
	web := w.Peer(t, "web")
	vault := w.Peer(t, "vault", func(c *node.Config) { c.ICE.RelayOnly = true })
	for _, p := range []*meshtest.Peer{web, vault} {
		name := p.Node.Identity().Name
		p.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s", name) }))
	}
	bin, state, token := unprivilegedSetup(t)
	args := []string{"sandbox", "start", "--mode", "pod", "--name", "agent", "--server-url", w.NATSURL, "--token-file", token,
		"--state-dir", state, "--socks5", "127.0.0.1:0", "--listen-addr", "127.0.0.1"}

	p := startSandboxProc(t, bin, args...)
	nodeID := p.wait(t, `sandbox: agent \((\S+)\) at`)
	addr := p.wait(t, `\) at (\S+), mode pod`)
	socks := p.wait(t, `SOCKS5 on (\S+) `)
	st := procStatus(t, p.cmd.Process.Pid)
	if os.Geteuid() == 0 {
		assert.Regexp(t, `^65534\s`, st["Uid"], "runs as nobody")
	}
	assert.Equal(t, "0000000000000000", st["CapEff"], "no capabilities")
	assert.Equal(t, "0000000000000000", st["CapPrm"])

	credBytes, err := os.ReadFile(filepath.Join(state, "proxy-credentials"))
	require.NoError(t, err)
	user := strings.TrimSpace(string(credBytes))
	fetch := func(url string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, "-sS", "--max-time", "10", "--socks5-hostname", user+"@"+socks, url).CombinedOutput()
		return string(out), err
	}
	for _, name := range []string{"web", "vault"} {
		var body string
		require.Eventually(t, func() bool {
			body, err = fetch("http://" + name + ":8080/")
			return err == nil
		}, 30*time.Second, 100*time.Millisecond, "%s: %v %s\n%s", name, err, body, &p.out)
		assert.Equal(t, "hello from "+name, body)
	}
	c := sandbox.NewClient(filepath.Join(state, sandbox.SocketName))
	require.Eventually(t, func() bool {
		s, err := c.Status(t.Context())
		if err != nil {
			return false
		}
		paths := map[string]node.PathKind{}
		for _, ps := range s.Peers {
			paths[ps.Peer.Name] = ps.Path
		}
		return paths["web"] == node.PathDirect && paths["vault"] == node.PathRelay
	}, 30*time.Second, 50*time.Millisecond, "web goes direct, vault stays relayed")

	p.stop(t)
	p2 := startSandboxProc(t, bin, args...)
	assert.Equal(t, nodeID, p2.wait(t, `sandbox: agent \((\S+)\) at`), "same node ID after restart")
	assert.Equal(t, addr, p2.wait(t, `\) at (\S+), mode pod`), "same overlay address after restart")
	socks = p2.wait(t, `SOCKS5 on (\S+) `)
	require.Eventually(t, func() bool {
		_, err := fetch("http://web:8080/")
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)
	p2.stop(t)
}

// TestSandboxCommandErrors: bad invocations are refused with the reason.
func TestSandboxCommandErrors(t *testing.T) {
	tok := writeFile(t, "token", "cli-test-token-0123456789\n", 0o600)
	base := []string{"sandbox", "start", "--name", "agent", "--server-url", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no name", []string{"sandbox", "start", "--server-url", "nats://x:1", "--token", "t"}, exitUsage, "--name and --control are required"},
		{"bad name", []string{"sandbox", "start", "--name", "Agent One", "--server-url", "nats://x:1", "--token", "t"}, exitUsage, `"agent-one"`},
		{"no token", []string{"sandbox", "start", "--name", "a", "--server-url", "nats://127.0.0.1:1", "--state-dir", "mem:"}, exitUsage, "a join token is required"},
		{"http control", []string{"sandbox", "start", "--name", "a", "--server-url", "http://127.0.0.1:1", "--token", "t", "--state-dir", "mem:"}, exitFailure, "sandboxes register over NATS only"},
		{"bad mode", append(base, "--mode", "vm"), exitUsage, `--mode: mode "vm": want pod or gvisor`},
		{"bad forward", append(base, "--forward", "web=127.0.0.1:80"), exitUsage, `overlay port "web"`},
		{"open token file", []string{"sandbox", "start", "--name", "a", "--server-url", "nats://127.0.0.1:1", "--token-file", writeFile(t, "t", "tok\n", 0o644)}, exitFailure, "chmod 600"},
		{"bad creds file", append(base, "--proxy-credentials-file", writeFile(t, "c", "nocolon\n", 0o600)), exitFailure, "want one line USER:PASSWORD"},
		{"audit verify missing", []string{"sandbox", "audit", "verify", "/no/such/audit.jsonl"}, exitFailure, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := execute(t.Context(), tc.args, &out, &errOut)
			assert.Equal(t, tc.code, code, "stderr: %s", errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}

// TestNodeFlagErrors: up and sandbox start refuse a bad name, port, relay
// transport or proxy address at once, before registering; they used to
// retry registration forever (or fail after it, as a node config error).
func TestNodeFlagErrors(t *testing.T) {
	tok := writeFile(t, "token", "cli-test-token-0123456789\n", 0o600)
	up := []string{"up", "--userspace", "--control", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:"}
	sb := []string{"sandbox", "start", "--name", "agent", "--control", "nats://127.0.0.1:1", "--token-file", tok, "--state-dir", "mem:"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"up bad name", append(up, "--name", "Web_1"), `--name "Web_1": use lowercase letters, digits and hyphens (e.g. "web-1")`},
		{"up empty name", append(up, "--name", ""), `--name "": use lowercase letters`},
		{"up negative port", append(up, "--port", "-1"), "--port -1: want 0-65535"},
		{"up port too big", append(up, "--port", "70000"), "--port 70000: want 0-65535"},
		{"up empty state dir", append(up, "--state-dir", ""), "--state-dir is empty"},
		{"up relay transport", append(up, "--relay-transport", "udp"), `--relay-transport "udp": want tcp, quic, race`},
		{"sandbox port", append(sb, "--port", "65536"), "--port 65536: want 0-65535"},
		{"sandbox relay transport", append(sb, "--relay-transport", "udp"), `--relay-transport "udp": want tcp, quic, race`},
		{"sandbox socks5 word", append(sb, "--socks5", "localhost"), `--socks5 "localhost": port "localhost": want a number 0-65535`},
		{"sandbox socks5 port", append(sb, "--socks5", "99999"), `--socks5 "99999": port "99999"`},
		{"sandbox platform", append(sb, "--platform", "kvm2"), `--platform "kvm2": want systrap or ptrace`},
		{"sandbox interface", append(sb, "--interface", "wg/0"), `--interface "wg/0": not an interface name`},
		{"sandbox http proxy", append(sb, "--http-proxy", "127.0.0.1:"), `--http-proxy "127.0.0.1:": port ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a missed check retries registration
			defer cancel()
			var out, errOut strings.Builder
			code := execute(ctx, tc.args, &out, &errOut)
			assert.Equal(t, exitUsage, code, "stderr: %s", errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}

// TestControlAndTokenFlags: up and sandbox start take the control URL as
// --control (documented) or --server-url (the older name, hidden), and the
// join token from --token, --token-file or $LATTICE_TOKEN, which they never
// print.
func TestControlAndTokenFlags(t *testing.T) {
	w := meshtest.Start(t)
	tokenFile := writeFile(t, "token", meshtest.Token+"\n", 0o600)
	for _, tc := range []struct {
		name  string
		args  []string
		env   string // $LATTICE_TOKEN
		ready string
	}{
		{"up --control, $LATTICE_TOKEN", []string{"up", "--name", "n1", "--control", w.NATSURL}, meshtest.Token, "up: n1 ("},
		{"up --server-url, --token", []string{"up", "--name", "n2", "--server-url", w.NATSURL, "--token", meshtest.Token}, "", "up: n2 ("},
		{"up --control, --token-file", []string{"up", "--name", "n3", "--control", w.NATSURL, "--token-file", tokenFile}, "", "up: n3 ("},
		{"sandbox --control, $LATTICE_TOKEN", []string{"sandbox", "start", "--name", "s1", "--control", w.NATSURL}, meshtest.Token, "sandbox: s1 ("},
		{"sandbox --server-url, --token-file", []string{"sandbox", "start", "--name", "s2", "--server-url", w.NATSURL, "--token-file", tokenFile}, "", "sandbox: s2 ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LATTICE_TOKEN", tc.env)
			args := append(tc.args, "--state-dir", "mem:", "--listen-addr", "127.0.0.1", "-v")
			if tc.args[0] == "up" {
				args = append(args, "--userspace", "--port", "0")
			}
			out, errOut, stop := start(t, args...)
			require.Eventually(t, func() bool { return strings.Contains(out.String(), tc.ready) }, 30*time.Second, 20*time.Millisecond, "%s%s", out, errOut)
			assert.Equal(t, exitOK, stop(), "%s", errOut)
			assert.NotContains(t, out.String()+errOut.String(), meshtest.Token, "the token is never printed, not even in debug logs")
		})
	}

	t.Setenv("LATTICE_TOKEN", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"up without control", []string{"up", "--token", "t"}, "--control is required"},
		{"up without token", []string{"up", "--control", w.NATSURL}, "a join token is required: --token, --token-file or $LATTICE_TOKEN"},
		{"up with two tokens", []string{"up", "--control", w.NATSURL, "--token", "t", "--token-file", tokenFile}, "give --token or --token-file, not both"},
		{"sandbox without control", []string{"sandbox", "start", "--name", "a", "--token", "t"}, "--name and --control are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			assert.Equal(t, exitUsage, execute(t.Context(), append(tc.args, "--state-dir", "mem:"), &out, &errOut), errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}

	for _, args := range [][]string{{"up", "--help"}, {"sandbox", "start", "--help"}} {
		var out, errOut strings.Builder
		require.Equal(t, exitOK, execute(t.Context(), args, &out, &errOut), errOut.String())
		assert.Contains(t, out.String(), "--control string", "%v documents --control", args)
		assert.Contains(t, out.String(), "--token string", "%v", args)
		assert.NotContains(t, out.String(), "--server-url", "%v hides the old name", args)
	}
}

// TestUpPrintsStatusCommand: a node with its own --state-dir says how to
// see its status, and that command works.
func TestUpPrintsStatusCommand(t *testing.T) {
	w := meshtest.Start(t)
	state := filepath.Join(t.TempDir(), "second")
	out, errOut, stop := start(t, "up", "--name", "second", "--control", w.NATSURL, "--token", meshtest.Token,
		"--userspace", "--port", "0", "--listen-addr", "127.0.0.1", "--state-dir", state)
	want := "up: status on " + filepath.Join(state, "lattice.sock") + " (lattice status --state-dir " + state + ")\n"
	require.Eventually(t, func() bool { return strings.Contains(out.String(), want) }, 30*time.Second, 20*time.Millisecond, "%s%s", out, errOut)

	var sout, serr strings.Builder
	require.Equal(t, exitOK, execute(t.Context(), []string{"status", "--state-dir", state}, &sout, &serr), serr.String())
	assert.Regexp(t, `^second \(\S+\) 100\.`, sout.String())
	assert.Equal(t, exitOK, stop(), "%s", errOut)

	assert.Equal(t, "lattice status", statusCommand(cli.DefaultStateDir()))
	t.Chdir(filepath.Dir(state))
	assert.Equal(t, "lattice status --state-dir "+state, statusCommand("second"), "a relative --state-dir is printed absolute")
}
