package wgdev

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"

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

// requireUAPI skips a test that serves UAPI sockets, which live in
// /var/run/wireguard (root's).
func requireUAPI(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: wireguard-go's UAPI sockets live in /var/run/wireguard")
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("LATTICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// standIn is kernel WireGuard's shape from the bridge's side: a stock
// wireguard-go device on its own UDP socket (conn.NewDefaultBind), served
// by wireguard-go's own UAPI handler so wgctrl finds it, on prov's
// interface (a netstack the test dials across, or a TUN device). The
// node reaches it through Attach, as Kernel does after `ip link add`.
type standIn struct {
	name string
	prov node.Provisioner

	mu  sync.Mutex
	dev *Device
}

var _ node.DeviceOpener = (*standIn)(nil)

func (s *standIn) OpenDevice(ctx context.Context, addr netip.Prefix, mtu int, bind conn.Bind) (node.Device, error) {
	tdev, err := s.prov.Up(ctx, addr, mtu)
	if err != nil {
		return nil, err
	}
	wg := device.NewDevice(tdev, conn.NewDefaultBind(), device.NewLogger(device.LogLevelSilent, ""))
	if err := wg.Up(); err != nil {
		wg.Close()
		return nil, err
	}
	ln, err := ListenUAPI(s.name)
	if err != nil {
		wg.Close()
		return nil, err
	}
	var conns sync.WaitGroup
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				wg.IpcHandle(c)
			}()
		}
	}()
	stop := func() {
		ln.Close()
		conns.Wait()
		wg.Close()
	}
	d, err := Attach(AttachConfig{Name: s.name, Bind: bind, Logger: testLogger()})
	if err != nil {
		stop()
		return nil, err
	}
	d.onClose = stop
	s.mu.Lock()
	s.dev = d
	s.mu.Unlock()
	return d, nil
}

func (s *standIn) device() *Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev
}

const labToken = "wgdev-lab-token-0123456789"

// labWorld is labtest's internet with STUN, a relay and control (embedded
// NATS) on its server, as node's lab tests build it.
type labWorld struct {
	lw    *labtest.World
	relay *relay.Server
}

const natsAddr = "203.0.113.101:443"

func newLabWorld(t testing.TB) *labWorld {
	t.Helper()
	lw := labtest.New(t, fabric.Config{Seed: 1})
	st, err := stun.NewServer(stun.Config{Network: lw.Server, Primary: netip.MustParseAddrPort("203.0.113.100:3478")})
	require.NoError(t, err)
	require.NoError(t, st.Start(t.Context()))
	t.Cleanup(func() { st.Close() })
	secret := []byte("wgdev-relay-secret-0123456789abcdef")
	tlsCfg := meshtest.SelfSignedTLS(t)
	rs, err := relay.NewServer(relay.ServerConfig{Network: lw.Server, Addr: "203.0.113.100:443", Secret: secret, TLS: tlsCfg})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	store, err := control.OpenFileStore(filepath.Join(t.TempDir(), "registry.json"))
	require.NoError(t, err)
	ctrl, err := control.New(t.Context(), control.Config{
		Network: lw.Server, Tokens: []control.JoinToken{{Value: labToken}}, Store: store,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: lw.Server, Listen: natsAddr},
		STUN:         []string{"203.0.113.100:3478"},
		Relays:       []controlapi.Relay{{Addr: "203.0.113.100:443", Fingerprint: rs.Fingerprint()}},
		RelayToken: func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(secret, k, now.Add(time.Hour))), nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { ctrl.Close() })
	return &labWorld{lw: lw, relay: rs}
}

// startNode starts a node on h; edit adjusts its Config.
func (w *labWorld) startNode(t testing.TB, h *fabric.Host, name string, edit func(*node.Config)) *node.Node {
	t.Helper()
	cfg := node.Config{
		Name: name, Network: h, Control: "nats://" + natsAddr + "?insecure=1", Token: labToken, Logger: testLogger(),
		ICE: node.ICEConfig{RetryMin: time.Second, RetryMax: 2 * time.Second},
	}
	edit(&cfg)
	n, err := node.Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// waitPath waits until n's first peer is on want.
func waitPath(t testing.TB, n *node.Node, want node.PathKind, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		st := n.Status()
		return len(st) > 0 && st[0].Path == want
	}, within, 10*time.Millisecond, "path never became %s: %+v", want, n.Status())
}

// listen accepts one TCP connection on the stack's port.
func listen(t testing.TB, st *netstack.Stack, port string) net.Listener {
	t.Helper()
	ln, err := st.Listen(t.Context(), "tcp", ":"+port)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}
