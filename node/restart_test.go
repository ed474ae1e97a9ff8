package node_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/node"
)

// tryEcho makes one TCP round trip from a's netstack to to:port.
func tryEcho(ctx context.Context, a *stockNetstack, to netip.Addr, port uint16) error {
	a.mu.Lock()
	tnet := a.net
	a.mu.Unlock()
	c, err := tnet.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(to, port))
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 4))
	return err
}

func serveEcho(t *testing.T, s *stockNetstack, port int) {
	t.Helper()
	l, err := s.net.ListenTCP(&net.TCPAddr{Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// eventuallyEcho retries tryEcho until it works or within passes.
func eventuallyEcho(t *testing.T, a *stockNetstack, to netip.Addr, port uint16, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err = tryEcho(ctx, a, to, port)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: no echo within %v: %v", what, within, err)
}

// TestRestartsResume restarts, in turn, the relay, control with its NATS,
// and a node, and checks traffic resumes each time; the restarted node
// keeps its identity and address.
func TestRestartsResume(t *testing.T) {
	w := newLabWorld(t)
	credPath := filepath.Join(t.TempDir(), "alpha.json")
	withCreds := func(c *node.Config) { c.Credentials = node.OpenCredentials(credPath) }
	na, nb := &stockNetstack{}, &stockNetstack{}
	hostA := w.site(t, "symmetric")
	a := startNode(t, hostA, "alpha", na, withCreds)
	b := startNode(t, w.site(t, "symmetric"), "beta", nb) // symmetric pair: the relay carries it
	// On a failure, what each running node saw of its peers (CI once
	// waited 80 s for an echo after alpha's restart under heavy load).
	running := map[string]*node.Node{"alpha": a, "beta": b}
	defer func() {
		if t.Failed() {
			for name, n := range running {
				for _, st := range n.Status() {
					t.Logf("%s → %s: online %v, path %s, endpoint %q, last handshake %v, tx/rx relay %d/%d, why %q, history %+v",
						name, st.Peer.Name, st.Online, st.Path, st.Endpoint, st.LastHandshake, st.TxRelay, st.RxRelay, st.Why, st.History)
				}
			}
		}
	}()
	serveEcho(t, nb, 7)
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(10*time.Second), "before restarts")
	idBefore := a.Identity()

	// Relay restart: the clients reconnect with the same token.
	require.NoError(t, w.relay.Close())
	w.startRelay(t)
	eventuallyEcho(t, na, b.Address().Addr(), 7, slow(20*time.Second), "after a relay restart")

	// Control and NATS restart: nodes reconnect with their credentials,
	// and a node registering afterwards is announced to them.
	require.NoError(t, w.ctrl.Close())
	w.startControl(t)
	nc := &stockNetstack{}
	c := startNode(t, w.site(t, "full-cone"), "gamma", nc)
	running["gamma"] = c
	serveEcho(t, nc, 7)
	require.Eventually(t, func() bool { return len(a.Status()) == 2 }, slow(20*time.Second), 20*time.Millisecond,
		"alpha never heard of gamma after control restarted")
	eventuallyEcho(t, na, c.Address().Addr(), 7, slow(20*time.Second), "to a node registered after a control restart")

	// Node restart: same identity, same address, traffic resumes; the
	// register key saved with the identity makes its registration one
	// request, with no challenge.
	require.NoError(t, a.Close())
	challenged := w.ctrl.Stats().Challenged
	na2 := &stockNetstack{}
	a2 := startNode(t, hostA, "alpha", na2, withCreds)
	running["alpha"] = a2
	assert.Equal(t, idBefore, a2.Identity(), "identity and address survive a restart")
	assert.False(t, idBefore.ControlKey.IsZero(), "the identity keeps control's register key")
	assert.Equal(t, challenged, w.ctrl.Stats().Challenged, "the restarted node was answered a challenge")
	eventuallyEcho(t, na2, b.Address().Addr(), 7, slow(20*time.Second), "after a node restart")

	// Control restarted with its registry lost: the nodes' credentials are
	// refused, they register again with the same keys, get the same
	// addresses, and hear of a node that joins afterwards.
	require.NoError(t, w.ctrl.Close())
	// The file store keeps a snapshot (storePath, written on compaction)
	// and a journal beside it: the registry is lost when both are.
	removed := 0
	for _, f := range []string{w.storePath, w.storePath + ".journal"} {
		if err := os.Remove(f); err == nil {
			removed++
		} else if !errors.Is(err, fs.ErrNotExist) {
			require.NoError(t, err)
		}
	}
	require.Positive(t, removed, "no registry file at %s", w.storePath)
	w.startControl(t)
	require.Eventually(t, func() bool {
		nodes, err := w.ctrl.Store().List(t.Context())
		return err == nil && len(nodes) == 3
	}, slow(30*time.Second), 50*time.Millisecond, "nodes did not register again")
	// Its secret (beside the registry) survived, so its register key did:
	// each node proved its key with the one it learnt from its last
	// registration, in one request, and none was answered a challenge.
	assert.Zero(t, w.ctrl.Stats().Challenged, "a node re-registered without the register key it learnt")
	again, err := w.ctrl.Store().Get(t.Context(), idBefore.NodeID)
	require.NoError(t, err)
	assert.Equal(t, idBefore.Address, again.Address, "same key, same address after the registry was lost")
	nd := &stockNetstack{}
	d := startNode(t, w.site(t, "full-cone"), "delta", nd)
	serveEcho(t, nd, 7)
	require.Eventually(t, func() bool { return len(a2.Status()) == 3 }, slow(20*time.Second), 20*time.Millisecond,
		"alpha never heard of delta after re-registering")
	eventuallyEcho(t, na2, d.Address().Addr(), 7, slow(20*time.Second), "to a node registered after the registry was lost")
	eventuallyEcho(t, na2, b.Address().Addr(), 7, slow(20*time.Second), "to beta after both re-registered")
}
