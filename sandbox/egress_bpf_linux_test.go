package sandbox

import (
	"os/exec"
	"testing"

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
