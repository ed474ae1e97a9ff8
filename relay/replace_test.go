package relay

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/key"
)

// rawDialer prepares hand-driven connections for one key, so that several
// can be dialed at once from goroutines (dialRaw fails the test from the
// goroutine that calls it).
func rawDialer(t *testing.T, s *Server, k key.Public) *Client {
	t.Helper()
	tok := IssueToken(testSecret, k, time.Now().Add(time.Hour))
	cfg := ClientConfig{Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: k, Token: tok, DialTimeout: 5 * time.Second}
	require.NoError(t, cfg.setDefaults())
	tc, err := clientTLS(&cfg, "127.0.0.1")
	require.NoError(t, err)
	return &Client{cfg: cfg, tls: tc, token: tok}
}

// dialAs authenticates one connection over transport; nil with the error
// if the relay refused it or closed it before WELCOME.
func dialAs(t *testing.T, d *Client, transport string) (*rawConn, error) {
	cc, err := d.dialOne(ctxT(t, 10*time.Second), transport, d.token, newPktQueue(d.cfg.QueueLen))
	if err != nil {
		return nil, err
	}
	r := &rawConn{t: t, cc: cc}
	t.Cleanup(r.close)
	return r, nil
}

// recvMarker reads frames until a RECV carrying marker arrives (skipping
// other RECVs and control frames) and reports whether it did before the
// connection ended or d passed.
func (r *rawConn) recvMarker(marker []byte, d time.Duration) bool {
	setDeadline(r.cc.w, time.Now().Add(d))
	for {
		f, err := readFrame(r.cc.w.br)
		if err != nil {
			return false
		}
		if f.typ == frameRecv && bytes.Equal(f.data, marker) {
			return true
		}
	}
}

// TestReplacedConnectionStopsTakingPackets: a node whose relay path died
// (its old TCP connection no longer reads, so the relay's writer toward it
// is stuck) reconnects. The first packet a peer sends it afterwards must
// reach the new connection, not vanish into the old one's queue while the
// relay tears the old one down (up to closeWriteTimeout). The peer's
// relay read loop had cached the route to the old connection.
func TestReplacedConnectionStopsTakingPackets(t *testing.T) {
	s := startServer(t, ServerConfig{QueueLen: 16})
	kb := newKey(t)
	d := rawDialer(t, s, kb)
	old, err := dialAs(t, d, transportTCP)
	require.NoError(t, err)
	a := connectedClient(t, s, onTransport(transportTCP))

	// Fill the socket buffers toward the old connection, which never
	// reads, until the relay's queue for it overflows: its writer is
	// stuck in a write.
	big := fill(MaxPacketSize, 0xaa)
	deadline := time.Now().Add(20 * time.Second)
	sent := uint64(0)
	for s.Stats().Drops["queue_full"] == 0 {
		require.True(t, time.Now().Before(deadline), "the relay's writer toward a silent client never blocked")
		require.NoError(t, a.Send(kb, big))
		sent++
	}
	// Let the relay handle the backlog, so that it does not fill the new
	// connection's queue ahead of the packet under test.
	eventually(t, 20*time.Second, func() bool { return s.Stats().PacketsIn == sent }, "relay read %d of %d packets", s.Stats().PacketsIn, sent)
	_ = old // never read: that is the point

	newer, err := dialAs(t, d, transportTCP)
	require.NoError(t, err)
	marker := []byte("first packet after the reconnect")
	require.NoError(t, a.Send(kb, marker))
	assert.True(t, newer.recvMarker(marker, 3*time.Second), "the first packet after the reconnect never reached the new connection")
}

// TestReconnectStorm dials one key over QUIC and TCP at once, round after
// round, while a peer keeps sending to it. Whichever connection the relay
// registered last wins: it gets the peer's next packet, and the other is
// closed as replaced. The loser's teardown leaves the winner registered.
func TestReconnectStorm(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a := connectedClient(t, s, onTransport(transportTCP))
	kb := newKey(t)
	d := rawDialer(t, s, kb)
	const rounds = 25
	for round := range rounds {
		order := []string{transportQUIC, transportTCP}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		conns := make([]*rawConn, 2)
		var wg sync.WaitGroup
		for i, tr := range order {
			wg.Go(func() { conns[i], _ = dialAs(t, d, tr) })
		}
		wg.Wait()

		marker := fmt.Appendf(nil, "round %d", round)
		require.NoError(t, a.Send(kb, marker))
		got := make([]bool, 2)
		for i, r := range conns {
			if r != nil {
				wg.Go(func() { got[i] = r.recvMarker(marker, 3*time.Second) })
			}
		}
		wg.Wait()
		require.True(t, got[0] != got[1], "round %d: %v dialed at once (connected: %v, %v), marker received: %v",
			round, order, conns[0] != nil, conns[1] != nil, got)
		winner, loser := conns[0], conns[1]
		if got[1] {
			winner, loser = loser, winner
		}

		// The loser's teardown must not unregister the winner.
		if loser != nil {
			loser.close()
		}
		eventually(t, 5*time.Second, func() bool {
			c := s.Stats().Clients
			return c[transportQUIC]+c[transportTCP] == 2
		}, "round %d: clients %v, want the peer and the winner", round, s.Stats().Clients)
		marker = fmt.Appendf(marker, ", after the loser left")
		require.NoError(t, a.Send(kb, marker))
		require.True(t, winner.recvMarker(marker, 3*time.Second), "round %d: the winner lost its registration", round)
		winner.close()
		eventually(t, 5*time.Second, func() bool { return s.lookup(kb) == nil }, "round %d: the winner's close left it registered", round)
	}
	// Every dial registered (a replaced one is not refused), and each
	// registration was undone exactly once: only the peer is left.
	st := s.Stats()
	assert.Equal(t, uint64(2*rounds+1), st.Connections[transportQUIC]+st.Connections[transportTCP], "connections")
	assert.Equal(t, map[string]int{transportQUIC: 0, transportTCP: 1}, st.Clients)
}

