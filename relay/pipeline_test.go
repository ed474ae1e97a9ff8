package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

// dialerFor returns a bare client of s (no run loop) with k and tok, for
// driving dialOne by hand.
func dialerFor(t *testing.T, s *Server, k key.Public, tok Token) *Client {
	t.Helper()
	cfg := ClientConfig{Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: k, Token: tok, DialTimeout: 5 * time.Second}
	require.NoError(t, cfg.setDefaults())
	tc, err := clientTLS(&cfg, "127.0.0.1")
	require.NoError(t, err)
	return &Client{cfg: cfg, tls: tc, token: tok}
}

// queueOf returns a queue holding n packets of size bytes for dst, the
// i-th filled with byte i.
func queueOf(dst key.Public, n, size int) *pktQueue {
	q := newPktQueue(max(n, 1))
	for i := range n {
		q.push(copyPacket(dst, fill(size, byte(i))))
	}
	return q
}

// TestHelloPipelined: packets queued before the connection exists go
// out in HELLO's flush and reach their peer, with no writer running on
// the connection (dialOne starts none): they did not wait for WELCOME.
func TestHelloPipelined(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, ServerConfig{})
			b := connectedClient(t, s, onTransport(tr))
			k := newKey(t)
			d := dialerFor(t, s, k, IssueToken(testSecret, k, time.Now().Add(time.Hour)))
			q := queueOf(b.Key(), 3, 1400)
			cc, err := d.dialOne(ctxT(t, 10*time.Second), tr, d.token, q)
			require.NoError(t, err)
			t.Cleanup(cc.w.closeConn)
			for i := range 3 {
				src, pkt, err := b.Recv(ctxT(t, 5*time.Second))
				require.NoError(t, err, "packet %d behind HELLO never arrived", i)
				assert.Equal(t, k, src)
				assert.Equal(t, fill(1400, byte(i)), pkt)
			}
			assert.Equal(t, uint64(3), d.Stats().PacketsSent)
		})
	}
}

// TestHelloPipelinedBounded: behind HELLO go at most maxEarly bytes of
// packets; the rest stay queued, in order, for the connection's writer.
func TestHelloPipelinedBounded(t *testing.T) {
	s := startServer(t, ServerConfig{})
	b := connectedClient(t, s, onTransport(transportTCP))
	k := newKey(t)
	d := dialerFor(t, s, k, IssueToken(testSecret, k, time.Now().Add(time.Hour)))
	const n = 40 // 40 × 1400 bytes: 56 000, maxEarly allows 8 of them
	q := queueOf(b.Key(), n, 1400)
	cc, err := d.dialOne(ctxT(t, 10*time.Second), transportTCP, d.token, q)
	require.NoError(t, err)
	t.Cleanup(cc.w.closeConn)
	early := maxEarly / 1400
	for i := range early {
		_, pkt, err := b.Recv(ctxT(t, 5*time.Second))
		require.NoError(t, err)
		assert.Equal(t, fill(1400, byte(i)), pkt)
	}
	_, _, err = b.Recv(ctxT(t, 200*time.Millisecond))
	require.ErrorIs(t, err, context.DeadlineExceeded, "more than maxEarly bytes went out before WELCOME")
	assert.Equal(t, uint64(early), d.Stats().PacketsSent)
	go cc.w.writeLoop(q)
	t.Cleanup(func() { cc.w.fail(CloseNormal, "", nil, false) })
	for i := early; i < n; i++ {
		_, pkt, err := b.Recv(ctxT(t, 5*time.Second))
		require.NoError(t, err)
		assert.Equal(t, fill(1400, byte(i)), pkt, "packet %d", i)
	}
}

