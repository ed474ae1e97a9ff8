package netstack

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
)

// wgKey is an X25519 key pair in the hex form wireguard-go's UAPI takes.
type wgKey struct{ private, public string }

func newWGKey() (wgKey, error) {
	var priv [32]byte
	if _, err := rand.Read(priv[:]); err != nil {
		return wgKey{}, err
	}
	// Clamp as RFC 7748 section 5 and WireGuard do.
	priv[0] &= 248
	priv[31] = priv[31]&127 | 64
	pub, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		return wgKey{}, err
	}
	return wgKey{private: hex.EncodeToString(priv[:]), public: hex.EncodeToString(pub)}, nil
}

// wgNode is one side of a WireGuard pair.
type wgNode struct {
	dev  *device.Device
	key  wgKey
	port uint16
	addr netip.Addr // overlay address
}

// newWGNode starts a wireguard-go device on tdev with a UDP bind on a free
// port (all addresses, as conn.NewDefaultBind binds); cleanup closes it,
// which closes tdev.
func newWGNode(tb testing.TB, tdev tun.Device, bind conn.Bind, addr netip.Addr) *wgNode {
	tb.Helper()
	n, err := startWG(tb, tdev, bind, addr)
	require.NoError(tb, err)
	return n
}

// startWG is newWGNode for goroutines other than the test's: it reports
// failure instead of failing the test.
func startWG(tb testing.TB, tdev tun.Device, bind conn.Bind, addr netip.Addr) (*wgNode, error) {
	logger := &device.Logger{Verbosef: device.DiscardLogf, Errorf: device.DiscardLogf}
	if testing.Verbose() {
		logger.Errorf = func(format string, args ...any) { tb.Logf("wg %v: "+format, append([]any{addr}, args...)...) }
	}
	key, err := newWGKey()
	if err != nil {
		return nil, err
	}
	n := &wgNode{dev: device.NewDevice(tdev, bind, logger), key: key, addr: addr}
	tb.Cleanup(n.dev.Close)
	if err := n.dev.IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=0\n", n.key.private)); err != nil {
		return nil, fmt.Errorf("configure: %w", err)
	}
	if err := n.dev.Up(); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	get, err := n.dev.IpcGet()
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(get))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "listen_port="); ok {
			p, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("listen_port: %w", err)
			}
			n.port = uint16(p)
			return n, nil
		}
	}
	return nil, fmt.Errorf("no listen_port in %q", get)
}

// peer makes a and b each other's only peer; a reaches b's UDP port at
// bHost and b reaches a's at aHost.
func peer(tb testing.TB, a, b *wgNode, aHost, bHost netip.Addr) {
	tb.Helper()
	set := func(n, m *wgNode, host netip.Addr) {
		require.NoError(tb, n.dev.IpcSet(fmt.Sprintf(
			"replace_peers=true\npublic_key=%s\nendpoint=%s\nallowed_ip=%s\n",
			m.key.public, netip.AddrPortFrom(host, m.port), netip.PrefixFrom(m.addr, m.addr.BitLen()))))
	}
	set(a, b, bHost)
	set(b, a, aHost)
}

var localhost = netip.MustParseAddr("127.0.0.1")

// wgPair connects two Stacks through two wireguard-go devices talking
// over 127.0.0.1 with the default (batching, UDP GSO/GRO) bind.
func wgPair(tb testing.TB) (a, b *Stack) {
	tb.Helper()
	a, b = newStack(tb, addrA), newStack(tb, addrB)
	na := newWGNode(tb, a.TUN(), conn.NewDefaultBind(), addrA.Addr())
	nb := newWGNode(tb, b.TUN(), conn.NewDefaultBind(), addrB.Addr())
	peer(tb, na, nb, localhost, localhost)
	return a, b
}
