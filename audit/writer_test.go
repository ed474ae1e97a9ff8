package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 5, 4, 10, 20, 30, 123456789, time.UTC)

// testEvent is the i'th event of a test log.
func testEvent(i int) Event {
	return Event{
		Time:     t0.Add(time.Duration(i) * time.Second),
		Kind:     "egress",
		Decision: []string{"allow", "deny"}[i%2],
		Proto:    "tcp",
		Src:      "100.64.0.7:41234",
		Dst:      fmt.Sprintf("10.1.2.%d:22", i),
		Rule:     "policy.yaml:8 deny 10.0.0.0/8",
		Detail:   fmt.Sprintf("event %d", i),
	}
}

func logPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "audit.log")
}

func openLog(t *testing.T, path string) *FileWriter {
	t.Helper()
	w, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// writeLog writes events 1..n to a new log at path and closes it.
func writeLog(t *testing.T, path string, n int) {
	t.Helper()
	w := openLog(t, path)
	for i := 1; i <= n; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	require.NoError(t, w.Close())
}

func TestLineFormat(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	require.NoError(t, w.Write(Event{Time: t0.In(time.FixedZone("CEST", 2*3600)), Kind: "start", Detail: "a<b & \"c\"\n"}))
	require.NoError(t, w.Write(Event{Time: t0, Kind: "egress", Decision: "deny", Proto: "tcp", Src: "s", Dst: "d", Rule: "r"}))
	require.NoError(t, w.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(data), "\n")
	require.Len(t, lines, 3)
	assert.Empty(t, lines[2])

	body1 := `{"seq":1,"time":"2026-05-04T10:20:30.123456789Z","kind":"start","detail":"a<b & \"c\"\n","prev":"` + Genesis + `"`
	hash1 := sha256Hex(body1)
	assert.Equal(t, body1+`,"hash":"`+hash1+`"}`+"\n", lines[0], "times in UTC, empty fields omitted, HTML not escaped")

	body2 := `{"seq":2,"time":"2026-05-04T10:20:30.123456789Z","kind":"egress","decision":"deny","proto":"tcp","src":"s","dst":"d","rule":"r","prev":"` + hash1 + `"`
	assert.Equal(t, body2+`,"hash":"`+sha256Hex(body2)+`"}`+"\n", lines[1])
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestGenesis(t *testing.T) {
	assert.Equal(t, sha256Hex("lattice audit log v1"), Genesis)
}

func TestWriteAndVerify(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	seq, hash := w.Head()
	assert.Equal(t, uint64(0), seq)
	assert.Equal(t, Genesis, hash)
	for i := 1; i <= 5; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	require.NoError(t, w.Sync())
	seq, hash = w.Head()
	assert.Equal(t, uint64(5), seq)
	require.NoError(t, w.Close())

	rep, err := VerifyFile(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Checkpoint)
	assert.Equal(t, uint64(5), rep.Checkpoint.Seq)
	rep.Checkpoint = nil
	assert.Equal(t, Report{Lines: 5, First: t0.Add(time.Second), Last: t0.Add(5 * time.Second), LastHash: hash}, rep)
}

func TestWriteFillsTime(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	w.now = func() time.Time { return t0.In(time.FixedZone("X", -3600)) }
	require.NoError(t, w.Write(Event{Kind: "start"}))
	require.NoError(t, w.Close())
	rep, err := VerifyFile(path)
	require.NoError(t, err)
	assert.Equal(t, t0, rep.First)
}

func TestWriteClipsFields(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	long := strings.Repeat("é", 2000) // 2 bytes a rune: cuts land mid-rune
	require.NoError(t, w.Write(Event{Time: t0, Kind: long, Src: long, Rule: long, Detail: long}))
	require.NoError(t, w.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	rec, err := parseLine(bytes.TrimSuffix(data, []byte("\n")))
	require.NoError(t, err)
	for _, f := range []struct {
		name string
		got  string
		max  int
	}{{"kind", rec.Kind, MaxFieldLen}, {"src", rec.Src, MaxFieldLen}, {"rule", rec.Rule, MaxDetailLen}, {"detail", rec.Detail, MaxDetailLen}} {
		assert.LessOrEqual(t, len(f.got), f.max, f.name)
		assert.Greater(t, len(f.got), f.max-8, f.name)
		assert.True(t, utf8.ValidString(f.got), f.name)
		assert.True(t, strings.HasSuffix(f.got, "é…"), f.name)
	}
	assert.Equal(t, "short", clip("short", 5))
	assert.Equal(t, "ab…", clip("abcdefg", 5))
}

func TestWriteErrors(t *testing.T) {
	w := openLog(t, logPath(t))
	assert.ErrorIs(t, w.Write(Event{Detail: "no kind"}), ErrNoKind)
	err := w.Write(Event{Kind: "x", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	assert.ErrorContains(t, err, "audit: encode x event: ")
	require.NoError(t, w.Write(Event{Kind: "x"}), "a rejected event leaves the log usable")
	seq, _ := w.Head()
	assert.Equal(t, uint64(1), seq)

	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "idempotent")
	assert.ErrorIs(t, w.Write(Event{Kind: "x"}), ErrClosed)
	assert.ErrorIs(t, w.Sync(), ErrClosed)
}

func TestWriteFailureIsSticky(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	require.NoError(t, w.Write(testEvent(1)))
	require.NoError(t, w.f.Close()) // the disk goes away
	err := w.Write(testEvent(2))
	require.Error(t, err)
	assert.ErrorContains(t, err, "audit: write "+path+": ")
	assert.Same(t, err, w.Write(testEvent(3)), "every later Write fails the same")
	assert.Same(t, err, w.Sync())
	assert.Error(t, w.Close())
}

func TestReopenContinuesChain(t *testing.T) {
	path := logPath(t)
	writeLog(t, path, 3)

	w := openLog(t, path)
	seq, hash := w.Head()
	assert.Equal(t, uint64(3), seq)
	rep, err := VerifyFile(path)
	require.NoError(t, err)
	assert.Equal(t, rep.LastHash, hash)

	for i := 4; i <= 6; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	require.NoError(t, w.Close())
	writeLogFrom(t, path, 7, 8)

	rep, err = VerifyFile(path)
	require.NoError(t, err)
	assert.Equal(t, 8, rep.Lines)
	assert.Equal(t, t0.Add(8*time.Second), rep.Last)
}

// writeLogFrom appends events from..to to the log at path.
func writeLogFrom(t *testing.T, path string, from, to int) {
	t.Helper()
	w := openLog(t, path)
	for i := from; i <= to; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	require.NoError(t, w.Close())
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	require.NoError(t, w.Close())

	require.NoError(t, os.WriteFile(path, nil, 0o600)) // an existing empty log
	w = openLog(t, path)
	seq, hash := w.Head()
	assert.Equal(t, uint64(0), seq)
	assert.Equal(t, Genesis, hash)
}

func TestOpenRefusesPermissions(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o700 | 0o070} {
		t.Run(fmt.Sprintf("%#o", uint32(mode)), func(t *testing.T) {
			path := logPath(t)
			writeLog(t, path, 1)
			require.NoError(t, os.Chmod(path, mode))
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			w, err := Open(path)
			assert.Nil(t, w)
			assert.ErrorIs(t, err, ErrPermissions)
			assert.EqualError(t, err, fmt.Sprintf("audit: log file is accessible by group or other: %s has mode %#o; run chmod 600 %s", path, uint32(mode), path))
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, before, after)
		})
	}
	t.Run("0400 is fine to open", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only root can open a 0400 file for writing")
		}
		path := logPath(t)
		writeLog(t, path, 1)
		require.NoError(t, os.Chmod(path, 0o400))
		openLog(t, path)
	})
}

func TestOpenRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	assert.EqualError(t, err, "audit: open "+dir+": is a directory")

	target := filepath.Join(dir, "real.log")
	writeLog(t, target, 1)
	link := filepath.Join(dir, "link.log")
	require.NoError(t, os.Symlink(target, link))
	_, err = Open(link)
	assert.EqualError(t, err, "audit: "+link+" is a symbolic link; refusing to follow it")

	_, err = Open(filepath.Join(dir, "missing", "x.log"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestOpenLocked(t *testing.T) {
	path := logPath(t)
	w := openLog(t, path)
	_, err := Open(path)
	assert.ErrorIs(t, err, ErrLocked)
	assert.EqualError(t, err, "audit: lock "+path+": audit: log is open by another writer")
	require.NoError(t, w.Close())
	openLog(t, path)
}

func TestOpenRefusesCorruptTail(t *testing.T) {
	tests := []struct {
		name    string
		mangle  func(lines []string) string // lines of a 3-line log, newlines included
		wantErr string
	}{
		{"last line edited", func(l []string) string { return l[0] + l[1] + strings.Replace(l[2], "deny", "DENY", 1) }, "line 3: hash mismatch: the line was edited"},
		{"garbage appended", func(l []string) string { return l[0] + l[1] + l[2] + "oops\n" }, "line 4: malformed line: not an audit entry"},
		{"blank line at end", func(l []string) string { return l[0] + l[1] + l[2] + "\n" }, "line 4: malformed line: empty line"},
		{"huge last line", func(l []string) string { return l[0] + strings.Repeat("x", MaxLineLen+10) + "\n" }, "line 2: line too long: more than 65536 bytes"},
		{"huge torn line", func(l []string) string { return l[0] + strings.Repeat("x", MaxLineLen+10) }, "line 2: line too long: more than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := logPath(t)
			writeLog(t, path, 3)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			bad := []byte(tt.mangle(strings.SplitAfter(string(data), "\n")[:3]))
			require.NoError(t, os.WriteFile(path, bad, 0o600))

			w, err := Open(path)
			assert.Nil(t, w)
			assert.ErrorIs(t, err, ErrCorrupt)
			assert.EqualError(t, err, "audit: log is corrupt: "+path+": "+tt.wantErr+"; refusing to append (the file was not changed)")
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, bad, after, "the log is left as it was")
		})
	}
}

