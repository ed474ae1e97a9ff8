package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSandboxExecsLatticeSandbox: `lattice sandbox ARGS` becomes
// lattice-sandbox ARGS, in the same process, when lattice-sandbox lies
// beside lattice and can be run; otherwise lattice runs the command
// itself. Other commands never do.
func TestSandboxExecsLatticeSandbox(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		sandbox string      // lattice-sandbox's content; "" for none
		mode    os.FileMode // its mode
		args    []string
		want    string // output, %d the process's ID
	}{
		{"beside", "#!/bin/sh\necho \"lattice-sandbox $$ $*\"\n", 0o755, []string{"sandbox", "start", "--name", "a b"}, "lattice-sandbox %d sandbox start --name a b\n"},
		{"none", "", 0, []string{"sandbox", "start"}, "lattice: --name and --control are required\nRun 'lattice sandbox start --help' for usage.\n"},
		{"not executable", "#!/bin/sh\necho no\n", 0o644, []string{"sandbox", "start"}, "lattice: --name and --control are required\nRun 'lattice sandbox start --help' for usage.\n"},
		{"another command", "#!/bin/sh\necho no\n", 0o755, []string{"up"}, "lattice: --control is required: the URL of 'lattice control'\nRun 'lattice up --help' for usage.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "lattice")
			require.NoError(t, os.WriteFile(bin, b, 0o755))
			if tc.sandbox != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, sandboxBinary), []byte(tc.sandbox), tc.mode))
			}
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(os.Environ(), execMainEnv+"=1", "LATTICE_TOKEN=")
			out, _ := cmd.CombinedOutput()
			want := tc.want
			if tc.name == "beside" {
				want = fmt.Sprintf(tc.want, cmd.Process.Pid)
			}
			assert.Equal(t, want, string(out))
		})
	}
}
