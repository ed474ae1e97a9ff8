package control

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashCopy is the registry a control restarted after a crash now would
// open: the files at path as they are, opened elsewhere.
func crashCopy(t *testing.T, path string) []*Node {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "registry.json")
	for _, p := range [][2]string{{path, dst}, {JournalPath(path), JournalPath(dst)}} {
		b, err := os.ReadFile(p[0])
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p[1], b, 0o600))
	}
	s, err := OpenFileStore(dst)
	require.NoError(t, err)
	defer s.j.close()
	return listJSON(t, s)
}

// changeNow runs change, failing the test if it waits on a compaction.
func changeNow(t *testing.T, change func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- change() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a change waited for the compaction to finish")
	}
}

// TestCompactionOffLock: while Compact writes its snapshot, changes go on
// without waiting for it, and a crash at any step (after the registry was
// copied, after the snapshot's rename, with the new journal written but
// not yet renamed, after the swap) reopens to every acknowledged change;
// the journal ends holding just the changes made during the compaction.
func TestCompactionOffLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStoreWith(path, FileStoreOptions{CompactBytes: 1 << 30})
	require.NoError(t, err)
	for i := range 50 {
		require.NoError(t, s.Create(ctx, journalNode(i)))
	}
	var steps []string
	var want []*Node
	s.compactHook = func(step string) {
		steps = append(steps, step)
		switch step {
		case "copied":
			changeNow(t, func() error { return s.Create(ctx, journalNode(100)) })
		case "snapshot":
			changeNow(t, func() error { return s.Create(ctx, journalNode(101)) })
			n := journalNode(7)
			n.Epoch = 77
			changeNow(t, func() error { return s.Update(ctx, n) })
			changeNow(t, func() error { return s.Delete(ctx, journalNode(8).ID) })
		}
		if step != "journal" { // "journal" runs with the store's mutex held
			want = listJSON(t, s)
		}
		assert.Equal(t, want, crashCopy(t, path), "a crash after step %q", step)
	}
	require.NoError(t, s.Compact())
	s.compactHook = nil
	assert.Equal(t, []string{"copied", "snapshot", "journal"}, steps)
	assert.Len(t, want, 51)
	assert.Equal(t, want, crashCopy(t, path), "a crash after the swap")

	snap, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(snap), journalNode(100).ID, "the snapshot is the registry as copied")
	jb, err := os.ReadFile(JournalPath(path))
	require.NoError(t, err)
	recs, good, err := parseJournal(JournalPath(path), jb)
	require.NoError(t, err)
	assert.Equal(t, len(jb), good)
	assert.Len(t, recs, 4, "the journal holds the changes made during the compaction, no more")

	// Appends go to the new journal; the store closes and reopens whole.
	require.NoError(t, s.Create(ctx, journalNode(102)))
	want = listJSON(t, s)
	assert.Equal(t, want, crashCopy(t, path))
	require.NoError(t, s.Close())
	again, err := OpenFileStore(path)
	require.NoError(t, err)
	assert.Equal(t, want, listJSON(t, again))
	require.NoError(t, again.Close())
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file is left behind")
}

// TestCompactionFailedKeepsJournal: a snapshot that cannot be renamed
// into place (a directory stands there) fails Compact and leaves the
// journal with every change, including the one made meanwhile; the next
// compaction succeeds once it can.
func TestCompactionFailedKeepsJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStoreWith(path, FileStoreOptions{CompactBytes: 1 << 30})
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, s.Create(ctx, journalNode(i)))
	}
	s.compactHook = func(step string) {
		if step == "copied" {
			require.NoError(t, s.Create(ctx, journalNode(10)))
			require.NoError(t, os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700))
		}
	}
	err = s.Compact()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write "+path)
	require.NoError(t, os.RemoveAll(path))
	s.compactHook = nil
	want := listJSON(t, s)
	assert.Len(t, want, 11)
	assert.Equal(t, want, crashCopy(t, path), "the journal has every change")
	require.NoError(t, s.Create(ctx, journalNode(11)))
	require.NoError(t, s.Compact())
	assert.Len(t, crashCopy(t, path), 12)
	jb, err := os.ReadFile(JournalPath(path))
	require.NoError(t, err)
	assert.Empty(t, jb, "the snapshot holds everything")
	require.NoError(t, s.Close())
}

// FuzzCompaction: a registry built from ops, then compacted while more
// ops run at each of its steps, reopens (as after a crash at each step,
// and after it) to exactly what the store acknowledged. Each op byte is
// a create, update or delete of one of 16 nodes; the first byte says how
// many ops come before the compaction.
func FuzzCompaction(f *testing.F) {
	f.Add([]byte{3, 0x01, 0x02, 0x03, 0x41, 0x81, 0x04, 0x42})
	f.Add([]byte{0, 0x01, 0x81, 0x01, 0x41})
	f.Add([]byte{8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x81, 0x82, 0x83, 0x09})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || len(b) > 64 {
			return
		}
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "registry.json")
		s, err := OpenFileStoreWith(path, FileStoreOptions{CompactBytes: 1 << 30})
		require.NoError(t, err)
		defer s.j.close() // not Close: its compaction fsyncs once more
		apply := func(op byte) {
			n := journalNode(int(op & 0x0f))
			switch op >> 6 {
			case 0:
				err = s.Create(ctx, n)
			case 1:
				n.Epoch = uint64(op)
				err = s.Update(ctx, n)
			default:
				err = s.Delete(ctx, n.ID)
			}
			if err != nil && !errors.Is(err, ErrExists) && !errors.Is(err, ErrNotFound) {
				t.Fatalf("op %#x: %v", op, err)
			}
		}
		split := min(int(b[0]), len(b)-1)
		ops := b[1:]
		for _, op := range ops[:split] {
			apply(op)
		}
		rest := ops[split:]
		third := len(rest) / 3
		var want []*Node
		s.compactHook = func(step string) {
			switch step {
			case "copied":
				for _, op := range rest[:third] {
					apply(op)
				}
			case "snapshot":
				for _, op := range rest[third:] {
					apply(op)
				}
			}
			if step != "journal" { // "journal" runs with the store's mutex held
				want = listJSON(t, s)
			}
			assert.Equal(t, want, crashCopy(t, path), "a crash after %q", step)
		}
		require.NoError(t, s.Compact())
		s.compactHook = nil
		assert.Equal(t, listJSON(t, s), crashCopy(t, path), "after the compaction")
	})
}
