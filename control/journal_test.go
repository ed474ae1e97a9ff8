package control

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func journalNode(i int) *Node {
	return &Node{ID: fmt.Sprintf("n%05d", i), Name: fmt.Sprintf("node-%d", i), Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)}), 10),
		SecretHash: bytes.Repeat([]byte{byte(i)}, 32), Registered: time.Unix(1_800_000_000+int64(i), 0).UTC(), Epoch: uint64(i + 1)}
}

func listJSON(t *testing.T, s *FileStore) []*Node {
	t.Helper()
	l, err := s.List(context.Background())
	require.NoError(t, err)
	return l
}

// TestJournalAppends: a change appends one line to the journal and leaves
// the snapshot alone; the store reopens to the same registry, with every
// file mode 0600.
func TestJournalAppends(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStore(path)
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, s.Create(ctx, journalNode(i)))
	}
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "no snapshot written for three changes")
	b, err := os.ReadFile(JournalPath(path))
	require.NoError(t, err)
	assert.Equal(t, 3, bytes.Count(b, []byte("\n")), "one line per change")
	u := journalNode(1)
	u.Epoch = 99
	require.NoError(t, s.Update(ctx, u))
	require.NoError(t, s.Delete(ctx, "n00000"))
	want := listJSON(t, s)

	again, err := OpenFileStore(path)
	require.NoError(t, err)
	assert.Equal(t, want, listJSON(t, again))
	assert.NoError(t, again.Recovered())
	got, err := again.Get(ctx, "n00001")
	require.NoError(t, err)
	assert.Equal(t, uint64(99), got.Epoch)
	require.ErrorIs(t, again.Create(ctx, &Node{ID: "x", Name: "other", Address: journalNode(2).Address}), ErrAddressTaken, "claims are rebuilt from the journal")
	require.NoError(t, again.Create(ctx, &Node{ID: "x", Name: "node-0", Address: journalNode(0).Address}), "a deleted node's claims are free")
	again.Close()
	s.Close()
	for _, p := range []string{path, JournalPath(path)} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
}

// TestJournalTornTail: a crash mid-append leaves part of a line; the store
// opens with every acknowledged change, says where the tail was cut, keeps
// its bytes, and appends after the cut.
func TestJournalTornTail(t *testing.T) {
	ctx := context.Background()
	for name, tail := range map[string][]byte{
		"cut before its newline": []byte(`1234abcd {"put":{"id":"n9`),
		"zeros":                  make([]byte, 100),
		"bad checksum":           []byte("00000000 {\"del\":\"n00000\"}\n"),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "registry.json")
			s, err := OpenFileStore(path)
			require.NoError(t, err)
			for i := range 5 {
				require.NoError(t, s.Create(ctx, journalNode(i)))
			}
			want := listJSON(t, s)
			jp := JournalPath(path)
			good, err := os.ReadFile(jp)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(jp, append(bytes.Clone(good), tail...), 0o600))

			again, err := OpenFileStore(path)
			require.NoError(t, err)
			assert.Equal(t, want, listJSON(t, again), "nothing acknowledged is lost")
			var torn *TornTailError
			require.ErrorAs(t, again.Recovered(), &torn)
			assert.Contains(t, torn.Error(), fmt.Sprintf("%s:%d", jp, len(good)), "the error names file:offset")
			kept, err := os.ReadFile(torn.Kept)
			require.NoError(t, err)
			assert.Equal(t, tail, kept, "the dropped bytes are kept")
			fi, err := os.Stat(torn.Kept)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			now, err := os.ReadFile(jp)
			require.NoError(t, err)
			assert.Equal(t, good, now, "the journal is cut where the torn record began")

			require.NoError(t, again.Create(ctx, journalNode(7)))
			third, err := OpenFileStore(path)
			require.NoError(t, err)
			assert.NoError(t, third.Recovered(), "the next append follows the cut")
			assert.Len(t, listJSON(t, third), 6)
		})
	}
}

