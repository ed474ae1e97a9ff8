package policy

import (
	"bytes"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logBuffer collects a Watcher's log lines.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) count(s string) int { return strings.Count(b.String(), s) }

type watchFixture struct {
	path    string
	log     *logBuffer
	changes chan *Policy
	w       *Watcher
}

const (
	policyV1 = "rules:\n  - allow: 1.1.1.1\n"
	policyV2 = "rules:\n  - allow: 2.2.2.2\n"
	// policyV3 has policyV1's size, so only the bytes tell them apart.
	policyV3 = "rules:\n  - allow: 3.3.3.3\n"
	badFile  = "rules:\n  - allow: nope\n"
)

func newWatchFixture(t *testing.T, initial string, interval time.Duration) *watchFixture {
	t.Helper()
	f := &watchFixture{
		path:    filepath.Join(t.TempDir(), "policy.yaml"),
		log:     &logBuffer{},
		changes: make(chan *Policy, 16),
	}
	f.write(t, initial)
	w, err := NewWatcher(WatcherConfig{
		Path:     f.path,
		Interval: interval,
		Logger:   slog.New(slog.NewTextHandler(f.log, nil)),
		OnChange: func(p *Policy) { f.changes <- p },
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Close()) })
	f.w = w
	return f
}

// write rewrites the file in place (same inode, as an editor that saves in
// place does) with one write of the whole content from offset 0, then cuts
// it to length. os.WriteFile truncates first, and on a loaded machine the
// empty file it leaves stayed for two of the 5 ms polls: the watcher rightly
// installed it (an empty file is a deny-all policy), and a test waiting for
// the next write's policy got that one (TestWatcherKeepsPolicyOnBadFile
// failed so in CI). Torn writes are TestWatcherWaitsForSettledBytes's
// subject, with polls by hand.
func (f *watchFixture) write(t *testing.T, content string) {
	t.Helper()
	file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	_, err = file.WriteAt([]byte(content), 0)
	require.NoError(t, err)
	require.NoError(t, file.Truncate(int64(len(content))))
	require.NoError(t, file.Close())
}

// allows reports whether the policy in force allows tcp to addr:1.
func (f *watchFixture) allows(addr string) bool {
	return f.w.Current().Decide(tcp(addr, 1)).Allow
}

func (f *watchFixture) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 2*time.Millisecond, what)
}

func (f *watchFixture) noChange(t *testing.T) {
	t.Helper()
	select {
	case p := <-f.changes:
		t.Fatalf("unexpected OnChange(%v)", p)
	default:
	}
}

func TestWatcherConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     WatcherConfig
		wantErr string
	}{
		{"no path", WatcherConfig{}, "policy: invalid watcher config: empty Path"},
		{"negative interval", WatcherConfig{Path: "x", Interval: -time.Second}, "policy: invalid watcher config: negative Interval -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWatcher(tt.cfg)
			assert.Nil(t, w)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.EqualError(t, err, tt.wantErr)
		})
	}
}

func TestWatcherInitialLoadFails(t *testing.T) {
	dir := t.TempDir()
	_, err := NewWatcher(WatcherConfig{Path: filepath.Join(dir, "missing.yaml")})
	assert.ErrorIs(t, err, os.ErrNotExist)

	path := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte(badFile), 0o600))
	_, err = NewWatcher(WatcherConfig{Path: path})
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestWatcherDefaults(t *testing.T) {
	f := newWatchFixture(t, policyV1, 0)
	assert.Equal(t, time.Second, f.w.cfg.Interval)
	assert.Equal(t, DefaultOverlay, f.w.Current().Overlay())
	assert.Equal(t, f.path, f.w.Current().Source())
	assert.True(t, f.allows("1.1.1.1"))
	assert.Contains(t, f.log.String(), `msg="policy loaded" component=policy path=`+f.path)
}

func TestWatcherOverlay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - allow: 10.1.0.0/16\n"), 0o600))
	overlay := netip.MustParsePrefix("10.0.0.0/8")
	w, err := NewWatcher(WatcherConfig{Path: path, Overlay: overlay})
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, overlay, w.Current().Overlay())
	assert.True(t, w.Current().Decide(peer(tcp("10.1.0.1", 1), "")).Allow)

	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - allow: 10.2.0.0/16\n"), 0o600))
	require.NoError(t, w.Reload())
	assert.Equal(t, overlay, w.Current().Overlay(), "reloaded policies keep the overlay")
	assert.True(t, w.Current().Decide(peer(tcp("10.2.0.1", 1), "")).Allow)
}

