package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckpointAfterSync(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	for i := 1; i <= 3; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	_, err := os.Stat(CheckpointPath(path))
	require.ErrorIs(t, err, os.ErrNotExist, "no checkpoint before the first fsync")
	require.NoError(t, w.Sync())
	cp, err := ReadCheckpoint(CheckpointPath(path))
	require.NoError(t, err)
	seq, hash := w.Head()
	assert.Equal(t, uint64(3), cp.Seq)
	assert.Equal(t, hash, cp.Hash)
	assert.Equal(t, uint64(3), seq)
	info, err := os.Stat(CheckpointPath(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	require.NoError(t, w.Write(testEvent(4)))
	require.NoError(t, w.Close())
	cp, err = ReadCheckpoint(CheckpointPath(path))
	require.NoError(t, err)
	assert.Equal(t, uint64(4), cp.Seq, "Close seals the last line")
	rep, err := VerifyFile(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Checkpoint)
	assert.Equal(t, uint64(4), rep.Checkpoint.Seq)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 2, "the log and its checkpoint, no temporary file left")
}

// TestVerifyDetectsTruncation: removing the last lines, or all of them,
// or replacing the log with another valid one, leaves a chain that
// verifies; the checkpoint shows it.
func TestVerifyDetectsTruncation(t *testing.T) {
	tests := []struct {
		name    string
		mangle  func(t *testing.T, path string, lines []string)
		wantIs  error
		wantErr string
	}{
		{"last two lines cut", func(t *testing.T, path string, l []string) { writeFile(t, path, strings.Join(l[:3], "")) },
			ErrTruncated, "log was truncated: the checkpoint of 2026-05-04T10:20:35Z records line 5, but the log ends at line 3"},
		{"emptied", func(t *testing.T, path string, l []string) { writeFile(t, path, "") },
			ErrTruncated, "log was truncated: the checkpoint of 2026-05-04T10:20:35Z records line 5, but the log ends at line 0"},
		{"replaced by another log", func(t *testing.T, path string, l []string) {
			require.NoError(t, os.Remove(path))
			w, err := Open(path + ".other")
			require.NoError(t, err)
			for i := 11; i <= 15; i++ {
				require.NoError(t, w.Write(testEvent(i)))
			}
			require.NoError(t, w.Close())
			require.NoError(t, os.Rename(path+".other", path))
		}, ErrRewritten, "log was rewritten: line 5's hash is not the one its checkpoint of 2026-05-04T10:20:35Z records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := logPath(t)
			w := openLog(t, path)
			w.now = func() time.Time { return t0.Add(5 * time.Second) }
			for i := 1; i <= 5; i++ {
				require.NoError(t, w.Write(testEvent(i)))
			}
			require.NoError(t, w.Close())
			_, err := VerifyFile(path)
			require.NoError(t, err)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			tt.mangle(t, path, strings.SplitAfter(string(data), "\n"))

			_, err = VerifyFile(path)
			require.ErrorIs(t, err, tt.wantIs)
			assert.EqualError(t, err, "audit: "+path+": "+tt.wantErr)
		})
	}
}

// TestOpenAfterTruncation: a sandbox restarted on a truncated log starts,
// says so in the log, and keeps the contradicted checkpoint.
func TestOpenAfterTruncation(t *testing.T) {
	path := logPath(t)
	writeLog(t, path, 5)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	writeFile(t, path, strings.Join(strings.SplitAfter(string(data), "\n")[:2], ""))

	w := openLog(t, path)
	require.NoError(t, w.Close())
	rep, err := VerifyFile(path)
	require.NoError(t, err, "the fresh checkpoint agrees with the log as it now is")
	assert.Equal(t, 3, rep.Lines)
	lines := readLogLines(t, path)
	assert.Contains(t, lines[2], `"kind":"audit"`)
	assert.Contains(t, lines[2], "checkpoint records line 5 but the log ends at line 2: the log was truncated; checkpoint moved to audit.log.head.mismatch-")
	asides, err := filepath.Glob(CheckpointPath(path) + ".mismatch-*")
	require.NoError(t, err)
	require.Len(t, asides, 1)
	cp, err := ReadCheckpoint(asides[0])
	require.NoError(t, err)
	assert.Equal(t, uint64(5), cp.Seq)
}

// TestOpenRepairsTornLine: a write cut short leaves a line without its
// newline; Open moves it aside, records that, and the log goes on.
func TestOpenRepairsTornLine(t *testing.T) {
	tests := []struct {
		name      string
		keep      int // complete lines kept
		tornBytes int
		wantLine  string
	}{
		{"after three lines", 3, 40, "40 bytes after line 3"},
		{"only line torn", 0, 10, "10 bytes after line 0"},
		{"newline missing", 2, -1, "after line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := logPath(t)
			writeLog(t, path, 4)
			require.NoError(t, os.Remove(CheckpointPath(path)))
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			l := strings.SplitAfter(string(data), "\n")
			torn := l[tt.keep]
			if tt.tornBytes < 0 {
				torn = strings.TrimSuffix(torn, "\n")
			} else {
				torn = torn[:tt.tornBytes]
			}
			writeFile(t, path, strings.Join(l[:tt.keep], "")+torn)

			w := openLog(t, path)
			require.NoError(t, w.Write(testEvent(9)))
			require.NoError(t, w.Close())
			rep, err := VerifyFile(path)
			require.NoError(t, err)
			assert.Equal(t, tt.keep+2, rep.Lines)
			lines := readLogLines(t, path)
			note := lines[tt.keep]
			assert.Contains(t, note, `"kind":"audit"`)
			assert.Contains(t, note, "repaired a torn last line: ")
			assert.Contains(t, note, tt.wantLine)
			asides, err := filepath.Glob(path + ".torn-*")
			require.NoError(t, err)
			require.Len(t, asides, 1)
			saved, err := os.ReadFile(asides[0])
			require.NoError(t, err)
			assert.Equal(t, torn, string(saved), "the torn bytes are kept")
			assert.Contains(t, note, filepath.Base(asides[0]))
		})
	}
}

func TestReadCheckpointBad(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, data, wantErr string }{
		{"not json", "x", "invalid character 'x' looking for beginning of value"},
		{"unknown field", `{"seq":1,"hash":"` + Genesis + `","x":1}`, `json: unknown field "x"`},
		{"bad hash", `{"seq":1,"hash":"abc"}`, "hash is not a SHA-256"},
		{"seq 0 not genesis", `{"seq":0,"hash":"` + strings.Repeat("a", 64) + `"}`, "seq 0 with a hash other than the genesis value"},
		{"trailing data", `{"seq":1,"hash":"` + Genesis + `"} x`, "data after the JSON object"},
		{"too long", strings.Repeat(" ", maxCheckpointLen+1), "more than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			writeFile(t, p, tc.data)
			_, err := ReadCheckpoint(p)
			require.ErrorIs(t, err, ErrMalformed)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
}

func readLogLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}
