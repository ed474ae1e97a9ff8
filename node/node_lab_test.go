package node_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/labtest"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
	"github.com/latticelab/lattice/stun"
)

const labToken = "node-lab-token-0123456789"

// routerToken joins nodes tagged router (control.JoinToken.Tags).
const routerToken = "node-lab-router-token-0123456789"

// stockNetstack provisions the node's user-space netstack and keeps the
// overlay network for the test to dial and listen on.
type stockNetstack struct {
	mu  sync.Mutex
	p   netstack.SandboxProvisioner
	net *overlayNet
}

func (s *stockNetstack) Up(ctx context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	dev, err := s.p.Up(ctx, addr, mtu)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.net = &overlayNet{s.p.Stack()}
	s.mu.Unlock()
	return dev, nil
}

// overlayNet is the overlay as tests use it.
type overlayNet struct{ st *netstack.Stack }

func (o *overlayNet) ListenTCP(a *net.TCPAddr) (net.Listener, error) {
	return o.st.Listen(context.Background(), "tcp", fmt.Sprintf(":%d", a.Port))
}

func (o *overlayNet) DialContextTCPAddrPort(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	return o.st.Dial(ctx, "tcp", ap.String())
}

// labWorld is the internet with control (embedded NATS) and STUN on one
// public server, plus NATed sites.
type labWorld struct {
	lw     *labtest.World
	f      *fabric.Fabric
	server *fabric.Host
	ctrl   *control.Server
	relay  *relay.Server
	stun   *stun.Server

	secret    []byte
	tls       *tls.Config
	storePath string
	ctrlOpts  []func(*control.Config)
}

const natsAddr = "203.0.113.101:443"

// newLabWorld builds the world; opts adjust control's Config (at every
// start).
func newLabWorld(t testing.TB, opts ...func(*control.Config)) *labWorld {
	t.Helper()
	lw := labtest.New(t, fabric.Config{Seed: 1})
	f, server := lw.Fabric, lw.Server
	st, err := stun.NewServer(stun.Config{Network: server, Primary: netip.MustParseAddrPort("203.0.113.100:3478")})
	require.NoError(t, err)
	require.NoError(t, st.Start(t.Context()))
	t.Cleanup(func() { st.Close() })
	w := &labWorld{lw: lw, f: f, server: server, secret: []byte("lab-relay-secret-0123456789abcdef"),
		tls: meshtest.SelfSignedTLS(t), storePath: filepath.Join(t.TempDir(), "registry.json"), ctrlOpts: opts, stun: st}
	w.startRelay(t)
	w.startControl(t)
	t.Cleanup(func() {
		w.ctrl.Close()
		w.relay.Close()
	})
	return w
}

// startRelay (re)starts the relay with the world's certificate, so its
// fingerprint survives restarts.
func (w *labWorld) startRelay(t testing.TB) {
	t.Helper()
	rs, err := relay.NewServer(relay.ServerConfig{Network: w.server, Addr: "203.0.113.100:443", Secret: w.secret, TLS: w.tls})
	require.NoError(t, err)
	w.relay = rs
}

// startControl (re)starts control (and its NATS) on the same registry.
func (w *labWorld) startControl(t testing.TB) {
	t.Helper()
	store, err := control.OpenFileStore(w.storePath)
	require.NoError(t, err)
	cfg := control.Config{
		Network: w.server, Tokens: []control.JoinToken{{Value: labToken}, {Value: routerToken, Tags: []string{"router"}}}, Store: store,
		// NATS on 443 of the second address: corporate firewalls let it out.
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: w.server, Listen: natsAddr},
		STUN:         []string{"203.0.113.100:3478"},
		Relays:       []controlapi.Relay{{Addr: "203.0.113.100:443", Fingerprint: relay.CertFingerprint(w.tls.Certificates[0].Certificate[0])}},
		RelayToken: func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(w.secret, k, now.Add(time.Hour))), nil
		},
	}
	for _, o := range w.ctrlOpts {
		o(&cfg)
	}
	ctrl, err := control.New(t.Context(), cfg)
	require.NoError(t, err)
	w.ctrl = ctrl
}

// site adds a LAN behind a NAT with the named profile and one host.
func (w *labWorld) site(t testing.TB, profile string) *fabric.Host {
	t.Helper()
	return w.lw.Site(t, profile).Host
}

func startNode(t testing.TB, h *fabric.Host, name string, prov node.Provisioner, opts ...func(*node.Config)) *node.Node {
	t.Helper()
	var log *slog.Logger
	if os.Getenv("LATTICE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := node.Config{
		Name: name, Network: h, Control: "nats://" + natsAddr + "?insecure=1", Token: labToken,
		Provisioner: prov, Logger: log,
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := node.Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

func waitPath(t *testing.T, n *node.Node, want node.PathKind, within time.Duration) node.PeerStatus {
	t.Helper()
	var st []node.PeerStatus
	ok := assert.Eventually(t, func() bool {
		st = n.Status()
		return len(st) == 1 && st[0].Path == want
	}, within, 20*time.Millisecond)
	if !ok {
		t.Fatalf("path never became %s: %+v", want, st)
	}
	return st[0]
}

func TestNodesGoDirectBehindConeNATs(t *testing.T) {
	w := newLabWorld(t)
	pa, pb := &stockNetstack{}, &stockNetstack{}
	a := startNode(t, w.site(t, "port-restricted-cone"), "alpha", pa)
	b := startNode(t, w.site(t, "restricted-cone"), "beta", pb)
	defer func() {
		if t.Failed() {
			for _, r := range []string{"natlan0", "natlan1"} {
				t.Logf("%s: %+v", r, w.f.Router(r).Stats())
			}
			t.Logf("alpha mux %+v, beta mux %+v", a.MuxStats(), b.MuxStats())
			t.Logf("beta status %+v", b.Status())
		}
	}()
	sa := waitPath(t, a, node.PathDirect, 10*time.Second)
	waitPath(t, b, node.PathDirect, 10*time.Second)
	assert.Equal(t, "203.0.113.11:51820", sa.Endpoint, "alpha reaches beta at beta's NAT mapping")
	// Both LANs put their host at 192.168.1.2:51820, so beta's host
	// candidates (that and loopback) are alpha's own addresses: they are
	// reported, not tried.
	self := strings.Join(sa.ICE.SelfCandidates, "\n")
	assert.Len(t, sa.ICE.SelfCandidates, 2, "remote candidates %v", sa.ICE.RemoteCandidates)
	assert.Contains(t, self, "host 192.168.1.2:51820")
	assert.Contains(t, self, "host 127.0.0.1:51820")

	l, err := pb.net.ListenTCP(&net.TCPAddr{Port: 80})
	require.NoError(t, err)
	defer l.Close()
	echoOnce(l)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	relayedBefore := a.Status()[0].TxRelay
	c, err := pa.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(b.Address().Addr(), 80))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("over the mesh"))
	require.NoError(t, err)
	buf := make([]byte, 13)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "over the mesh", string(buf))
	st := a.Status()[0]
	assert.Positive(t, st.TxDirect)
	assert.Equal(t, relayedBefore, st.TxRelay, "once direct, nothing goes through the relay")
}
