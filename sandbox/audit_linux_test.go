package sandbox_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/testdisk"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/sandbox"
)

// TestAuditDiskFullFailsClosed: when the audit log's disk fills, new flows
// are denied (not carried on unaudited), with the reason; after space is
// back, a restart on the same state works and its log verifies.
func TestAuditDiskFullFailsClosed(t *testing.T) {
	disk := testdisk.Small(t, "256k")
	m := newMesh(t)
	state := t.TempDir()
	cfg := m.config(t, "agent", state)
	cfg.AuditLog = filepath.Join(disk, "audit.jsonl")
	d := startPod(t, cfg)
	url := overlayURL(m.web.Addr(), 8080, "/")
	eventually(t, 20*time.Second, func() error { _, err := get(t.Context(), d.Dial, url); return err })

	filler := filepath.Join(disk, "filler")
	testdisk.Fill(t, filler)
	var err error
	for i := 0; i < 1000; i++ {
		// The log's last page may hold a few more lines.
		if _, err = d.Dial(t.Context(), "tcp", net.JoinHostPort(m.web.Addr().String(), "8080")); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, sandbox.ErrDenied)
	assert.ErrorContains(t, err, "audit log unavailable (fail-closed; see --audit-fail-open)")
	_, err = get(t.Context(), d.Dial, url)
	require.Error(t, err, "every new flow stays denied")
	_ = d.Close()

	require.NoError(t, os.Remove(filler))
	d2 := startPod(t, cfg)
	eventually(t, 20*time.Second, func() error { _, err := get(t.Context(), d2.Dial, url); return err })
	require.NoError(t, d2.Close())
	rep, err := audit.VerifyFile(cfg.AuditLog)
	require.NoError(t, err)
	require.NotNil(t, rep.Checkpoint)
	data, err := os.ReadFile(cfg.AuditLog)
	require.NoError(t, err)
	if torn, _ := filepath.Glob(cfg.AuditLog + ".torn-*"); len(torn) > 0 {
		assert.Contains(t, string(data), "repaired a torn last line")
	}
	assert.Equal(t, 2, strings.Count(string(data), `"kind":"start"`))
}

// TestAuditDiskFullFailOpen: with AuditFailOpen the sandbox carries on
// unaudited.
func TestAuditDiskFullFailOpen(t *testing.T) {
	disk := testdisk.Small(t, "256k")
	m := newMesh(t)
	cfg := m.config(t, "agent", t.TempDir())
	cfg.AuditLog = filepath.Join(disk, "audit.jsonl")
	cfg.AuditFailOpen = true
	d := startPod(t, cfg)
	url := overlayURL(m.web.Addr(), 8080, "/")
	eventually(t, 20*time.Second, func() error { _, err := get(t.Context(), d.Dial, url); return err })
	testdisk.Fill(t, filepath.Join(disk, "filler"))
	for i := 0; i < 200; i++ {
		_, err := get(t.Context(), d.Dial, url)
		require.False(t, errors.Is(err, sandbox.ErrDenied), "fail-open never denies for the audit log: %v", err)
		require.NoError(t, err)
	}
}
