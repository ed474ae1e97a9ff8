package sandboxcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/proxy"
	"github.com/latticelab/lattice/sandbox"
)

// TestSandboxNames: --name completes the sandboxes under the state root
// that have a control socket.
func TestSandboxNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"agent-1", "stopped", "agent-2"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, n), 0o700))
	}
	for _, n := range []string{"agent-1", "agent-2"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n, sandbox.SocketName), nil, 0o600))
	}
	assert.Equal(t, []string{"agent-1", "agent-2"}, sandboxNames(dir), "only sandboxes with a control socket")
	assert.Empty(t, sandboxNames(filepath.Join(dir, "none")))
}

// statusDriver is a driver that only reports a status.
type statusDriver struct {
	sandbox.IsolationDriver
	st sandbox.Status
}

func (d statusDriver) Status() sandbox.Status { return d.st }

// TestPrintProxiesSaysWhereTheCredentialsAre: start's proxy lines name the
// file the credentials are in: --proxy-credentials-file's when given, else
// the one generated in the state dir.
func TestPrintProxiesSaysWhereTheCredentialsAre(t *testing.T) {
	d := statusDriver{st: sandbox.Status{SOCKS5: "127.0.0.1:1080", HTTPProxy: "127.0.0.1:3128"}}
	creds := &proxy.Credentials{Username: "u", Password: "p"}
	for _, tc := range []struct {
		name, flag, want string
	}{
		{"generated", "", "in /state/proxy-credentials"},
		{"from --proxy-credentials-file", "/etc/agent/creds", "in /etc/agent/creds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printProxies(&out, d, sandbox.DriverConfig{StateDir: "/state", ProxyCredentials: creds}, tc.flag)
			assert.Equal(t, "sandbox: SOCKS5 on 127.0.0.1:1080 (credentials "+tc.want+")\n"+
				"sandbox: HTTP proxy on 127.0.0.1:3128 (credentials "+tc.want+")\n", out.String())
		})
	}
}

// TestRunningDir: exec and agent find a sandbox by --state-dir or by a
// --name checked as start checks it, never a path outside the sandboxes'
// directory.
func TestRunningDir(t *testing.T) {
	root := filepath.Join(cli.DefaultStateDir(), "sandbox")
	for _, tc := range []struct {
		name, stateDir, sandbox, want, wantErr string
	}{
		{name: "state dir", stateDir: "/run/agent", want: "/run/agent"},
		{name: "state dir wins", stateDir: "/run/agent", sandbox: "agent-1", want: "/run/agent"},
		{name: "name", sandbox: "agent-1", want: filepath.Join(root, "agent-1")},
		{name: "neither", wantErr: "give --state-dir or --name"},
		{name: "path in name", sandbox: "../../etc", wantErr: `--name "../../etc": not a sandbox name (lowercase letters, digits and hyphens)`},
		{name: "upper case", sandbox: "Agent", wantErr: `--name "Agent": not a sandbox name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := runningDir(tc.stateDir, tc.sandbox)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.ErrorAs(t, err, new(cli.UsageError))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, dir)
		})
	}
}
