package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/syncbuf"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

// execMainEnv makes the test binary run lattice's main instead of the
// tests, so tests can start it as a separate process (as another user).
const execMainEnv = "LATTICE_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execMainEnv) == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(stateRootGuard{m})
}

// syncBuffer is safe to read while a command or logger writes it.
type syncBuffer = syncbuf.Buffer

// start runs lattice with args until the test ends, returning its output
// and a function that stops it and returns the exit code.
func start(t *testing.T, args ...string) (*syncBuffer, *syncBuffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- execute(ctx, args, &out, &errOut) }()
	var once sync.Once
	code := 0
	stop := func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return &out, &errOut, stop
}

func writeFile(t testing.TB, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	return p
}

func TestControlCommand(t *testing.T) {
	tokens := writeFile(t, "tokens", "# join tokens\ncli-test-token-0123456789\nold-token-0123456789abc 2020-01-01T00:00:00Z\n", 0o600)
	state := filepath.Join(t.TempDir(), "control")
	out, errOut, stop := start(t, "control", "--embedded-nats", "--nats-listen", "127.0.0.1:0",
		"--listen-http", "127.0.0.1:0", "--token-file", tokens, "--state-dir", state, "--stun", "127.0.0.1:3478")
	re := regexp.MustCompile(`HTTP registration on (http://[0-9.:]+)/v1/register`)
	require.Eventually(t, func() bool { return re.MatchString(out.String()) }, 10*time.Second, 10*time.Millisecond, "output: %s\n%s", out, errOut)
	base := re.FindStringSubmatch(out.String())[1]

	k := key.NewPrivate()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := controlapi.RegisterHTTP(ctx, netx.OS, base, controlapi.Join{Token: "cli-test-token-0123456789", Name: "cli-node", Key: k})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:3478"}, resp.STUN)
	_, err = controlapi.RegisterHTTP(ctx, netx.OS, base, controlapi.Join{Token: "old-token-0123456789abc", Name: "late", Key: k})
	require.ErrorContains(t, err, "expired")

	assert.Equal(t, exitOK, stop())
	assert.Contains(t, out.String(), "control: registry in "+filepath.Join(state, "registry.json")+"\n")
	assert.Contains(t, out.String(), "control: stopped (1 registered, 1 refused)")
	b, err := os.ReadFile(filepath.Join(state, "registry.json"))
	require.NoError(t, err, "the registry is kept in --state-dir")
	assert.Contains(t, string(b), "cli-node")
}

// TestControlStateDir: control says where its registry is, keeps it in
// --state-dir (or the old --data-dir), and by default in the same tree as
// the other commands' state, never in the working directory.
func TestControlStateDir(t *testing.T) {
	def := newControlCmd().Flags().Lookup("state-dir").DefValue
	assert.Equal(t, filepath.Join(cli.DefaultStateDir(), "control"), def)
	assert.True(t, filepath.IsAbs(def), "default %q is not relative to the working directory", def)
	if os.Geteuid() == 0 {
		assert.Equal(t, "/var/lib/lattice/control", def)
	}
	assert.True(t, newControlCmd().Flags().Lookup("data-dir").Hidden, "--data-dir is the old, hidden name")

	tokens := writeFile(t, "tokens", "cli-test-token-0123456789\n", 0o600)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"old flag name", []string{"--data-dir", filepath.Join(dir, "old")}, "control: registry in " + filepath.Join(dir, "old", "registry.json") + "\n"},
		{"explicit file store", []string{"--state-dir", filepath.Join(dir, "unused"), "--store", "file:" + filepath.Join(dir, "r.json")},
			"control: registry in " + filepath.Join(dir, "r.json") + "\n"},
		{"embedded JetStream", []string{"--state-dir", filepath.Join(dir, "kv"), "--store", "kv:lattice"},
			"control: registry in JetStream bucket lattice (data in " + filepath.Join(dir, "kv", "jetstream") + ")\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			args := append([]string{"control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "", "--token-file", tokens}, tc.args...)
			out, errOut, stop := start(t, args...)
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "NATS on") }, 10*time.Second, 10*time.Millisecond, "%s%s", out, errOut)
			assert.Equal(t, exitOK, stop(), "%s", errOut)
			assert.Contains(t, out.String(), tc.want)
			cwd, err := os.ReadDir(".")
			require.NoError(t, err)
			assert.Empty(t, cwd, "control writes nothing in the working directory")
		})
	}
	_, err := os.Stat(filepath.Join(dir, "unused"))
	assert.ErrorIs(t, err, os.ErrNotExist, "with --store file:PATH the state dir is not needed")
}

