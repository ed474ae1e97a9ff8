package bpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadBeforeInterface: Load runs where the interface does not exist
// (here: outside the pair's namespace), guessing a device without a
// link-layer header; Attach, in the interface's namespace, finds an
// Ethernet veth and rebuilds the program for it, so the verdicts are
// right. A Reload between the two (in place) is what Attach puts in
// force; nothing is filtered before Attach.
func TestLoadBeforeInterface(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	for _, port := range []int{8080, 9090} {
		listenTCP(t, p, port)
	}
	ev := make(events, 64)
	f, err := Load(Config{Interface: "vc", Policy: mustPolicy(t, p, "default: deny\n"), OnEvent: ev.on})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	assert.True(t, f.l3, "no vc here: loaded for a device without a link-layer header")
	to8080, to9090 := netip.AddrPortFrom(p.addr(2), 8080), netip.AddrPortFrom(p.addr(2), 9090)
	require.True(t, canConnect(t, p, to9090), "nothing filtered before Attach")

	gen := f.gen
	require.NoError(t, f.Reload(mustPolicy(t, p, basePolicy), nil))
	assert.Equal(t, gen+1, f.gen)
	require.NotNil(t, f.table, "filled in place before Attach")
	in(t, p.client, f.Attach)
	assert.False(t, f.l3, "rebuilt for the veth")
	assert.Nil(t, f.table, "the outer map holds the table once attached")
	assert.True(t, canConnect(t, p, to8080), "the reloaded policy allows 8080")
	assert.False(t, canConnect(t, p, to9090), "and denies 9090")
	e := ev.next(t, to9090)
	assert.False(t, e.Allow)
	assert.Equal(t, "default deny", e.Rule)

	in(t, p.client, func() error {
		assert.ErrorContains(t, f.Attach(), "attached already")
		return nil
	})
	require.NoError(t, f.Close())
	assert.True(t, canConnect(t, p, to9090), "Close detaches the filter")
	assert.ErrorIs(t, f.Attach(), ErrClosed)
}

// TestReloadSameTable: a Reload that compiles to the table in force
// changes nothing (no new generation, no swap); a different one does.
func TestReloadSameTable(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	pol := mustPolicy(t, p, basePolicy)
	f := newFilter(t, p, Config{Policy: pol})
	gen := f.gen
	require.NoError(t, f.Reload(mustPolicy(t, p, basePolicy), nil))
	assert.Equal(t, gen, f.gen, "the same table again")
	require.NoError(t, f.Reload(mustPolicy(t, p, "default: deny\n"), nil))
	assert.Equal(t, gen+1, f.gen)
}

// TestCloseUnattached: Close releases a filter Load made and Attach never
// attached, at once and with every kernel object: none of its programs
// and maps is left.
func TestCloseUnattached(t *testing.T) {
	requireKernel(t)
	f, err := Load(Config{Interface: "lattice-none0", OnEvent: func(Event) {}, ReportAllowed: true})
	require.NoError(t, err)
	ids := objectIDs(t, f)
	done := make(chan error, 1)
	go func() { done <- f.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close of an unattached filter hangs")
	}
	// The kernel frees them after a grace period: poll.
	assert.Eventually(t, func() bool {
		for _, id := range ids.progs {
			if p, err := ebpf.NewProgramFromID(id); err == nil {
				p.Close()
				return false
			}
		}
		for _, id := range ids.maps {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "a program or map is left")
	assert.ErrorIs(t, f.Reload(nil, nil), ErrClosed)
}

type kernelIDs struct {
	progs []ebpf.ProgramID
	maps  []ebpf.MapID
}

// objectIDs are the kernel IDs of f's program and maps, the table
// included.
func objectIDs(t *testing.T, f *Filter) kernelIDs {
	t.Helper()
	var ids kernelIDs
	pi, err := f.prog.Info()
	require.NoError(t, err)
	id, ok := pi.ID()
	require.True(t, ok)
	ids.progs = append(ids.progs, id)
	for _, m := range []*ebpf.Map{f.outer, f.events, f.flows, f.table} {
		require.NotNil(t, m)
		mi, err := m.Info()
		require.NoError(t, err)
		id, ok := mi.ID()
		require.True(t, ok)
		ids.maps = append(ids.maps, id)
	}
	return ids
}
