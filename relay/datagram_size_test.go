package relay

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// sizeNet is netx.OS whose UDP sockets record the size of every datagram
// they send. The wrapper hides the *net.UDPConn from quic-go, so it sends
// one packet per write (no GSO) and each write is one QUIC packet.
type sizeNet struct {
	netx.Network
	mu    sync.Mutex
	sizes map[int]int
}

func (n *sizeNet) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	pc, err := n.Network.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &sizeConn{PacketConn: pc, n: n}, nil
}

func (n *sizeNet) reset() map[int]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.sizes
	n.sizes = make(map[int]int)
	return s
}

type sizeConn struct {
	net.PacketConn
	n *sizeNet
}

func (c *sizeConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.n.mu.Lock()
	c.n.sizes[len(b)]++
	c.n.mu.Unlock()
	return c.PacketConn.WriteTo(b, addr)
}

// TestDatagramPacketsFull: a MaxDatagramPacket-byte packet travels as a
// datagram in a QUIC packet of exactly quicPacketSize bytes — the size
// quic-go needs to batch packets into one GSO send — and so does a packet
// a few bytes shorter (padded); a byte more takes the control stream
// without being lost.
func TestDatagramPacketsFull(t *testing.T) {
	require.Equal(t, 1408, MaxDatagramPacket)
	s := startServer(t, ServerConfig{PacketRate: -1})
	sn := &sizeNet{Network: netx.OS, sizes: make(map[int]int)}
	src := connectedClient(t, s, func(c *ClientConfig) { c.Transport = transportQUIC; c.Network = sn })
	dst := connectedClient(t, s, func(c *ClientConfig) { c.Transport = transportQUIC })

	send := func(size, n int) {
		t.Helper()
		pkt := make([]byte, size)
		ctx := ctxT(t, 10*time.Second)
		for i := range n {
			pkt[0] = byte(i)
			require.NoError(t, src.Send(dst.Key(), pkt))
			_, got, err := dst.Recv(ctx)
			require.NoError(t, err, "packet %d of %d bytes", i, size)
			require.Len(t, got, size)
		}
	}
	// Until BIND_ACK the packets take the stream; then datagrams.
	eventually(t, 5*time.Second, func() bool {
		send(MaxDatagramPacket, 1)
		return s.Stats().DatagramsIn > 0
	}, "no datagram reached the relay")

	sn.reset()
	before := s.Stats()
	send(MaxDatagramPacket, 100)
	after := s.Stats()
	assert.Equal(t, uint64(100), after.DatagramsIn-before.DatagramsIn, "every %d-byte packet a datagram", MaxDatagramPacket)
	sizes := sn.reset()
	assert.GreaterOrEqual(t, sizes[quicPacketSize], 100, "QUIC packets by size: %v", sizes)
	for size, n := range sizes {
		assert.False(t, size > 1000 && size != quicPacketSize, "%d QUIC packets of %d bytes beside %d-byte full ones: %v", n, size, quicPacketSize, sizes)
	}

	// A packet a little short of full size (gVisor's full TCP segments
	// under the QUIC-relay MSS are 16 bytes short) is padded to fill its
	// QUIC packet too, and arrives without the padding.
	short := MaxDatagramPacket - 16
	before = s.Stats()
	send(short, 100)
	after = s.Stats()
	assert.Equal(t, uint64(100), after.DatagramsIn-before.DatagramsIn, "every %d-byte packet a datagram", short)
	sizes = sn.reset()
	assert.GreaterOrEqual(t, sizes[quicPacketSize], 100, "QUIC packets by size, %d-byte packets: %v", short, sizes)

	// Toward an end that did not announce FEATURES (a relay or client
	// from before it), the same packets go unpadded (TestPacketDatagram),
	// and still arrive.
	src.cur.Load().w.padOut.Store(false)
	send(short, 20)

	before = s.Stats()
	send(MaxDatagramPacket+1, 20)
	after = s.Stats()
	assert.Equal(t, before.DatagramsIn, after.DatagramsIn, "a %d-byte packet went as a datagram", MaxDatagramPacket+1)
	assert.Equal(t, uint64(20), after.PacketsIn-before.PacketsIn)
}

// TestPacketDatagram: a packet a little short of full size is padded only
// toward an end that announced it reads padding (FEATURES); a full-size
// one never is.
func TestPacketDatagram(t *testing.T) {
	var w wire
	short := make([]byte, MaxDatagramPacket-16)
	full := make([]byte, MaxDatagramPacket)
	assert.Equal(t, appendDatagram(nil, 3, short), w.appendPacketDatagram(nil, 3, short), "before FEATURES")

	w.qc = &quic.Conn{} // handleFeatures heeds FEATURES on QUIC only
	w.handleFeatures(&frame{typ: frameFeatures, data: []byte{featurePaddedDatagrams}})
	got := w.appendPacketDatagram(nil, 3, short)
	assert.Equal(t, appendPaddedDatagram(nil, 3, short, 15), got, "after FEATURES")
	assert.Len(t, got, len(appendDatagram(nil, 3, full)))
	assert.Equal(t, appendDatagram(nil, 3, full), w.appendPacketDatagram(nil, 3, full), "full size")
}