func TestControlUsageErrors(t *testing.T) {
	good := writeFile(t, "tokens", "cli-test-token-0123456789\n", 0o600)
	secret := writeFile(t, "relay.secret", "0123456789abcdef0123456789abcdef\n", 0o600)
	// Checked before anything listens; were a check missed, control would
	// run on loopback until the test's deadline.
	embedded := []string{"control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "", "--token-file", good, "--state-dir", t.TempDir()}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no tokens", []string{"control", "--embedded-nats"}, exitUsage, "--token-file is required"},
		{"world-readable tokens", []string{"control", "--embedded-nats", "--token-file", writeFile(t, "t", "cli-test-token-0123456789\n", 0o644)}, exitFailure, "chmod 600"},
		{"short token", []string{"control", "--embedded-nats", "--token-file", writeFile(t, "t", "# c\nshort\n", 0o600)}, exitFailure, ":2: token is 5 characters"},
		{"bad expiry", []string{"control", "--embedded-nats", "--token-file", writeFile(t, "t", "cli-test-token-0123456789 tomorrow\n", 0o600)}, exitFailure, ":1: expiry \"tomorrow\""},
		{"no nats", []string{"control", "--token-file", good}, exitUsage, "exactly one of --embedded-nats and --nats-url"},
		{"bad store", []string{"control", "--embedded-nats", "--token-file", good, "--store", "s3:x", "--data-dir", t.TempDir()}, exitUsage, "want file:PATH or kv:BUCKET"},
		{"stun bad listen", []string{"stun", "--listen", "nowhere"}, exitUsage, "--listen \"nowhere\""},
		{"unknown flag", []string{"control", "--frobnicate"}, exitUsage, "unknown flag"},
		{"relay without port", append(embedded, "--relay", "relay.example.net", "--relay-secret-file", secret), exitUsage, `--relay "relay.example.net": missing port in address`},
		{"relay bad fingerprint", append(embedded, "--relay", "relay.example.net:443,3f2a", "--relay-secret-file", secret), exitUsage, `--relay "relay.example.net:443,3f2a": fingerprint "3f2a": want 32 hex bytes`},
		{"stun without port", append(embedded, "--stun", "stun.example.net"), exitUsage, `--stun "stun.example.net": missing port in address`},
		{"advertise without scheme", append(embedded, "--advertise-nats", "control.example.net:4222"), exitUsage, `--advertise-nats "control.example.net:4222": want tls://HOST:PORT or nats://HOST:PORT`},
		{"negative token ttl", append(embedded, "--relay-token-ttl", "-1h"), exitUsage, "--relay-token-ttl -1h0m0s: must be positive"},
		{"nats url without scheme", []string{"control", "--nats-url", "localhost:4222", "--token-file", good, "--state-dir", t.TempDir()}, exitUsage, `--nats-url "localhost:4222": want tls://HOST:PORT or nats://HOST:PORT`},
		{"empty state dir", append(embedded, "--state-dir", ""), exitUsage, "--state-dir is empty"},
		{"negative kv replicas", append(embedded, "--kv-replicas", "-1"), exitUsage, "--kv-replicas -1: must not be negative"},
		{"relay short secret", []string{"relay", "--listen", "127.0.0.1:0", "--secret-file", writeFile(t, "short", "0123456789abcdef\n", 0o600)}, exitFailure, "relay secret in "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			code := execute(ctx, tc.args, &out, &errOut)
			assert.Equal(t, tc.code, code, "stderr: %s", errOut.String())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}

// TestRootHelpListsEveryCommand: lattice --help's overview names every
// command the tree has.
func TestRootHelpListsEveryCommand(t *testing.T) {
	root := newRootCmd()
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		assert.Regexp(t, `(?m)^  lattice `+c.Name()+` `, root.Long, "lattice --help does not mention %s", c.Name())
	}
}

func TestSTUNCommand(t *testing.T) {
	out, errOut, stop := start(t, "stun", "--listen", "127.0.0.1:0")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "stun: serving on 127.0.0.1:") }, 5*time.Second, 10*time.Millisecond, "%s%s", out, errOut)
	assert.Equal(t, exitOK, stop())
	assert.Contains(t, out.String(), "stun: stopped after 0 requests")
}

