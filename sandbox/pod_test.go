package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// TestPodReachesPeersAndKeepsIdentity: a pod sandbox registers, reaches
// one peer directly and another through the relay, by name and by
// address, and comes back after a restart with the same node ID, keys and
// overlay address.
func TestPodReachesPeersAndKeepsIdentity(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	d := startPod(t, m.config(t, "agent", state))
	n := d.Node()
	meshtest.WaitPath(t, n, "web", node.PathDirect, 20*time.Second)
	meshtest.WaitPath(t, n, "vault", node.PathRelay, 5*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, url := range []string{"http://web:8080/", "http://vault.lattice:8080/", overlayURL(m.vault.Addr(), 8080, "/")} {
		var body string
		eventually(t, 20*time.Second, func() (err error) {
			body, err = get(ctx, d.Dial, url)
			return err
		})
		assert.Contains(t, body, "you are "+n.Address().Addr().String(), "%s sees the sandbox's overlay address", url)
	}
	var st node.PeerStatus
	for _, p := range n.Status() {
		if p.Peer.Name == "vault" {
			st = p
		}
	}
	assert.Positive(t, st.TxRelay, "vault's traffic went through the relay")
	assert.Zero(t, st.TxDirect)

	id := n.Identity()
	require.NoError(t, d.Close())
	d2 := startPod(t, m.config(t, "agent", state))
	id2 := d2.Node().Identity()
	assert.Equal(t, id.NodeID, id2.NodeID)
	assert.Equal(t, id.Address, id2.Address)
	assert.True(t, id.Private.Equal(id2.Private), "the restarted pod kept its private key")
	eventually(t, 20*time.Second, func() error {
		_, err := get(ctx, d2.Dial, "http://web:8080/")
		return err
	})

	rep, err := audit.VerifyFile(filepath.Join(state, "audit.jsonl"))
	require.NoError(t, err)
	assert.Greater(t, rep.Lines, 4, "start, egress decisions, stop, start again")
}

// TestCurlThroughProxies: a real client, curl, fetches a page from a
// peer's overlay address through the SOCKS5 proxy (names resolved by the
// sandbox) and the HTTP proxy, and is refused without the credentials.
func TestCurlThroughProxies(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("needs curl (make deps installs it)")
	}
	m := newMesh(t)
	d := startPod(t, m.config(t, "agent", "mem:"))
	st := d.Status()
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, append([]string{"-sS", "--max-time", "10"}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	user := creds.Username + ":" + creds.Password
	eventually(t, 20*time.Second, func() error {
		if out, code := run("--socks5-hostname", user+"@"+st.SOCKS5, "http://web:8080/"); code != 0 {
			return errors.New(out)
		}
		return nil
	})
	out, code := run("--socks5-hostname", user+"@"+st.SOCKS5, "http://web:8080/")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "hello from web")

	out, code = run("--socks5-hostname", st.SOCKS5, "http://web:8080/")
	assert.NotEqual(t, 0, code, "no credentials: refused")
	assert.NotContains(t, out, "hello")
	out, code = run("--socks5-hostname", "agent:wrong@"+st.SOCKS5, "http://web:8080/")
	assert.NotEqual(t, 0, code, "wrong password: refused")
	assert.NotContains(t, out, "hello")

	// vault is reached through the relay; its first connection may wait
	// for WireGuard's handshake there.
	eventually(t, 30*time.Second, func() error {
		if out, code := run("-x", "http://"+user+"@"+st.HTTPProxy, "http://vault:8080/"); code != 0 {
			return errors.New(out)
		}
		return nil
	})
	out, code = run("-x", "http://"+user+"@"+st.HTTPProxy, "http://vault:8080/")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "hello from vault")
	out, code = run("-x", "http://"+st.HTTPProxy, "-w", "%{http_code}", "http://vault:8080/")
	assert.Contains(t, out, "407")
	assert.NotContains(t, out, "hello")
	_ = code
}