// TestCloseDuringHandshakes closes the relay while clients keep dialing
// it over both transports, so that HELLOs are in flight at every stage of
// the handshake. Close returns with nothing left behind: no connection
// registered, counted as connected or pending, every client told, and no
// goroutine of the server still running.
func TestCloseDuringHandshakes(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			s, err := NewServer(ServerConfig{Secret: testSecret})
			require.NoError(t, err)
			var (
				mu    sync.Mutex
				conns []*rawConn
				wg    sync.WaitGroup
			)
			for i := range 8 {
				d := rawDialer(t, s, newKey(t))
				d.cfg.DialTimeout = time.Second // a QUIC dial to the closed relay waits it out
				tr := transports[i%2]
				wg.Go(func() {
					for {
						r, err := dialAs(t, d, tr)
						if err != nil {
							if s.ctx.Err() != nil {
								return
							}
							continue
						}
						mu.Lock()
						conns = append(conns, r)
						mu.Unlock()
					}
				})
			}
			eventually(t, 10*time.Second, func() bool {
				c := s.Stats().Connections
				return c[transportQUIC]+c[transportTCP] >= uint64(8+4*round)
			}, "clients do not connect")

			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			wg.Wait()

			st := s.Stats()
			assert.Equal(t, map[string]int{transportQUIC: 0, transportTCP: 0}, st.Clients)
			s.mu.RLock()
			assert.Empty(t, s.clients)
			s.mu.RUnlock()
			all, _ := s.pre.len(netip.Addr{})
			assert.Zero(t, all, "connections left pending")
			for _, r := range conns {
				_, err := r.readUntil(frameRecv) // skips the CLOSE; ends with the connection
				assert.Error(t, err, "a client still connected after Close")
				r.close()
			}
		})
	}
}

// TestReplacementKeepsSenders: a peer that sent to a node is told when
// the node disconnects (PEER_GONE disconnected), also when the node's
// connection was replaced by a newer one in between and the peer has not
// sent since.
func TestReplacementKeepsSenders(t *testing.T) {
	s := startServer(t, ServerConfig{})
	gone := make(chan goneEvent, 16)
	a := connectedClient(t, s, func(c *ClientConfig) {
		c.Transport = transportTCP
		c.OnPeerGone = func(k key.Public, r GoneReason) { gone <- goneEvent{k, r} }
	})
	kb := newKey(t)
	d := rawDialer(t, s, kb)
	old, err := dialAs(t, d, transportTCP)
	require.NoError(t, err)
	require.NoError(t, a.Send(kb, []byte("to b")))
	require.True(t, old.recvMarker([]byte("to b"), 5*time.Second))

	newer, err := dialAs(t, d, transportQUIC)
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return s.Stats().Clients[transportTCP] == 1 }, "the old connection was not released")
	newer.close()
	select {
	case got := <-gone:
		assert.Equal(t, goneEvent{kb, GoneDisconnected}, got)
	case <-time.After(5 * time.Second):
		t.Fatal("the node left, and the peer that had sent to it was not told")
	}
}

// recvUntil receives on c until pkt arrives from src, skipping other
// packets, and reports whether it did within d.
func recvUntil(t *testing.T, c *Client, src key.Public, pkt []byte, d time.Duration) bool {
	t.Helper()
	ctx := ctxT(t, d)
	for {
		from, got, err := c.Recv(ctx)
		if err != nil {
			return false
		}
		if from == src && bytes.Equal(got, pkt) {
			return true
		}
	}
}

// TestClientReconnectStorm loses a racing client's connection again and
// again while a peer keeps sending to it and it keeps sending back. After
// the storm the client is connected once, and packets reach it and leave
// it as before.
func TestClientReconnectStorm(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a := connectedClient(t, s, onTransport(transportTCP))
	b := connectedClient(t, s, func(c *ClientConfig) {
		c.RaceWait = 50 * time.Millisecond
		c.MaxBackoff = 20 * time.Millisecond
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, pair := range [][2]*Client{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				_ = from.Send(to.Key(), []byte("storm")) // fails between connections
			}
		})
	}
	// reconnected waits for b's next connection after prev.
	var prev *cconn
	reconnected := func() *cconn {
		var cc *cconn
		eventually(t, 10*time.Second, func() bool {
			cc = b.cur.Load()
			return cc != nil && cc != prev
		}, "b did not reconnect")
		return cc
	}
	const rounds = 20
	for range rounds {
		prev = reconnected()
		prev.w.fail(CloseNormal, "storm", nil, false)
	}
	close(stop)
	wg.Wait()

	reconnected()
	assert.Equal(t, uint64(rounds+1), b.Stats().Connects)
	eventually(t, 5*time.Second, func() bool {
		c := s.Stats().Clients
		return c[transportQUIC]+c[transportTCP] == 2
	}, "clients %v, want a and b once each", s.Stats().Clients)
	require.NoError(t, a.Send(b.Key(), []byte("after the storm")))
	assert.True(t, recvUntil(t, b, a.Key(), []byte("after the storm"), 5*time.Second), "a's packet did not reach b")
	require.NoError(t, b.Send(a.Key(), []byte("back after the storm")))
	assert.True(t, recvUntil(t, a, b.Key(), []byte("back after the storm"), 5*time.Second), "b's packet did not reach a")
}