// TestRelayAndControlTogether starts a relay and a control that issues
// tokens for it, registers a node and connects it to the relay with the
// token and fingerprint control handed out.
func TestRelayAndControlTogether(t *testing.T) {
	secret := writeFile(t, "relay.secret", "0123456789abcdef0123456789abcdef-secret\n", 0o600)
	rout, rerr, rstop := start(t, "relay", "--listen", "127.0.0.1:0", "--secret-file", secret, "--metrics-listen", "127.0.0.1:0")
	addrRE := regexp.MustCompile(`serving QUIC and TCP on ([0-9.:]+)`)
	fpRE := regexp.MustCompile(`fingerprint ([0-9a-f]+)`)
	metricsRE := regexp.MustCompile(`metrics on (http://[0-9.:]+/metrics)`)
	require.Eventually(t, func() bool { return metricsRE.MatchString(rout.String()) }, 10*time.Second, 10*time.Millisecond, "%s%s", rout, rerr)
	relayAddr := addrRE.FindStringSubmatch(rout.String())[1]
	fp := fpRE.FindStringSubmatch(rout.String())[1]

	tokens := writeFile(t, "tokens", "cli-test-token-0123456789\n", 0o600)
	cout, cerr, cstop := start(t, "control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
		"--token-file", tokens, "--data-dir", t.TempDir(), "--relay", relayAddr+","+fp, "--relay-secret-file", secret)
	re := regexp.MustCompile(`HTTP registration on (http://[0-9.:]+)/v1/register`)
	require.Eventually(t, func() bool { return re.MatchString(cout.String()) }, 10*time.Second, 10*time.Millisecond, "%s%s", cout, cerr)

	priv := key.NewPrivate()
	pub := priv.Public()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := controlapi.RegisterHTTP(ctx, netx.OS, re.FindStringSubmatch(cout.String())[1],
		controlapi.Join{Token: "cli-test-token-0123456789", Name: "relayed", Key: priv})
	require.NoError(t, err)
	require.Len(t, resp.Relays, 1)
	assert.Equal(t, fp, resp.Relays[0].Fingerprint)
	c, err := relay.NewClient(relay.ClientConfig{Server: resp.Relays[0].Addr, Fingerprint: resp.Relays[0].Fingerprint,
		Key: pub, Token: relay.Token(resp.RelayToken)})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.WaitConnected(ctx), "the relay accepts control's token")

	mresp, err := http.Get(metricsRE.FindStringSubmatch(rout.String())[1])
	require.NoError(t, err)
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	assert.Contains(t, string(body), "lattice_relay_")
	c.Close()
	assert.Equal(t, exitOK, cstop())
	assert.Equal(t, exitOK, rstop())
}

func TestRelayBindError(t *testing.T) {
	eacces := &net.OpError{Op: "listen", Net: "udp", Err: os.NewSyscallError("bind", syscall.EACCES)}
	other := &net.OpError{Op: "listen", Net: "udp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"eacces", fmt.Errorf("relay: listen udp 0.0.0.0:443: %w", eacces),
			"relay: listen udp 0.0.0.0:443: listen udp: bind: permission denied\n(--listen 0.0.0.0:443: a port below 1024 needs root or CAP_NET_BIND_SERVICE: " +
				`sudo setcap cap_net_bind_service=+ep "$(command -v lattice)", or use a port from 1024 up)`},
		{"in use is left alone", fmt.Errorf("relay: listen udp 0.0.0.0:443: %w", other),
			"relay: listen udp 0.0.0.0:443: listen udp: bind: address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := bindError("0.0.0.0:443", tc.err)
			assert.EqualError(t, err, tc.want)
			assert.ErrorIs(t, err, tc.err, "the cause stays wrapped")
		})
	}
}

// TestRelayPrivilegedPort runs the relay as an unprivileged user on port
// 443 of loopback: the kernel refuses with EACCES and the message says why.
func TestRelayPrivilegedPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the relay as another user")
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	require.NoError(t, err)
	if strings.TrimSpace(string(b)) == "0" {
		t.Skip("net.ipv4.ip_unprivileged_port_start is 0: every user may bind port 443")
	}
	bin, state, _ := unprivilegedSetup(t)
	secret := filepath.Join(state, "relay.secret")
	require.NoError(t, os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef-secret\n"), 0o600))
	require.NoError(t, os.Chown(secret, unprivileged, unprivileged))
	cmd := exec.Command(bin, "relay", "--listen", "127.0.0.1:443", "--secret-file", secret)
	cmd.Env = append(os.Environ(), execMainEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivileged, Gid: unprivileged}}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output: %s", out)
	assert.Equal(t, exitFailure, exit.ExitCode())
	assert.Contains(t, string(out), "permission denied\n(--listen 127.0.0.1:443: a port below 1024 needs root or CAP_NET_BIND_SERVICE")
}