func TestWriteConcurrent(t *testing.T) {
	const writers, each = 8, 300
	path := logPath(t)
	w := openLog(t, path)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				assert.NoError(t, w.Write(Event{Kind: "connect", Detail: fmt.Sprintf("g%d-%d", g, i)}))
				if i%100 == 0 {
					assert.NoError(t, w.Sync())
					w.Head()
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())

	rep, err := VerifyFile(path)
	require.NoError(t, err)
	assert.Equal(t, writers*each, rep.Lines)
}

func TestVerifyLargeLog(t *testing.T) {
	const n = 10000
	path := logPath(t)
	w := openLog(t, path)
	for i := 1; i <= n; i++ {
		require.NoError(t, w.Write(testEvent(i)))
	}
	_, head := w.Head()
	require.NoError(t, w.Close())

	start := time.Now()
	rep, err := VerifyFile(path)
	require.NoError(t, err)
	t.Logf("verified %d lines in %v", rep.Lines, time.Since(start))
	require.NotNil(t, rep.Checkpoint)
	assert.Equal(t, Checkpoint{Seq: n, Hash: head, Time: rep.Checkpoint.Time}, *rep.Checkpoint)
	rep.Checkpoint = nil
	assert.Equal(t, Report{Lines: n, First: t0.Add(time.Second), Last: t0.Add(n * time.Second), LastHash: head}, rep)
}

func TestDiscard(t *testing.T) {
	assert.NoError(t, Discard.Write(Event{}))
	assert.NoError(t, Discard.Write(testEvent(1)))
}

func BenchmarkWrite(b *testing.B) {
	w, err := Open(filepath.Join(b.TempDir(), "audit.log"))
	require.NoError(b, err)
	defer w.Close()
	ev := testEvent(1)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(ev); err != nil {
			b.Fatal(err)
		}
	}
}
