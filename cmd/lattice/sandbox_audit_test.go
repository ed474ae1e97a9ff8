package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
)

// TestSandboxAuditVerify: lattice sandbox audit verify passes a whole log
// with its checkpoint, fails a truncated one naming the cut, and warns
// when there is no checkpoint to tell.
func TestSandboxAuditVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.Open(path)
	require.NoError(t, err)
	for i := 0; i < 4; i++ {
		require.NoError(t, w.Write(audit.Event{Kind: "egress", Decision: "deny", Dst: "127.0.0.1:22", Rule: "loopback"}))
	}
	require.NoError(t, w.Close())

	var out, errOut strings.Builder
	require.Equal(t, 0, execute(t.Context(), []string{"sandbox", "audit", "verify", path}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "ok, 4 lines")
	assert.Contains(t, out.String(), "at line 4 agrees")

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(data), "\n")
	require.NoError(t, os.WriteFile(path, []byte(lines[0]+lines[1]), 0o600))
	out.Reset()
	errOut.Reset()
	assert.Equal(t, exitFailure, execute(t.Context(), []string{"sandbox", "audit", "verify", path}, &out, &errOut))
	assert.Contains(t, errOut.String(), "log was truncated")
	assert.Contains(t, errOut.String(), "records line 4, but the log ends at line 2")

	require.NoError(t, os.Remove(audit.CheckpointPath(path)))
	out.Reset()
	errOut.Reset()
	require.Equal(t, 0, execute(t.Context(), []string{"sandbox", "audit", "verify", path}, &out, &errOut), errOut.String())
	assert.Contains(t, errOut.String(), "no checkpoint")
}
