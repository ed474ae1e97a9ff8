package relay

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// udpBlackhole is netx.OS behind a firewall that silently drops UDP.
type udpBlackhole struct{ netx.Network }

func (n udpBlackhole) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	pc, err := n.Network.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return blackholeConn{pc}, nil
}

type blackholeConn struct{ net.PacketConn }

func (blackholeConn) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }

// SetReadBuffer and SetWriteBuffer pass through, so quic-go sizes the
// socket instead of logging that it cannot.
func (c blackholeConn) SetReadBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetReadBuffer(n)
}

func (c blackholeConn) SetWriteBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetWriteBuffer(n)
}

func TestRaceFallsBackToTCPWhenUDPIsBlocked(t *testing.T) {
	s := startServer(t, ServerConfig{})
	start := time.Now()
	blocked := connectedClient(t, s, func(c *ClientConfig) { c.Network = udpBlackhole{netx.OS} })
	assert.Equal(t, transportTCP, blocked.Transport())
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "TCP won before the race waited for QUIC")
	assert.Contains(t, blocked.TransportReason(), "QUIC did not connect within 300ms")
	// A client on QUIC (configured: racing on an open path keeps TCP)
	// talks with the one that fell back.
	open := connectedClient(t, s, func(c *ClientConfig) { c.Transport = transportQUIC })
	assert.Equal(t, transportQUIC, open.Transport())
	exchange(t, blocked, open, []byte("over tcp, then quic"))
	exchange(t, open, blocked, []byte("over quic, then tcp"))
}

// TestClientDetectsSilentRelay runs a fake relay that welcomes the client
// and then goes silent (a relay that hung, or a path that died without a
// FIN): the client must notice within three keepalives, tell the relay
// why, and reconnect by itself.
func TestClientDetectsSilentRelay(t *testing.T) {
	const keepalive = 30 * time.Millisecond
	cfg := ServerConfig{Now: time.Now}
	tc, fp, err := serverTLS(&cfg)
	require.NoError(t, err)
	l, err := netx.OS.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closes := make(chan CloseCode, 4)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				w := newTCPWire(tls.Server(nc, tc), frameRecv)
				if f, err := readFrame(w.br); err != nil || f.typ != frameHello {
					return
				}
				welcome := frame{typ: frameWelcome, version: ProtocolVersion, keepalive: uint32(keepalive.Milliseconds())}
				if w.writeFrame(&welcome) != nil || w.bw.Flush() != nil {
					return
				}
				for { // silent from now on; report what the client says
					f, err := readFrame(w.br)
					if err != nil {
						return
					}
					if f.typ == frameClose {
						closes <- CloseCode(f.reason)
					}
				}
			})
		}
	})

	key := newKey(t)
	c, err := NewClient(ClientConfig{
		Server: l.Addr().String(), Fingerprint: fp, Key: key, Token: "anything",
		Transport: transportTCP, MinBackoff: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	require.NoError(t, c.WaitConnected(ctxT(t, 5*time.Second)))
	select {
	case code := <-closes:
		assert.Equal(t, CloseIdle, code)
	case <-time.After(5 * time.Second):
		t.Fatal("client never gave up on the silent relay")
	}
	eventually(t, 5*time.Second, func() bool { return c.Stats().Connects >= 2 }, "client did not reconnect")
}