func TestWatcherPollsChanges(t *testing.T) {
	f := newWatchFixture(t, policyV1, 5*time.Millisecond)

	f.write(t, policyV2)
	p := <-f.changes
	assert.True(t, p.Decide(tcp("2.2.2.2", 1)).Allow)
	assert.Same(t, p, f.w.Current(), "OnChange sees the installed policy")
	assert.False(t, f.allows("1.1.1.1"))

	// Same size, same mtime, new bytes: caught because the mtime is recent.
	info, err := os.Stat(f.path)
	require.NoError(t, err)
	f.write(t, policyV3)
	require.NoError(t, os.Chtimes(f.path, info.ModTime(), info.ModTime()))
	p = <-f.changes
	assert.True(t, p.Decide(tcp("3.3.3.3", 1)).Allow)

	// Replacing the file by rename, as editors do.
	tmp := f.path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(policyV1), 0o600))
	require.NoError(t, os.Rename(tmp, f.path))
	p = <-f.changes
	assert.True(t, p.Decide(tcp("1.1.1.1", 1)).Allow)

	// Touching the file without changing its bytes changes nothing.
	now := time.Now()
	require.NoError(t, os.Chtimes(f.path, now, now))
	f.waitPolls(t, 3)
	f.noChange(t)
	assert.Zero(t, f.log.count("policy unchanged"), "same bytes are not even parsed")
}

// waitPolls waits until the Watcher has polled n more times.
func (f *watchFixture) waitPolls(t *testing.T, n uint64) {
	t.Helper()
	target := f.w.polls.Load() + n
	f.waitFor(t, "polls", func() bool { return f.w.polls.Load() >= target })
}

func TestWatcherWaitsForSettledBytes(t *testing.T) {
	// No ticks: the test polls by hand.
	f := newWatchFixture(t, "rules:\n  - allow: 1.1.1.1\n", time.Hour)

	// A write in place, caught half done, parses and allows everything.
	f.write(t, "default: allow\n")
	f.w.poll()
	f.noChange(t)
	assert.False(t, f.allows("9.9.9.9"), "new bytes are not installed on first sight")

	f.write(t, "default: allow\nrules:\n  - deny: 9.9.9.0/24\n")
	f.w.poll()
	f.noChange(t)
	assert.False(t, f.allows("8.8.8.8"), "nor when they differ from the last poll's")

	f.w.poll()
	p := <-f.changes
	assert.False(t, p.Decide(tcp("9.9.9.9", 1)).Allow)
	assert.True(t, p.Decide(tcp("8.8.8.8", 1)).Allow)

	// Caught empty (a valid deny-all policy): the same.
	f.write(t, "")
	f.w.poll()
	f.write(t, policyV2)
	f.w.poll()
	f.w.poll()
	p = <-f.changes
	assert.True(t, p.Decide(tcp("2.2.2.2", 1)).Allow)
	f.noChange(t)

	// An empty file that stays empty is a policy like any other.
	f.write(t, "")
	f.w.poll()
	f.w.poll()
	p = <-f.changes
	assert.Equal(t, deny("default deny"), p.Decide(tcp("2.2.2.2", 1)))
}

func TestWatcherKeepsPolicyOnBadFile(t *testing.T) {
	f := newWatchFixture(t, policyV1, 5*time.Millisecond)
	before := f.w.Current()

	f.write(t, badFile)
	f.waitFor(t, "bad file logged", func() bool { return f.log.count("policy file rejected") > 0 })
	assert.Same(t, before, f.w.Current())
	assert.Contains(t, f.log.String(), "policy.yaml:2:12: rule 1: want an IP address")
	assert.Contains(t, f.log.String(), "keeping the policy in force")

	// Polling does not log the same bad file again.
	f.waitPolls(t, 5)
	assert.Equal(t, 1, f.log.count("policy file rejected"))
	f.noChange(t)

	// Reload reports the problem to its caller.
	err := f.w.Reload()
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Same(t, before, f.w.Current())

	f.write(t, policyV2)
	p := <-f.changes
	assert.True(t, p.Decide(tcp("2.2.2.2", 1)).Allow)
}

