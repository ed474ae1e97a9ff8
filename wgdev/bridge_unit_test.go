package wgdev

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/conn"
)

// fakeBind is a conn.Bind whose peers are names: endpoint "peer:X".
type fakeBind struct {
	in     chan fakePkt
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	sent   []fakePkt
}

type fakePkt struct {
	to  string
	pkt string
}

type fakeEP string

func (e fakeEP) ClearSrc()           {}
func (e fakeEP) SrcToString() string { return "" }
func (e fakeEP) DstToString() string { return string(e) }
func (e fakeEP) DstToBytes() []byte  { return []byte(e) }
func (e fakeEP) DstIP() netip.Addr   { return netip.Addr{} }
func (e fakeEP) SrcIP() netip.Addr   { return netip.Addr{} }

func newFakeBind() *fakeBind {
	return &fakeBind{in: make(chan fakePkt, 16), closed: make(chan struct{})}
}

func (f *fakeBind) Open(uint16) ([]conn.ReceiveFunc, uint16, error) {
	return []conn.ReceiveFunc{func(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		select {
		case p := <-f.in:
			sizes[0] = copy(bufs[0], p.pkt)
			eps[0] = fakeEP(p.to)
			return 1, nil
		case <-f.closed:
			return 0, net.ErrClosed
		}
	}}, 0, nil
}
func (f *fakeBind) Close() error         { f.once.Do(func() { close(f.closed) }); return nil }
func (f *fakeBind) SetMark(uint32) error { return nil }
func (f *fakeBind) BatchSize() int       { return 4 }
func (f *fakeBind) ParseEndpoint(s string) (conn.Endpoint, error) {
	if len(s) < 5 || s[:5] != "peer:" {
		return nil, net.InvalidAddrError("not a peer: " + s)
	}
	return fakeEP(s), nil
}
func (f *fakeBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range bufs {
		f.sent = append(f.sent, fakePkt{to: ep.DstToString(), pkt: string(b)})
	}
	return nil
}
func (f *fakeBind) sentCopy() []fakePkt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakePkt(nil), f.sent...)
}

// TestBridgeLocalSockets: each peer gets its own loopback socket; what
// the device sends to it reaches the Bind addressed to that peer, what
// the Bind receives from a peer reaches the device from that socket, a
// removed peer's socket closes, and packets for unknown peers are counted.
func TestBridgeLocalSockets(t *testing.T) {
	dev, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer dev.Close()
	fb := newFakeBind()
	br, err := NewBridge(BridgeConfig{Bind: fb, Device: dev.LocalAddr().(*net.UDPAddr).AddrPort()})
	require.NoError(t, err)
	defer br.Close()

	qa, err := br.Endpoint("peer:a")
	require.NoError(t, err)
	qb, err := br.Endpoint("peer:b")
	require.NoError(t, err)
	again, err := br.Endpoint("peer:a")
	require.NoError(t, err)
	assert.Equal(t, qa, again, "one socket per peer")
	assert.NotEqual(t, qa, qb)
	assert.True(t, qa.Addr().IsLoopback())
	name, ok := br.Name(qb)
	assert.True(t, ok)
	assert.Equal(t, "peer:b", name)
	_, err = br.Endpoint("1.2.3.4:5")
	assert.EqualError(t, err, "wgdev: bridge: not a peer: 1.2.3.4:5")

	// Device → peer.
	for _, m := range []struct {
		to  netip.AddrPort
		pkt string
	}{{qa, "to-a"}, {qb, "to-b"}} {
		_, err := dev.WriteToUDPAddrPort([]byte(m.pkt), m.to)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(fb.sentCopy()) == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.ElementsMatch(t, []fakePkt{{"peer:a", "to-a"}, {"peer:b", "to-b"}}, fb.sentCopy())

	// Peer → device, from that peer's socket.
	fb.in <- fakePkt{to: "peer:b", pkt: "from-b"}
	fb.in <- fakePkt{to: "peer:zz", pkt: "from-unknown"}
	fb.in <- fakePkt{to: "peer:a", pkt: "from-a"}
	buf := make([]byte, 64)
	require.NoError(t, dev.SetReadDeadline(time.Now().Add(5*time.Second)))
	for _, want := range []struct {
		from netip.AddrPort
		pkt  string
	}{{qb, "from-b"}, {qa, "from-a"}} {
		n, from, err := dev.ReadFromUDPAddrPort(buf)
		require.NoError(t, err)
		assert.Equal(t, want.pkt, string(buf[:n]))
		assert.Equal(t, want.from, from)
	}
	assert.Equal(t, uint64(1), br.Unknown())

	br.Remove("peer:a")
	_, ok = br.Name(qa)
	assert.False(t, ok, "removed")
	fb.in <- fakePkt{to: "peer:a", pkt: "late"}
	require.Eventually(t, func() bool { return br.Unknown() == 2 }, 5*time.Second, 5*time.Millisecond)
}

func TestNewBridgeRefuses(t *testing.T) {
	_, err := NewBridge(BridgeConfig{Bind: newFakeBind(), Device: netip.MustParseAddrPort("192.0.2.1:51820")})
	assert.EqualError(t, err, "wgdev: bridge: device address 192.0.2.1:51820 is not on loopback")
	_, err = NewBridge(BridgeConfig{Device: netip.MustParseAddrPort("127.0.0.1:1")})
	assert.EqualError(t, err, "wgdev: bridge: no Bind")
}