// TestRefusedHelloDeliversNothing: a client whose HELLO the relay
// refuses gets the refusal's code, and the packets it sent right behind
// that HELLO are never forwarded: not to the peer they name, not
// counted. The same sequence with a valid token delivers (so the check
// can fail).
func TestRefusedHelloDeliversNothing(t *testing.T) {
	otherSecret := []byte(strings.Repeat("s", MinSecretSize))
	tests := []struct {
		name     string
		token    func(k key.Public) Token
		version  uint8
		wantCode CloseCode
	}{
		{"forged with another secret", func(k key.Public) Token { return IssueToken(otherSecret, k, time.Now().Add(time.Hour)) }, ProtocolVersion, CloseAuthInvalid},
		{"expired", func(k key.Public) Token { return IssueToken(testSecret, k, time.Now().Add(-time.Second)) }, ProtocolVersion, CloseAuthExpired},
		{"issued for another key", func(key.Public) Token { return IssueToken(testSecret, key.Public{1}, time.Now().Add(time.Hour)) }, ProtocolVersion, CloseAuthWrongKey},
		{"garbage", func(key.Public) Token { return "not-a-token" }, ProtocolVersion, CloseAuthInvalid},
		{"another version", func(k key.Public) Token { return IssueToken(testSecret, k, time.Now().Add(time.Hour)) }, ProtocolVersion + 1, CloseVersion},
	}
	for _, tt := range tests {
		for _, tr := range transports {
			t.Run(tt.name+"/"+tr, func(t *testing.T) {
				t.Parallel()
				s := startServer(t, ServerConfig{})
				b := connectedClient(t, s, onTransport(tr))
				k := newKey(t)
				d := dialerFor(t, s, k, tt.token(k))
				// As many packets as may follow HELLO.
				q := queueOf(b.Key(), maxEarly/1400, 1400)
				var err error
				if tt.version == ProtocolVersion {
					_, err = d.dialOne(ctxT(t, 10*time.Second), tr, d.token, q)
				} else {
					err = helloVersion(t, d, tr, tt.version, q)
				}
				var ce *CloseError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, tt.wantCode, ce.Code)
				assert.True(t, ce.Remote)
				assert.Zero(t, q.peekLen(), "every queued packet went out behind HELLO")
				assert.Equal(t, uint64(maxEarly/1400), d.Stats().PacketsSent)

				_, _, err = b.Recv(ctxT(t, 300*time.Millisecond))
				require.ErrorIs(t, err, context.DeadlineExceeded, "a packet behind a refused HELLO was delivered")
				st := s.Stats()
				assert.Zero(t, st.PacketsIn, "packets behind a refused HELLO were read")
				assert.Zero(t, st.PacketsOut)
				assert.Equal(t, 1, st.Clients[tr], "only the receiver is connected")

				// The same client, with a valid HELLO, gets through.
				good := dialerFor(t, s, k, IssueToken(testSecret, k, time.Now().Add(time.Hour)))
				cc, err := good.dialOne(ctxT(t, 10*time.Second), tr, good.token, queueOf(b.Key(), 1, 1400))
				require.NoError(t, err)
				t.Cleanup(cc.w.closeConn)
				src, pkt, err := b.Recv(ctxT(t, 5*time.Second))
				require.NoError(t, err)
				assert.Equal(t, k, src)
				assert.Equal(t, fill(1400, 0), pkt)
			})
		}
	}
}

// helloVersion does what exchangeHello does with a HELLO of version v,
// and returns the server's answer as an error (nil for WELCOME).
func helloVersion(t *testing.T, d *Client, tr string, v uint8, q *pktQueue) error {
	t.Helper()
	a, err := d.connect(ctxT(t, 10*time.Second), tr)
	require.NoError(t, err)
	t.Cleanup(a.close)
	a.w.onSent = func([]byte, bool) { d.stats.packetsSent.Add(1) }
	_, err = d.sendHello(a.w, &frame{typ: frameHello, version: v, key: d.cfg.Key, data: []byte(d.token)}, q)
	return err
}

// TestSendWhileDialing: a client's Send before its first connection is
// up queues the packet instead of failing, and the packet arrives.
func TestSendWhileDialing(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, ServerConfig{})
			b := connectedClient(t, s, onTransport(tr))
			a := clientFor(t, s, onTransport(tr))
			require.NoError(t, a.Send(b.Key(), fill(100, 7)), "Send while the first connection is dialed")
			src, pkt, err := b.Recv(ctxT(t, 5*time.Second))
			require.NoError(t, err)
			assert.Equal(t, a.Key(), src)
			assert.Equal(t, fill(100, 7), pkt)
		})
	}
}