func TestWatcherMissingFile(t *testing.T) {
	f := newWatchFixture(t, policyV1, 5*time.Millisecond)
	before := f.w.Current()

	require.NoError(t, os.Remove(f.path))
	f.waitFor(t, "missing file logged", func() bool { return f.log.count("policy file unreadable") > 0 })
	f.waitPolls(t, 5)
	assert.Equal(t, 1, f.log.count("policy file unreadable"), "a lasting problem is logged once")
	assert.Same(t, before, f.w.Current())
	assert.ErrorIs(t, f.w.Reload(), os.ErrNotExist)

	// The same policy coming back changes nothing; a new one installs.
	f.write(t, policyV1)
	f.waitFor(t, "file back", func() bool { return f.log.count("policy unchanged") > 0 })
	f.noChange(t)
	f.write(t, policyV2)
	p := <-f.changes
	assert.True(t, p.Decide(tcp("2.2.2.2", 1)).Allow)
}

// TestWatcherPathBecomesDirectory: a directory where the policy was keeps
// the policy in force, logged once, saying what is wrong with the path.
func TestWatcherPathBecomesDirectory(t *testing.T) {
	f := newWatchFixture(t, policyV1, 5*time.Millisecond)
	before := f.w.Current()

	require.NoError(t, os.Remove(f.path))
	require.NoError(t, os.Mkdir(f.path, 0o700))
	f.waitFor(t, "directory logged", func() bool { return f.log.count("is a directory, not a policy file") > 0 })
	f.waitPolls(t, 5)
	assert.Equal(t, 1, f.log.count("policy file unreadable"), "a lasting problem is logged once")
	assert.Contains(t, f.log.String(), "policy: read "+f.path+": is a directory, not a policy file")
	assert.NotContains(t, f.log.String(), "read "+f.path+": read ", "the path is named once")
	assert.Same(t, before, f.w.Current())
	assert.EqualError(t, f.w.Reload(), "policy: read "+f.path+": is a directory, not a policy file")
	assert.Same(t, before, f.w.Current())
	f.noChange(t)
}

func TestWatcherReload(t *testing.T) {
	// An hour-long interval: only Reload can see changes.
	f := newWatchFixture(t, policyV1, time.Hour)

	require.NoError(t, f.w.Reload())
	f.noChange(t)
	assert.Contains(t, f.log.String(), "policy unchanged")

	// A change polling would miss (same size, mtime long past) is seen by
	// Reload, which does not trust stat.
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(f.path, old, old))
	f.write(t, policyV3)
	require.NoError(t, os.Chtimes(f.path, old, old))
	require.NoError(t, f.w.Reload())
	p := <-f.changes
	assert.True(t, p.Decide(tcp("3.3.3.3", 1)).Allow)
	assert.Same(t, p, f.w.Current())
	assert.Contains(t, f.log.String(), `msg="policy reloaded"`)
}

func TestWatcherClose(t *testing.T) {
	f := newWatchFixture(t, policyV1, 5*time.Millisecond)
	require.NoError(t, f.w.Close())
	require.NoError(t, f.w.Close(), "idempotent")
	assert.ErrorIs(t, f.w.Reload(), ErrClosed)
	assert.True(t, f.allows("1.1.1.1"), "Current works after Close")

	// Close waited for the goroutine (goleak checks): nothing reloads now.
	f.write(t, policyV2)
	assert.ErrorIs(t, f.w.Reload(), ErrClosed)
	assert.True(t, f.allows("1.1.1.1"))
}

func TestWatcherConcurrentReload(t *testing.T) {
	f := newWatchFixture(t, policyV1, time.Millisecond)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 20 {
				if (i+j)%2 == 0 {
					_ = f.w.Reload()
				} else {
					_ = f.w.Current().Decide(tcp("1.1.1.1", 1))
				}
			}
		})
	}
	for _, content := range []string{policyV2, policyV3, policyV1} {
		f.write(t, content)
	}
	wg.Wait()
	f.waitFor(t, "last write installed", func() bool { return f.allows("1.1.1.1") })
}
