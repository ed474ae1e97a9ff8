package sandbox

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/egress/bpf"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/netns"
)

func needBPF(t *testing.T) {
	t.Helper()
	if !edition.Pro() {
		t.Skip("the eBPF egress filter is a Pro feature: run with -tags pro")
	}
}

// TestBPFAheadAttachesInCallersNamespace: the filter loaded ahead is
// attached in the network namespace of the thread that asked (install
// runs in the pod's; here a test namespace whose wg0 the host lacks),
// not in whatever namespace the attaching goroutine's thread is in.
func TestBPFAheadAttachesInCallersNamespace(t *testing.T) {
	ns := testNetns(t)
	needBPF(t)
	out, err := exec.Command("ip", "-n", ns, "link", "add", "wg0", "type", "veth", "peer", "name", "wg0peer").CombinedOutput()
	require.NoError(t, err, "%s", out)
	pol := mustPolicy(t, "default: deny\n")
	a := loadBPF(bpf.Config{Interface: "wg0", Policy: pol})
	t.Cleanup(a.close)
	require.NoError(t, netns.Do("/run/netns/"+ns, func() error {
		a.attach(pol, nil)
		return nil
	}))
	f, err := a.result()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = a.result()
	assert.ErrorContains(t, err, "taken already")
}

// TestBPFAheadReleased: a filter loaded ahead and never attached (Start
// failed before wg0 was up) is closed by close; one whose attach failed
// is closed by result, which reports why.
func TestBPFAheadReleased(t *testing.T) {
	testNetns(t) // root and the tools
	needBPF(t)
	pol := mustPolicy(t, "default: deny\n")

	unused := loadBPF(bpf.Config{Interface: "wg0", Policy: pol})
	<-unused.loaded
	require.NoError(t, unused.err)
	unused.close()
	assert.ErrorIs(t, unused.f.Reload(pol, nil), bpf.ErrClosed, "closed")
	unused.close() // idempotent

	// Closed before it was loaded: nothing starts, and nothing waits.
	never := newBPF(bpf.Config{Interface: "wg0", Policy: pol})
	never.close()
	never.load()
	never.attach(pol, nil)
	_, err := never.result()
	assert.ErrorContains(t, err, "closed")
	assert.Nil(t, never.f, "not loaded after close")

	failed := loadBPF(bpf.Config{Interface: "lattice-none0", Policy: pol})
	t.Cleanup(failed.close)
	failed.attach(pol, nil)
	_, err = failed.result()
	assert.ErrorContains(t, err, `interface "lattice-none0"`)
	assert.False(t, fallBack(err), "a missing interface is no reason to go on without eBPF")
	assert.ErrorIs(t, failed.f.Reload(pol, nil), bpf.ErrClosed, "closed")
}

// TestOverlayFilterFallsBackLate: the eBPF filter's attach, still under
// way while wg0's iptables chains are made (to leave reporting allowed
// connections to it), turns out unavailable: the chains are made again,
// reporting them (conntrack NEW to NFLOG), and nothing of the first ones
// is left once the filter closes.
func TestOverlayFilterFallsBackLate(t *testing.T) {
	ns := testNetns(t)
	out, err := exec.Command("ip", "-n", ns, "link", "add", "wg0", "type", "veth", "peer", "name", "wg0peer").CombinedOutput()
	require.NoError(t, err, "%s", out)
	k := inNetns(ns, "default: allow\n", t)
	k.audit = &auditLines{}
	var mu sync.Mutex
	var scripts []string
	made := make(chan struct{}, 8)
	run := k.run
	k.run = func(tool string, args []string, stdin string) error {
		err := run(tool, args, stdin)
		if strings.Contains(stdin, "LATTICE-wg0") {
			mu.Lock()
			scripts = append(scripts, stdin)
			mu.Unlock()
			made <- struct{}{}
		}
		return err
	}
	// An attach that fails as unavailable once the first chains are in.
	a := &bpfAhead{loaded: make(chan struct{}), attached: make(chan struct{}), loadStarted: true, attachStarted: true}
	close(a.loaded)
	k.ahead = a
	go func() {
		select {
		case <-made:
		case <-time.After(20 * time.Second): // the assertions below say what went wrong
		}
		a.mu.Lock()
		a.err = fmt.Errorf("bpf: attach: %w: test", bpf.ErrUnavailable)
		a.mu.Unlock()
		close(a.attached)
	}()
	var f interface{ Close() error }
	require.NoError(t, netns.Do("/run/netns/"+ns, func() (err error) {
		f, err = k.newOverlayFilter(k.pol.WithOverlay(k.overlay), nil)
		return err
	}))
	mu.Lock()
	require.GreaterOrEqual(t, len(scripts), 2, "the chains made twice")
	first, last := scripts[0], scripts[len(scripts)-1]
	mu.Unlock()
	assert.NotContains(t, first, "--ctstate NEW", "made first to leave reporting to eBPF")
	assert.Contains(t, last, "--ctstate NEW", "made again to report allowed connections")
	require.NoError(t, f.Close())
	rules, err := exec.Command("ip", "netns", "exec", ns, "iptables", "-S").CombinedOutput()
	require.NoError(t, err, "%s", rules)
	assert.NotContains(t, string(rules), "LATTICE-wg0", "nothing left")
}
