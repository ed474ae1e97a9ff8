package egress

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/policy"
)

// fakeFilter records what the Enforcer asks of a Config.NewFilter filter.
type fakeFilter struct {
	mu      sync.Mutex
	reloads []map[string][]netip.Addr
	policy  *policy.Policy
	closed  int
	fail    error
}

func (f *fakeFilter) Reload(p *policy.Policy, peers map[string][]netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.policy = p
	f.reloads = append(f.reloads, peers)
	return nil
}

func (f *fakeFilter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

func (f *fakeFilter) lastPeers() map[string][]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reloads) == 0 {
		return nil
	}
	return f.reloads[len(f.reloads)-1]
}

// TestFixedPolicyCustomFilter: gvisor mode's use of an Enforcer. A fixed
// policy (no file) read with the given overlay goes to the builder with
// the peers of the moment; peer changes reach the filter through the
// ticker and through RefreshPeers, unchanged peers cause no reload, a
// failed reload keeps the old peers for the next try, and Close closes the
// filter once.
func TestFixedPolicyCustomFilter(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte("default: deny\nrules:\n  - allow: 10.79.0.0/16\n"))
	require.NoError(t, err)
	overlay := netip.MustParsePrefix("10.79.0.0/16")
	var mu sync.Mutex
	web := netip.MustParseAddr("10.79.0.2")
	peers := func() map[string][]netip.Addr {
		mu.Lock()
		defer mu.Unlock()
		return map[string][]netip.Addr{"web": {web}}
	}
	f := &fakeFilter{}
	var built *policy.Policy
	var builtPeers map[string][]netip.Addr
	e, err := Start(Config{Interface: "wg0", Fixed: pol, Overlay: overlay, Peers: peers, PeerInterval: 20 * time.Millisecond,
		NewFilter: func(p *policy.Policy, peers map[string][]netip.Addr) (Filter, error) {
			built, builtPeers = p, peers
			return f, nil
		}})
	require.NoError(t, err)
	defer e.Close()
	assert.Equal(t, Custom, e.Backend())
	require.NotNil(t, built)
	assert.Equal(t, overlay, built.Overlay(), "the fixed policy is read with Config.Overlay")
	assert.Equal(t, []netip.Addr{web}, builtPeers["web"])
	assert.NoError(t, e.Reload(), "no file: nothing to re-read")

	time.Sleep(100 * time.Millisecond)
	assert.Empty(t, f.lastPeers(), "peers unchanged: no reload")

	mu.Lock()
	web = netip.MustParseAddr("10.79.0.3")
	mu.Unlock()
	require.Eventually(t, func() bool {
		return slices.Equal(f.lastPeers()["web"], []netip.Addr{netip.MustParseAddr("10.79.0.3")})
	}, 5*time.Second, 10*time.Millisecond, "the ticker follows web's new address")
	f.mu.Lock()
	assert.Same(t, built, f.policy, "reloaded with the policy in force")
	f.mu.Unlock()

	f.mu.Lock()
	f.fail = errors.New("table full")
	f.mu.Unlock()
	mu.Lock()
	web = netip.MustParseAddr("10.79.0.4")
	mu.Unlock()
	assert.ErrorContains(t, e.RefreshPeers(), "table full")
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	require.NoError(t, e.RefreshPeers(), "retried after the failure")
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.79.0.4")}, f.lastPeers()["web"])

	require.NoError(t, e.Close())
	require.NoError(t, e.Close())
	assert.Equal(t, 1, f.closed)
}

// TestFixedPolicyErrors: without a policy, or when the builder fails,
// Start says so and leaves nothing running (goleak checks the ticker).
func TestFixedPolicyErrors(t *testing.T) {
	_, err := Start(Config{Interface: "wg0"})
	assert.ErrorContains(t, err, "Policy (or Fixed) are required")
	_, err = Start(Config{Interface: "wg0", Fixed: policy.AllowAll(),
		NewFilter: func(*policy.Policy, map[string][]netip.Addr) (Filter, error) { return nil, errors.New("no iptables") }})
	assert.ErrorContains(t, err, "egress: no iptables")
}