// TestJournalCorruptMiddle: a bad line with good ones after it is not a
// torn append: the store refuses to open, naming file:offset, and leaves
// both files as they were.
func TestJournalCorruptMiddle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStore(path)
	require.NoError(t, err)
	for i := range 4 {
		require.NoError(t, s.Create(ctx, journalNode(i)))
	}
	jp := JournalPath(path)
	b, err := os.ReadFile(jp)
	require.NoError(t, err)
	second := bytes.IndexByte(b, '\n') + 1
	bad := bytes.Clone(b)
	bad[second+20] ^= 0x20 // in the second record's JSON
	require.NoError(t, os.WriteFile(jp, bad, 0o600))

	_, err = OpenFileStore(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("%s:%d", jp, second))
	assert.Contains(t, err.Error(), "not a torn last append")
	after, _ := os.ReadFile(jp)
	assert.Equal(t, bad, after, "left as is")
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "no snapshot written")
}

// TestJournalCompaction: the journal stays bounded: past CompactBytes and
// twice the snapshot, the registry is written as a snapshot and the
// journal emptied; a crash between the two (the snapshot written, the
// journal not yet emptied) replays to the same registry.
func TestJournalCompaction(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStoreWith(path, FileStoreOptions{CompactBytes: 8 << 10})
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, s.Create(ctx, journalNode(i)))
	}
	var most int64
	for round := range 50 {
		for i := range 20 {
			n := journalNode(i)
			n.Epoch = uint64(1000 + round)
			require.NoError(t, s.Update(ctx, n))
			fi, err := os.Stat(JournalPath(path))
			require.NoError(t, err)
			most = max(most, fi.Size())
		}
	}
	snap, err := os.Stat(path)
	require.NoError(t, err, "a snapshot was written")
	assert.LessOrEqual(t, most, max(8<<10, 2*snap.Size())+1024, "the journal is emptied once it outgrows the bound")
	want := listJSON(t, s)

	// The crash between snapshot and emptying: an old journal over the
	// newest snapshot, with deletes and re-creations that passed through
	// states where two records held one address.
	old := filepath.Join(t.TempDir(), "old.json")
	o, err := OpenFileStore(old)
	require.NoError(t, err)
	require.NoError(t, o.Create(ctx, journalNode(3)))
	require.NoError(t, o.Delete(ctx, "n00003"))
	x := journalNode(30)
	x.Address = journalNode(3).Address
	require.NoError(t, o.Create(ctx, x))
	require.NoError(t, o.Delete(ctx, x.ID))
	for i := range 20 {
		n := journalNode(i)
		n.Epoch = uint64(1049)
		require.NoError(t, o.Create(ctx, n))
	}
	jb, err := os.ReadFile(JournalPath(old))
	require.NoError(t, err)
	require.NoError(t, s.Compact())
	require.NoError(t, os.WriteFile(JournalPath(path), jb, 0o600))
	again, err := OpenFileStore(path)
	require.NoError(t, err)
	assert.Equal(t, want, listJSON(t, again))
}

// TestJournalConcurrentChanges: changes from many goroutines at once (which
// share fsyncs) are all durable when acknowledged.
func TestJournalConcurrentChanges(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.json")
	s, err := OpenFileStoreWith(path, FileStoreOptions{CompactBytes: 16 << 10})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 25 {
				assert.NoError(t, s.Create(ctx, journalNode(g*25+i)))
			}
		})
	}
	wg.Wait()
	again, err := OpenFileStore(path)
	require.NoError(t, err)
	assert.Len(t, listJSON(t, again), 400)
	assert.Equal(t, listJSON(t, s), listJSON(t, again))
	require.NoError(t, s.Close())
	require.Error(t, s.Create(ctx, journalNode(999)), "a closed store takes no changes")
}

// BenchmarkCompact10k: one compaction of a file store holding 10,000
// nodes (the snapshot written and fsynced, the journal emptied): the
// pause a registration may wait for once per ~20,000 changes at that size.
func BenchmarkCompact10k(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mem := NewMemStore()
	populate(b, ctx, mem, 10_000)
	path := filepath.Join(b.TempDir(), "registry.json")
	_, err := mem.writeSnapshotLocked(path)
	require.NoError(b, err)
	s, err := OpenFileStore(path)
	require.NoError(b, err)
	defer s.Close()
	b.ResetTimer()
	for b.Loop() {
		require.NoError(b, s.Compact())
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/compaction")
}
