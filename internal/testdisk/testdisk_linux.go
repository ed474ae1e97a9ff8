// Package testdisk gives tests a disk that fills up: a small tmpfs of
// their own, for what a full disk (ENOSPC) does to a writer.
package testdisk

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Small mounts a tmpfs of size (as mount's size= takes it: "256k") on a
// temporary directory, unmounted when the test ends, and returns the
// directory. It skips the test, saying why, without root or when the
// mount fails.
func Small(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// Fill writes to a new file at path until the disk is full, and requires
// that the write failed with ENOSPC.
func Fill(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
	}
}
