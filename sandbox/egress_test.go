package sandbox

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/policy"
)

// fakeHost is a host network that records what it was asked to dial and
// has one interface address.
type fakeHost struct {
	netx.Network
	mu     sync.Mutex
	dialed []string
	addr   netip.Prefix
}

func (f *fakeHost) Dial(_ context.Context, network, address string) (net.Conn, error) {
	f.mu.Lock()
	f.dialed = append(f.dialed, address)
	f.mu.Unlock()
	c, s := net.Pipe()
	s.Close()
	return c, nil
}

func (f *fakeHost) Interfaces() ([]netx.Interface, error) {
	return []netx.Interface{{Index: 1, Name: "eth0", Addrs: []netip.Prefix{f.addr}}}, nil
}

// fakeStack is the overlay netstack: its egress hook decides, as the
// real stack's does, and nothing is dialled.
type fakeStack struct {
	netx.Network
	e *egress
}

func (f fakeStack) Dial(_ context.Context, network, address string) (net.Conn, error) {
	if err := f.e.stack(network, netip.MustParseAddrPort(address)); err != nil {
		return nil, err
	}
	return nil, errors.New("fake stack dials nothing")
}

func testEgress(t *testing.T, pol *policy.Policy, record func(audit.Event) error) (*egress, *fakeHost) {
	t.Helper()
	host := &fakeHost{addr: netip.MustParsePrefix("192.168.7.9/24")}
	if record == nil {
		record = func(audit.Event) error { return nil }
	}
	e := &egress{
		policy: func() *policy.Policy { return pol }, record: record, peers: func() []nodePeer { return nil },
		isHost: newHostAddrs(host, netip.Addr{}).contains, overlay: netip.MustParsePrefix("100.64.0.0/10"), host: host,
	}
	e.stackNet = fakeStack{e: e}
	return e, host
}

// TestPodEgressDefaultDenied: pod mode, with no policy and with allow:
// any, refuses every default-denied address and the host's own, and never
// dials them; the audit log says why.
func TestPodEgressDefaultDenied(t *testing.T) {
	for name, pol := range map[string]*policy.Policy{
		"no policy": policy.AllowAll(),
		"allow any": mustPolicy(t, "rules:\n  - allow: any\n"),
	} {
		var events []audit.Event
		e, host := testEgress(t, pol, func(ev audit.Event) error { events = append(events, ev); return nil })
		for _, s := range append(defaultDeniedAddrs, "192.168.7.9", "::ffff:127.0.0.1") {
			for _, network := range []string{"tcp", "udp"} {
				_, err := e.dial(t.Context(), network, net.JoinHostPort(s, "80"))
				require.ErrorIs(t, err, ErrDenied, "%s: %s/%s", name, s, network)
				var de *DeniedError
				require.True(t, errors.As(err, &de))
				assert.NotEqual(t, "default allow", de.Rule)
			}
		}
		assert.Empty(t, host.dialed, "%s: nothing denied was dialled", name)
		require.NotEmpty(t, events)
		for _, ev := range events {
			assert.Equal(t, "deny", ev.Decision, "%s: %+v", name, ev)
		}
		_, err := e.dial(t.Context(), "tcp", "192.168.7.10:80")
		require.NoError(t, err, "%s: a neighbour on the host's LAN is no host address", name)
	}
}

// TestPodEgressAuditFailClosed: a flow whose audit event cannot be written
// is refused, even one the policy allows, and never dialled.
func TestPodEgressAuditFailClosed(t *testing.T) {
	e, host := testEgress(t, policy.AllowAll(), func(audit.Event) error { return ErrAuditFailed })
	_, err := e.dial(t.Context(), "tcp", "93.184.216.34:443")
	require.ErrorIs(t, err, ErrDenied)
	assert.ErrorContains(t, err, "egress to 93.184.216.34:443/tcp denied by audit log unavailable (fail-closed; see --audit-fail-open)")
	assert.Empty(t, host.dialed)
}