// TestMetadataDeniedByDefault: with no policy, the cloud metadata service
// is refused at once, in the audit log, and the refusal names the rule.
func TestMetadataDeniedByDefault(t *testing.T) {
	m := newMesh(t)
	state := t.TempDir()
	d := startPod(t, m.config(t, "agent", state))
	start := time.Now()
	_, err := d.Dial(t.Context(), "tcp", "169.254.169.254:80")
	require.ErrorIs(t, err, sandbox.ErrDenied)
	assert.Less(t, time.Since(start), time.Second)
	assert.Contains(t, err.Error(), "metadata")
	require.NoError(t, d.Close())
	b, err := os.ReadFile(filepath.Join(state, "audit.jsonl"))
	require.NoError(t, err)
	assert.Regexp(t, `"kind":"egress".*"decision":"deny".*169\.254\.169\.254:80`, string(b))
}

// TestBadCredentialsRefused: a credentials file others can read, or one
// that is corrupt, stops the sandbox before anything else happens, and
// the file is left as it was.
func TestBadCredentialsRefused(t *testing.T) {
	m := newMesh(t)
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"readable by others", `{"version":1}`, 0o644, "chmod 600"},
		{"corrupt", `{"version":1, "private_key": "AAA`, 0o600, "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			path := filepath.Join(state, "credentials.json")
			require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o600))
			require.NoError(t, os.Chmod(path, tc.mode))
			d, err := sandbox.NewPod(m.config(t, "agent", state))
			require.NoError(t, err)
			err = d.Start(t.Context())
			require.ErrorContains(t, err, tc.want)
			require.NoError(t, d.Close())
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.content, string(b), "the identity file is untouched")
		})
	}
}

func TestConfigErrors(t *testing.T) {
	good := sandbox.DriverConfig{Name: "a", ServerURL: "nats://127.0.0.1:4222", Token: "t"}
	for _, tc := range []struct {
		name string
		edit func(*sandbox.DriverConfig)
		want string
	}{
		{"http control", func(c *sandbox.DriverConfig) { c.ServerURL = "https://control" }, `sandboxes register over NATS only`},
		{"no name", func(c *sandbox.DriverConfig) { c.Name = "" }, "sandbox: no name"},
		{"no token", func(c *sandbox.DriverConfig) { c.Token = "" }, "sandbox: no join token"},
		{"duplicate forward", func(c *sandbox.DriverConfig) {
			c.Forwards = []sandbox.Forward{{Port: 80, Target: "127.0.0.1:1"}, {Port: 80, Target: "127.0.0.1:2"}}
		}, "overlay port 80 is forwarded twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, err := sandbox.NewPod(cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseForward(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{in: "8080=127.0.0.1:3000", want: "8080=127.0.0.1:3000"},
		{in: "3000", want: "3000=127.0.0.1:3000"},
		{in: "80=[::1]:8080", want: "80=[::1]:8080"},
		{in: "80=localhost:8080", want: "80=localhost:8080"},
		{in: "http=127.0.0.1:80", wantErr: `forward "http=127.0.0.1:80": overlay port "http": want a number 1-65535 (PORT=HOST:PORT)`},
		{in: "0=127.0.0.1:80", wantErr: `overlay port "0"`},
		{in: "70000=127.0.0.1:80", wantErr: `overlay port "70000"`},
		{in: "80=127.0.0.1", wantErr: `target "127.0.0.1": want HOST:PORT`},
		{in: "80=:3000", wantErr: `has no host`},
		{in: "80=example.com:80", wantErr: `target host "example.com": want an IP address or localhost`},
		{in: "80=127.0.0.1:x", wantErr: `target port "x"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f, err := sandbox.ParseForward(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, f.String())
		})
	}
}

func TestRunPassesExitCodeAndProxy(t *testing.T) {
	m := newMesh(t)
	cfg := m.config(t, "agent", "mem:")
	cfg.Isolation = sandbox.IsolationProxy
	d := startPod(t, cfg)
	var out strings.Builder
	code, err := d.Run(t.Context(), []string{"sh", "-c", `echo "$ALL_PROXY $LATTICE_ADDRESS"; exit 7`}, sandbox.Stdio{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 7, code)
	assert.Contains(t, out.String(), "socks5h://agent:correct-horse-battery-staple@"+d.Status().SOCKS5)
	assert.Contains(t, out.String(), d.Node().Address().Addr().String())
	_, err = d.Run(t.Context(), []string{"/no/such/agent"}, sandbox.Stdio{})
	assert.ErrorContains(t, err, "/no/such/agent")
}
