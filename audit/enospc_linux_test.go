package audit

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/testdisk"
)

// TestDiskFull: on a full disk the writer fails with ENOSPC and stays
// failed (so the sandbox denies new flows); once space is back, Open
// repairs what the failure left and the log verifies, checkpoint
// included.
func TestDiskFull(t *testing.T) {
	dir := testdisk.Small(t, "256k")
	path := filepath.Join(dir, "audit.jsonl")
	w, err := Open(path)
	require.NoError(t, err)
	for i := 1; i <= 20; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	require.NoError(t, w.Sync())
	filler := filepath.Join(dir, "filler")
	testdisk.Fill(t, filler)

	var werr error
	for i := 21; i < 10000 && werr == nil; i++ {
		werr = w.Write(testEvent(i))
	}
	require.Error(t, werr)
	assert.True(t, errors.Is(werr, syscall.ENOSPC), "%v", werr)
	assert.ErrorContains(t, werr, "audit: write "+path)
	assert.ErrorIs(t, w.Write(testEvent(1)), syscall.ENOSPC, "every later write fails")
	_ = w.Close()

	require.NoError(t, os.Remove(filler))
	w, err = Open(path)
	require.NoError(t, err, "a restart after the disk filled works")
	require.NoError(t, w.Write(Event{Kind: "start"}))
	require.NoError(t, w.Close())
	rep, err := VerifyFile(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Checkpoint)
	assert.Equal(t, uint64(rep.Lines), rep.Checkpoint.Seq)
	assert.GreaterOrEqual(t, rep.Lines, 21)
	torn, err := filepath.Glob(path + ".torn-*")
	require.NoError(t, err)
	t.Logf("failed with %v; %d lines, torn lines moved aside: %d", werr, rep.Lines, len(torn))
	require.LessOrEqual(t, len(torn), 1)
	if len(torn) == 1 {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Contains(t, string(data), "repaired a torn last line")
	}
}
