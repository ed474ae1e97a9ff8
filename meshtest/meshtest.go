// Package meshtest starts a whole Lattice mesh on this machine's loopback
// for tests of programs that use it from outside the lab: control with
// embedded NATS, an LRP relay, and peers (nodes on an in-process netstack)
// that serve HTTP on their overlay addresses. Everything listens on
// 127.0.0.1 and stops when the test ends.
//
// It is test support, for _test files only, like net/http/httptest. It
// lives at the root beside the packages it assembles (node, control, relay,
// netstack) because it sits above all of them in the import graph: under
// internal/, the floor of small leaves any package may import, it would be
// the one package there that imports the product; under lab/ it would tie
// the product's tests to the emulator, which it does not use.
package meshtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
)

// Token is the join token control accepts.
const Token = "meshtest-join-token-0123456789"

// Loopback is where everything listens.
var Loopback = netip.MustParseAddr("127.0.0.1")

// World is control (with embedded NATS) and a relay on loopback.
type World struct {
	Control *control.Server
	Relay   *relay.Server
	// NATSURL is what nodes and sandboxes register with.
	NATSURL string
	// Addr is the address everything listens on.
	Addr netip.Addr
}

// Logger logs at debug level to stderr when LATTICE_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("LATTICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// Start brings control and a relay up on loopback.
func Start(t testing.TB) *World { return StartOn(t, Loopback) }

// StartOn brings control and a relay up on addr (one of this host's), for
// tests whose sandboxes run in other network namespaces.
func StartOn(t testing.TB, addr netip.Addr) *World {
	t.Helper()
	listen := netip.AddrPortFrom(addr, 0).String()
	secret := []byte("meshtest-relay-secret-0123456789abcdef")
	rs, err := relay.NewServer(relay.ServerConfig{Network: netx.OS, Addr: listen, Secret: secret, TLS: SelfSignedTLS(t)})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	store, err := control.OpenFileStore(filepath.Join(t.TempDir(), "registry.json"))
	require.NoError(t, err)
	ctrl, err := control.New(t.Context(), control.Config{
		Network: netx.OS, Tokens: []control.JoinToken{{Value: Token}}, Store: store,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: netx.OS, Listen: listen},
		Relays:       []controlapi.Relay{{Addr: rs.Addr().String(), Fingerprint: rs.Fingerprint()}},
		RelayToken: func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(secret, k, now.Add(time.Hour))), nil
		},
		Logger: Logger(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { ctrl.Close() })
	natsURL := ctrl.NATS().URL()
	if !addr.IsLoopback() {
		// Plaintext off loopback needs consent; these worlds live in
		// network namespaces the test made.
		natsURL += "?" + controlapi.ParamInsecure + "=1"
	}
	return &World{Control: ctrl, Relay: rs, NATSURL: natsURL, Addr: addr}
}

// Peer is a node on an in-process netstack.
type Peer struct {
	Node  *node.Node
	Stack *netstack.Stack
}

// Addr is the peer's overlay address.
func (p *Peer) Addr() netip.Addr { return p.Node.Address().Addr() }

// Peer starts a node named name; edit, if given, adjusts its config (e.g.
// ICE.RelayOnly).
func (w *World) Peer(t testing.TB, name string, edit ...func(*node.Config)) *Peer {
	t.Helper()
	prov := &netstack.SandboxProvisioner{}
	cfg := node.Config{
		Name: name, Network: netx.OS, Control: w.NATSURL, Token: Token, ListenPort: -1, ListenAddr: w.Addr,
		Provisioner: prov, Logger: Logger(),
	}
	for _, e := range edit {
		e(&cfg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return &Peer{Node: n, Stack: prov.Stack()}
}

// ServeHTTP serves h on the peer's overlay address and port until the
// test ends.
func (p *Peer) ServeHTTP(t testing.TB, port uint16, h http.Handler) {
	t.Helper()
	ln, err := p.Stack.Listen(t.Context(), "tcp", fmt.Sprintf(":%d", port))
	require.NoError(t, err)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Logf("meshtest: %s HTTP: %v", p.Node.Identity().Name, err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

// WaitPath waits until n's path to the peer named peer is want.
func WaitPath(t testing.TB, n *node.Node, peer string, want node.PathKind, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last []node.PeerStatus
	for time.Now().Before(deadline) {
		last = n.Status()
		for _, st := range last {
			if st.Peer.Name == peer && st.Path == want {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("path to %s never became %s within %v: %+v", peer, want, within, last)
}

// Listener returns a TCP listener on 127.0.0.1 closed at cleanup.
func Listener(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// SelfSignedTLS makes a relay certificate for tests.
func SelfSignedTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := relay.SelfSigned(time.Now())
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}
