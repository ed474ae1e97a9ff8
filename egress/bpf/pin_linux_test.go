package bpf

import (
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPinnedSurvivesKill attaches the filter in a child process and kills
// it with SIGKILL: pinned, the filter still denies (fail closed); not
// pinned, it goes with the process. A new filter on the same pin directory
// takes over without a gap, and its Close removes the pin.
func TestPinnedSurvivesKill(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	listenTCP(t, p, 8080)
	listenTCP(t, p, 9090)
	allowed, denied := netip.AddrPortFrom(p.addr(2), 8080), netip.AddrPortFrom(p.addr(2), 9090)
	polFile := writePolicy(t, p, basePolicy)
	kill := func(pin string) {
		t.Helper()
		cmd := startChild(t, p, pin, polFile)
		require.False(t, canConnect(t, p, denied), "the child's filter denies")
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}

	t.Run("not pinned", func(t *testing.T) {
		kill("")
		assert.Eventually(t, func() bool { return canConnect(t, p, denied) }, 5*time.Second, 50*time.Millisecond,
			"without a pin the filter is gone with the process")
	})

	t.Run("pinned", func(t *testing.T) {
		dir := mountBPF(t)
		kill(dir)
		_, err := os.Stat(filepath.Join(dir, "link"))
		require.NoError(t, err, "pinned link")
		assert.False(t, canConnect(t, p, denied), "still denied after kill -9")
		assert.True(t, canConnect(t, p, allowed), "still allowed after kill -9")

		ev := make(events, 16)
		f := newFilter(t, p, Config{Policy: mustPolicy(t, p, basePolicy), PinDir: dir, OnEvent: ev.on})
		assert.False(t, canConnect(t, p, denied), "denied by the new filter")
		assert.Equal(t, "default deny", ev.next(t, denied).Rule, "the new filter's events")
		require.NoError(t, f.Close())
		_, err = os.Stat(filepath.Join(dir, "link"))
		assert.ErrorIs(t, err, os.ErrNotExist, "Close unpins")
		assert.True(t, canConnect(t, p, denied), "the earlier run's link was replaced, not left behind")
	})

	t.Run("keep pinned", func(t *testing.T) {
		dir := mountBPF(t)
		f := newFilter(t, p, Config{Policy: mustPolicy(t, p, basePolicy), PinDir: dir, KeepPinned: true})
		require.NoError(t, f.Close())
		assert.False(t, canConnect(t, p, denied), "KeepPinned: still denied after Close")
		require.NoError(t, os.Remove(filepath.Join(dir, "link")))
		assert.Eventually(t, func() bool { return canConnect(t, p, denied) }, 5*time.Second, 50*time.Millisecond,
			"removing the pin detaches it")
	})
}
