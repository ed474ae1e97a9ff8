package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asSudo makes the test a process that `sudo` started for nobody (65534),
// or skips when it is not root.
func asSudo(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the files a root process creates under sudo")
	}
	t.Setenv("SUDO_UID", "65534")
	t.Setenv("SUDO_GID", "65534")
}

// ownerOf is path's uid:gid, not following a symbolic link.
func ownerOf(t *testing.T, path string) [2]uint32 {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint32{st.Uid, st.Gid}
}

var (
	rootOwned   = [2]uint32{0, 0}
	sudoerOwned = [2]uint32{65534, 65534}
)

// TestRunUnderSudoGivesOutputs: `sudo lattice-lab run --capture DIR
// --report DIR` leaves the captures, the report and the directories made
// for them to the user who ran sudo; a directory that was there stays
// whose it was.
func TestRunUnderSudoGivesOutputs(t *testing.T) {
	asSudo(t)
	base := t.TempDir()
	captures := filepath.Join(base, "captures") // there already, root's
	require.NoError(t, os.Mkdir(captures, 0o755))
	reports := filepath.Join(base, "out", "report") // made by run
	code, out, stderr := run(t, "run", "../../scenarios/pair-full-cone+full-cone.yaml", "--capture", captures, "--report", reports)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)

	assert.Equal(t, rootOwned, ownerOf(t, base))
	assert.Equal(t, rootOwned, ownerOf(t, captures))
	pcaps, err := filepath.Glob(filepath.Join(captures, "*.pcapng"))
	require.NoError(t, err)
	require.NotEmpty(t, pcaps, out)
	for _, p := range pcaps {
		assert.Equal(t, sudoerOwned, ownerOf(t, p), p)
	}

	var made []string
	require.NoError(t, filepath.WalkDir(filepath.Join(base, "out"), func(p string, _ fs.DirEntry, err error) error {
		made = append(made, p)
		return err
	}))
	for _, f := range []string{"result.json", "junit.xml", "report.html", "captures"} {
		assert.Contains(t, made, filepath.Join(reports, f))
	}
	assert.Greater(t, len(made), len(pcaps)+5, "the captures are copied into the report: %v", made)
	for _, p := range made {
		assert.Equal(t, sudoerOwned, ownerOf(t, p), p)
	}
}

// TestOutputFilesUnderSudo: graph -o and bench's --out, --cpuprofile and
// --memprofile are the user's too, and a file that was there stays
// root's.
func TestOutputFilesUnderSudo(t *testing.T) {
	asSudo(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.dot")
	require.NoError(t, os.WriteFile(existing, nil, 0o644))
	for _, p := range []string{"new.dot", "existing.dot"} {
		code, out, stderr := run(t, "graph", "-o", filepath.Join(dir, p), "builtin:quickstart")
		require.Equal(t, 0, code, "%s\n%s", out, stderr)
	}
	assert.Equal(t, sudoerOwned, ownerOf(t, filepath.Join(dir, "new.dot")))
	assert.Equal(t, rootOwned, ownerOf(t, existing))

	bench := filepath.Join(dir, "bench", "now")
	cpu, heap := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "heap.pprof")
	code, out, stderr := run(t, "bench", "--only", "datapath", "--bytes", "1MiB", "--out", bench, "--cpuprofile", cpu, "--memprofile", heap)
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	for _, p := range []string{filepath.Dir(bench), bench, filepath.Join(bench, "bench.json"), filepath.Join(bench, "bench.svg"), cpu, heap} {
		assert.Equal(t, sudoerOwned, ownerOf(t, p), p)
	}
	assert.Equal(t, rootOwned, ownerOf(t, dir))
}
