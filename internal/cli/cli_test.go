package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExecuteUsageErrors: every way of calling a command wrongly exits
// with ExitUsage and says what was wrong, including a mistyped
// subcommand of a group, which cobra alone answers with help and 0.
func TestExecuteUsageErrors(t *testing.T) {
	newRoot := func() *cobra.Command {
		root := &cobra.Command{Use: "prog"}
		Configure(root)
		group := &cobra.Command{Use: "group", Short: "a group"}
		group.AddCommand(&cobra.Command{Use: "leaf", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
		root.AddCommand(group)
		return root
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"root help", []string{}, ExitOK, "Usage:"},
		{"group help", []string{"group"}, ExitOK, "Usage:"},
		{"leaf", []string{"group", "leaf"}, ExitOK, ""},
		{"unknown command", []string{"bogus"}, ExitUsage, `prog: unknown command "bogus"`},
		{"unknown subcommand", []string{"group", "bogus"}, ExitUsage, `prog: unknown command "bogus" for "prog group"` + "\nRun 'prog group --help' for usage.\n"},
		{"stray argument", []string{"group", "leaf", "x"}, ExitUsage, `unknown command "x" for "prog group leaf"`},
		{"unknown flag", []string{"group", "--bogus"}, ExitUsage, "unknown flag: --bogus"},
		{"help topic", []string{"help", "group", "leaf"}, ExitOK, "Usage:\n  prog group leaf"},
		{"unknown help topic", []string{"help", "bogus"}, ExitUsage, `prog: unknown help topic "bogus"`},
		{"unknown help subtopic", []string{"help", "group", "bogus"}, ExitUsage, `unknown help topic "group bogus"`},
		{"unknown completion shell", []string{"completion", "tcsh"}, ExitUsage, `unknown command "tcsh" for "prog completion"`},
		{"completion stray argument", []string{"completion", "bash", "x"}, ExitUsage, `unknown command "x" for "prog completion bash"`},
		{"completion", []string{"completion", "bash"}, ExitOK, "bash completion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Execute(context.Background(), newRoot(), tc.args, &out, &errOut)
			assert.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", out.String(), errOut.String())
			assert.Contains(t, out.String()+errOut.String(), tc.want)
		})
	}
}

func TestMetricsFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   MetricsFlags
		wantErr string
	}{
		{"off", MetricsFlags{}, ""},
		{"loopback", MetricsFlags{Listen: "127.0.0.1:9090"}, ""},
		{"remote allowed", MetricsFlags{Listen: "0.0.0.0:9090", AllowRemote: true}, ""},
		{"remote", MetricsFlags{Listen: "0.0.0.0:9090"}, "--metrics-listen: metrics: refusing to listen beyond loopback: 0.0.0.0:9090 (0.0.0.0); use 127.0.0.1:PORT, or allow it explicitly (--metrics-allow-remote)"},
		{"no port", MetricsFlags{Listen: "localhost"}, `--metrics-listen: metrics: listen address "localhost": address localhost: missing port in address`},
		{"negative peer limit, no listener", MetricsFlags{PeerLimit: -1}, "--metrics-peer-limit -1: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.flags.Check()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.wantErr, err.Error())
			assert.ErrorAs(t, err, new(UsageError))
		})
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("s3cret\n"), mode))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	private, open := write("private", 0o600), write("open", 0o644)
	missing, sub := filepath.Join(dir, "missing"), filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o700))
	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{"private", private, ""},
		{"readable by others", open, "secret file " + open + " has mode -rw-r--r--; make it private: chmod 600 " + open},
		{"missing", missing, `secret file "` + missing + `": no such file or directory`},
		{"directory", sub, `secret file "` + sub + `" is a directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ReadSecretFile(tc.path)
			if tc.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, "s3cret\n", string(b))
				return
			}
			assert.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestCheckHostPort(t *testing.T) {
	for _, tc := range []struct {
		in       string
		zeroPort bool
		wantErr  string
	}{
		{"relay.example.net:443", false, ""},
		{"[2001:db8::1]:3478", false, ""},
		{"127.0.0.1:0", true, ""},
		{":1080", true, ""},
		{"127.0.0.1:0", false, `port "0": want a number 1-65535`},
		{":443", false, "want HOST:PORT"},
		{"relay.example.net", false, "missing port in address"},
		{"relay.example.net:https", false, `port "https": want a number 1-65535`},
		{"127.0.0.1:65536", true, `port "65536": want a number 0-65535`},
		{"", false, "missing port in address"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := CheckHostPort(tc.in, tc.zeroPort)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestCheckNodeFlags(t *testing.T) {
	assert.NoError(t, CheckNodeFlags("web-1", 51820, "tcp"))
	assert.NoError(t, CheckNodeFlags("web-1", 0, "race"))
	for _, tc := range []struct {
		name, node string
		port       int
		transport  string
		wantErr    string
	}{
		{"name", "Web 1", 0, "tcp", `--name "Web 1": use lowercase letters, digits and hyphens (e.g. "web-1")`},
		{"port", "web-1", 65536, "tcp", "--port 65536: want 0-65535 (0: any free port)"},
		{"transport", "web-1", 0, "udp", `--relay-transport "udp": want tcp, quic, race`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckNodeFlags(tc.node, tc.port, tc.transport)
			assert.EqualError(t, err, tc.wantErr)
			assert.ErrorAs(t, err, new(UsageError))
		})
	}
}
