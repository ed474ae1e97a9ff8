package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
)

var transports = []string{transportQUIC, transportTCP}

func onTransport(tr string) func(*ClientConfig) {
	return func(c *ClientConfig) { c.Transport = tr }
}

// exchange sends pkt from a to b and checks it arrives intact from a.
func exchange(t *testing.T, a, b *Client, pkt []byte) {
	t.Helper()
	require.NoError(t, a.Send(b.Key(), pkt))
	src, got, err := b.Recv(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, a.Key(), src)
	require.True(t, bytes.Equal(pkt, got), "%d-byte packet arrived as %d bytes", len(pkt), len(got))
}

func fill(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

func TestForward(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, ServerConfig{})
			a := connectedClient(t, s, onTransport(tr))
			b := connectedClient(t, s, onTransport(tr))
			assert.Equal(t, tr, a.Transport())
			assert.Equal(t, tr, b.Transport())
			assert.Equal(t, map[string]int{transportQUIC: 0, transportTCP: 0, tr: 2}, s.Stats().Clients)

			// Both ways, every size from one byte to MaxPacketSize.
			for i, n := range []int{1, 100, 1400, 1400, 9000, MaxPacketSize} {
				exchange(t, a, b, fill(n, byte(i)))
				exchange(t, b, a, fill(n, byte(i+100)))
			}
			// A packet larger than the write buffer reaches the socket
			// before the writer counts it, so the receiver may be first.
			eventually(t, 5*time.Second, func() bool { return s.Stats().PacketsOut == 12 }, "packets out: %d", s.Stats().PacketsOut)
			st := s.Stats()
			assert.Equal(t, uint64(12), st.PacketsIn)
			assert.Equal(t, st.BytesIn, st.BytesOut)
			if tr == transportTCP {
				assert.Zero(t, st.DatagramsIn+st.DatagramsOut)
				return
			}
			// Once both ids are acknowledged, WireGuard-sized packets ride
			// datagrams on both hops; jumbo ones fall back to the stream.
			eventually(t, 5*time.Second, func() bool {
				before := s.Stats()
				exchange(t, a, b, fill(1400, 0xee))
				after := s.Stats()
				return after.DatagramsIn == before.DatagramsIn+1 && after.DatagramsOut == before.DatagramsOut+1
			}, "1400-byte packets never travelled as datagrams")
			fallbacks := s.Stats().DatagramFallbacks
			exchange(t, a, b, fill(9000, 1))
			assert.Equal(t, fallbacks+1, s.Stats().DatagramFallbacks)
			assert.Zero(t, s.Stats().Drops["unknown_id"]+s.Stats().Drops["malformed"])
		})
	}
}

// TestRaceKeepsTCPOnAnOpenPath: on a path that treats both alike a
// racing client stays on TCP, which carries more, and says why.
func TestRaceKeepsTCPOnAnOpenPath(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := connectedClient(t, s, nil)
	assert.Equal(t, transportTCP, c.Transport(), c.TransportReason())
	assert.Contains(t, c.TransportReason(), "TCP kept unless QUIC's is shorter")
}

func TestAuthRefused(t *testing.T) {
	otherSecret := []byte(strings.Repeat("s", MinSecretSize))
	tests := []struct {
		name       string
		token      func(key key.Public) Token
		serverNow  func() time.Time
		wantCode   CloseCode
		wantReason string
	}{
		{
			name:       "forged with another secret",
			token:      func(k key.Public) Token { return IssueToken(otherSecret, k, time.Now().Add(time.Hour)) },
			wantCode:   CloseAuthInvalid,
			wantReason: "invalid",
		},
		{
			name:       "expired",
			token:      func(k key.Public) Token { return IssueToken(testSecret, k, time.Now().Add(-time.Second)) },
			wantCode:   CloseAuthExpired,
			wantReason: "expired",
		},
		{
			name:       "expired by the server's clock",
			token:      func(k key.Public) Token { return IssueToken(testSecret, k, time.Now().Add(time.Hour)) },
			serverNow:  func() time.Time { return time.Now().Add(2 * time.Hour) },
			wantCode:   CloseAuthExpired,
			wantReason: "expired",
		},
		{
			name:       "replayed for another key",
			token:      func(key.Public) Token { return IssueToken(testSecret, key.Public{1}, time.Now().Add(time.Hour)) },
			wantCode:   CloseAuthWrongKey,
			wantReason: "wrong_key",
		},
		{
			name:       "garbage",
			token:      func(key.Public) Token { return "not-a-token" },
			wantCode:   CloseAuthInvalid,
			wantReason: "malformed",
		},
	}
	for _, tt := range tests {
		for _, tr := range transports {
			t.Run(tt.name+"/"+tr, func(t *testing.T) {
				t.Parallel()
				s := startServer(t, ServerConfig{Now: tt.serverNow})
				c := clientFor(t, s, func(c *ClientConfig) {
					c.Transport = tr
					c.Token = tt.token(c.Key)
				})
				err := c.WaitConnected(ctxT(t, 10*time.Second))
				var ce *CloseError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, tt.wantCode, ce.Code)
				assert.True(t, ce.Remote)
				assert.Empty(t, c.Transport())
				st := s.Stats()
				assert.GreaterOrEqual(t, st.AuthFailures[tt.wantReason], uint64(1), "%v", st.AuthFailures)
				assert.Zero(t, st.Connections[tr])
				assert.Zero(t, st.Clients[tr])
			})
		}
	}
}

func TestSetTokenRecoversFromExpiry(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := clientFor(t, s, func(c *ClientConfig) {
		c.Token = IssueToken(testSecret, c.Key, time.Now().Add(-time.Minute))
	})
	var ce *CloseError
	require.ErrorAs(t, c.WaitConnected(ctxT(t, 10*time.Second)), &ce)
	require.Equal(t, CloseAuthExpired, ce.Code)
	c.SetToken(IssueToken(testSecret, c.Key(), time.Now().Add(time.Hour)))
	// The next retry uses the fresh token; the stale refusal must not
	// end the wait early once it is superseded.
	eventually(t, 10*time.Second, func() bool { return c.Transport() != "" }, "no reconnect with the fresh token")
	require.NoError(t, c.WaitConnected(ctxT(t, time.Second)))
}

type goneEvent struct {
	peer   key.Public
	reason GoneReason
}

func TestPeerGone(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, ServerConfig{})
			gone := make(chan goneEvent, 16)
			a := connectedClient(t, s, func(c *ClientConfig) {
				c.Transport = tr
				c.OnPeerGone = func(k key.Public, r GoneReason) { gone <- goneEvent{k, r} }
			})
			b := connectedClient(t, s, onTransport(tr))
			waitGone := func(want goneEvent) {
				t.Helper()
				select {
				case got := <-gone:
					assert.Equal(t, want, got)
				case <-time.After(5 * time.Second):
					t.Fatalf("no PEER_GONE for %s", want.peer.ShortString())
				}
			}

			nobody := newKey(t)
			require.NoError(t, a.Send(nobody, []byte("hello?")))
			waitGone(goneEvent{nobody, GoneNotHere})
			assert.Equal(t, uint64(1), s.Stats().Drops["no_peer"])

			// Repeats within goneInterval are dropped and counted but not
			// reported again. (On TCP the relay handles a's frames in order,
			// so once b has a's next packet every repeat was handled.)
			if tr == transportTCP {
				for range 10 {
					require.NoError(t, a.Send(nobody, []byte("hello?")))
				}
				exchange(t, a, b, []byte("sync"))
				assert.Equal(t, uint64(11), s.Stats().Drops["no_peer"])
				assert.Equal(t, uint64(1), s.Stats().PeerGone)
			}

			exchange(t, a, b, []byte("hi b"))
			require.NoError(t, b.Close())
			waitGone(goneEvent{b.Key(), GoneDisconnected})
			// The relay counts a notification after queueing it, so the
			// client may have it first.
			eventually(t, 5*time.Second, func() bool { return s.Stats().PeerGone == a.Stats().PeerGone }, "PEER_GONE counts differ")
		})
	}
}

func TestGarbledFramesCloseTheConnection(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a := connectedClient(t, s, onTransport(transportTCP))
	b := connectedClient(t, s, onTransport(transportQUIC))
	tests := []struct {
		name      string
		transport string
		bytes     []byte
		wantMsg   string
	}{
		{"type zero", transportTCP, []byte{0, 0, 1, 0}, "frame type 0x00"},
		{"oversized ping", transportTCP, append([]byte{byte(framePing), 0x10, 0}, make([]byte, 4096)...), "PING body is 4096 bytes, want 8"},
		{"undersized send", transportTCP, []byte{byte(frameSend), 0, 10, 1, 2}, "SEND body is 10 bytes, want 33..65535"},
		{"recv from a client", transportTCP, mustFrame(t, frame{typ: frameRecv, key: key.Public{1}, data: []byte{1}}), "unexpected RECV"},
		{"second hello", transportTCP, mustFrame(t, frame{typ: frameHello, version: 1, data: []byte{1}}), "unexpected HELLO"},
		{"bind on tcp", transportTCP, mustFrame(t, frame{typ: frameBind, id: 1}), "BIND on TCP"},
		{"ack of unassigned id", transportQUIC, mustFrame(t, frame{typ: frameBindAck, id: 77}), "BIND_ACK for unassigned peer id 77"},
		{"rebind", transportQUIC, append(mustFrame(t, frame{typ: frameBind, id: 5, key: key.Public{1}}), mustFrame(t, frame{typ: frameBind, id: 5, key: key.Public{2}})...), "BIND rebinds peer id 5"},
		// CLOSE is TCP only: a QUIC client closes with CONNECTION_CLOSE.
		{"close on quic", transportQUIC, mustFrame(t, frame{typ: frameClose, reason: uint8(CloseNormal), data: []byte("bye")}), "CLOSE on QUIC"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustDialRaw(t, s, tt.transport)
			r.writeRaw(tt.bytes)
			var err error
			if tt.transport == transportTCP {
				var f frame
				f, err = r.readUntil(frameClose)
				if err == nil {
					err = remoteClose(f.reason, string(f.data))
				}
			} else {
				_, err = r.readUntil(frameClose)
			}
			var ce *CloseError
			if !errors.As(err, &ce) {
				ce, _ = asRemoteClose(err)
			}
			require.NotNil(t, ce, "read ended with %v", err)
			assert.Equal(t, CloseProtocol, ce.Code)
			assert.Contains(t, ce.Message, tt.wantMsg)
			eventually(t, 5*time.Second, func() bool { return s.Stats().ProtocolErrors == uint64(i+1) }, "protocol error not counted")
		})
	}
	t.Run("stream ends inside a frame", func(t *testing.T) {
		for _, tr := range transports {
			r := mustDialRaw(t, s, tr)
			r.writeRaw(append([]byte{byte(frameSend), 0, 100}, make([]byte, 50)...))
			r.close()
		}
		eventually(t, 5*time.Second, func() bool {
			st := s.Stats()
			return st.Clients[transportTCP] == 1 && st.Clients[transportQUIC] == 1
		}, "server kept the truncated connections: %v", s.Stats().Clients)
		assert.Equal(t, uint64(len(tests)), s.Stats().ProtocolErrors, "a truncated stream is a lost connection, not a violation")
	})
	// Nothing the garbage did reached the honest clients' state.
	exchange(t, a, b, []byte("still fine"))
	exchange(t, b, a, []byte("still fine"))
	eventually(t, 5*time.Second, func() bool { return s.Stats().Clients[transportTCP]+s.Stats().Clients[transportQUIC] == 2 }, "raw connections not cleaned up")
}

func mustFrame(t *testing.T, f frame) []byte {
	t.Helper()
	b, err := appendFrame(nil, &f)
	require.NoError(t, err)
	return b
}

func TestGarbledDatagramsAreCountedDrops(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r := mustDialRaw(t, s, transportQUIC)
	qc := r.cc.w.qc
	require.NoError(t, qc.SendDatagram([]byte{0x42, 1, 2}))
	require.NoError(t, qc.SendDatagram(appendDatagram(nil, 0, []byte("id zero"))))
	require.NoError(t, qc.SendDatagram(appendDatagram(nil, 9, []byte("never bound"))))
	eventually(t, 5*time.Second, func() bool {
		d := s.Stats().Drops
		return d["malformed"] == 2 && d["unknown_id"] == 1
	}, "drops not counted: %v", s.Stats().Drops)
	// The connection survives its garbage.
	r.write(frame{typ: framePing, ping: [8]byte{7}})
	f, err := r.readUntil(framePong)
	require.NoError(t, err)
	assert.Equal(t, [8]byte{7}, f.ping)
	assert.Zero(t, s.Stats().ProtocolErrors)
}

func TestReplacedByNewerConnection(t *testing.T) {
	s := startServer(t, ServerConfig{})
	key := newKey(t)
	tok := IssueToken(testSecret, key, time.Now().Add(time.Hour))
	old, err := dialRaw(t, s, transportTCP, key, tok)
	require.NoError(t, err)
	newer, err := dialRaw(t, s, transportQUIC, key, tok)
	require.NoError(t, err)

	f, err := old.readUntil(frameClose)
	require.NoError(t, err)
	assert.Equal(t, CloseReplaced, CloseCode(f.reason))
	eventually(t, 5*time.Second, func() bool { return s.Stats().Clients[transportTCP] == 0 }, "old connection not released")
	assert.Equal(t, 1, s.Stats().Clients[transportQUIC])

	// The replaced connection's teardown did not unregister the key.
	a := connectedClient(t, s, nil)
	require.NoError(t, a.Send(key, []byte("to the newer one")))
	f, err = newer.readUntil(frameRecv)
	require.NoError(t, err)
	assert.Equal(t, []byte("to the newer one"), f.data)
}

func TestServerFull(t *testing.T) {
	s := startServer(t, ServerConfig{MaxClients: 1})
	connectedClient(t, s, nil)
	c := clientFor(t, s, onTransport(transportTCP))
	err := c.WaitConnected(ctxT(t, 500*time.Millisecond))
	var ce *CloseError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CloseServerFull, ce.Code)
	assert.GreaterOrEqual(t, s.Stats().AuthFailures["server_full"], uint64(1))
}

func TestRateLimit(t *testing.T) {
	s := startServer(t, ServerConfig{PacketRate: 50, QueueLen: 10})
	a := connectedClient(t, s, onTransport(transportTCP))
	b := connectedClient(t, s, onTransport(transportTCP))
	const n = 200
	for range n {
		require.NoError(t, a.Send(b.Key(), []byte("flood")))
	}
	eventually(t, 5*time.Second, func() bool { return s.Stats().PacketsIn == n }, "relay did not see the flood")
	st := s.Stats()
	// A burst of QueueLen plus what 50/s refills while the flood lasts.
	assert.GreaterOrEqual(t, st.Drops["rate_limited"], uint64(n-20))
	// Every packet is accounted for: forwarded or dropped with a reason
	// (on a loaded machine a few may find b's queue full first).
	var dropped uint64
	for _, d := range st.Drops {
		dropped += d
	}
	assert.Equal(t, uint64(n), dropped+st.PacketsOut, "drops %v, out %d", st.Drops, st.PacketsOut)
}

func TestKeepAlive(t *testing.T) {
	const interval = 40 * time.Millisecond
	s := startServer(t, ServerConfig{KeepAlive: interval})
	good := connectedClient(t, s, onTransport(transportTCP))
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			// A client that never answers PINGs is closed as idle after
			// three silent intervals...
			mute := mustDialRaw(t, s, tr)
			start := time.Now()
			var ce *CloseError
			f, err := mute.readUntil(frameClose)
			if err == nil {
				ce = remoteClose(f.reason, string(f.data))
			} else {
				ce, _ = asRemoteClose(err)
			}
			require.NotNil(t, ce, "read ended with %v", err)
			if tr == transportQUIC && ce.Code != CloseIdle {
				// quic-go's own idle timeout (three keepalives too) may
				// win the race; either way the connection is gone.
				assert.Contains(t, []CloseCode{CloseIdle, CloseNormal}, ce.Code)
			} else {
				assert.Equal(t, CloseIdle, ce.Code)
			}
			assert.GreaterOrEqual(t, time.Since(start), 2*interval)
		})
	}
	// ...while a client that answers stays on its first connection.
	assert.Equal(t, uint64(1), good.Stats().Connects)
	assert.Equal(t, transportTCP, good.Transport())
}

func TestReconnectAfterServerRestart(t *testing.T) {
	cert, err := SelfSigned(time.Now())
	require.NoError(t, err)
	cfg := ServerConfig{Secret: testSecret, TLS: tlsWith(cert)}
	s1, err := NewServer(cfg)
	require.NoError(t, err)
	c := clientFor(t, s1, func(c *ClientConfig) { c.DialTimeout = 500 * time.Millisecond })
	require.NoError(t, c.WaitConnected(ctxT(t, 10*time.Second)))
	require.NoError(t, s1.Close())
	eventually(t, 5*time.Second, func() bool { return c.Transport() == "" }, "client did not notice the relay going away")
	require.ErrorIs(t, c.Send(key.Public{1}, []byte("x")), ErrNotConnected)

	cfg.Addr = s1.Addr().String()
	s2 := startServer(t, cfg)
	require.NoError(t, c.WaitConnected(ctxT(t, 10*time.Second)))
	assert.Equal(t, uint64(2), c.Stats().Connects)
	peer := connectedClient(t, s2, nil)
	exchange(t, c, peer, []byte("back"))
}

func TestFingerprintMismatch(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := clientFor(t, s, func(c *ClientConfig) { c.Fingerprint = strings.Repeat("ab", 32) })
	err := c.WaitConnected(ctxT(t, time.Second))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "does not match the pinned fingerprint")
	assert.Zero(t, s.Stats().Connections[transportQUIC]+s.Stats().Connections[transportTCP])
}

func TestClientErrors(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a := connectedClient(t, s, nil)
	assert.ErrorIs(t, a.Send(key.Public{1}, nil), ErrPacketSize)
	assert.ErrorIs(t, a.Send(key.Public{1}, make([]byte, MaxPacketSize+1)), ErrPacketSize)

	// Nothing listens on port 1. Once the first attempt failed, and
	// until the next (a minute later), Send fails at once. (While an
	// attempt is under way it queues instead: TestSendWhileDialing.)
	lost := clientFor(t, s, func(c *ClientConfig) {
		c.Server = "127.0.0.1:1"
		c.MinBackoff, c.MaxBackoff = 2*time.Minute, 2*time.Minute
		c.DialTimeout = 300 * time.Millisecond // QUIC hears no refusal
	})
	eventually(t, 5*time.Second, func() bool {
		lost.mu.Lock()
		defer lost.mu.Unlock()
		return lost.lastErr != nil
	}, "the first attempt never failed")
	assert.ErrorIs(t, lost.Send(key.Public{1}, []byte("x")), ErrNotConnected)

	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	assert.ErrorIs(t, a.Send(key.Public{1}, []byte("x")), ErrClosed)
	_, _, err := a.Recv(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, a.WaitConnected(context.Background()), ErrClosed)
	assert.Empty(t, a.Transport())
}

func TestConfigErrors(t *testing.T) {
	key := key.Public{1}
	tok := IssueToken(testSecret, key, time.Now().Add(time.Hour))
	serverTests := []struct {
		name    string
		cfg     ServerConfig
		wantErr string
	}{
		{"no secret", ServerConfig{}, "0-byte secret"},
		{"short secret", ServerConfig{Secret: []byte("short")}, "5-byte secret"},
		{"bad address", ServerConfig{Secret: testSecret, Addr: "127.0.0.1"}, "listen address"},
		{"negative queue", ServerConfig{Secret: testSecret, QueueLen: -1}, "negative QueueLen"},
		{"missing cert", ServerConfig{Secret: testSecret, CertFile: "/nonexistent.pem", KeyFile: "/nonexistent.key"}, "load certificate"},
	}
	for _, tt := range serverTests {
		t.Run("server/"+tt.name, func(t *testing.T) {
			_, err := NewServer(tt.cfg)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
	clientTests := []struct {
		name    string
		cfg     ClientConfig
		wantErr string
	}{
		{"no server", ClientConfig{Key: key, Token: tok}, "no Server"},
		{"bad server", ClientConfig{Server: "relay", Key: key, Token: tok}, "missing port"},
		{"zero key", ClientConfig{Server: "127.0.0.1:1", Token: tok}, "zero Key"},
		{"no token", ClientConfig{Server: "127.0.0.1:1", Key: key}, "no Token"},
		{"bad transport", ClientConfig{Server: "127.0.0.1:1", Key: key, Token: tok, Transport: "udp"}, `unknown transport "udp"`},
		{"bad fingerprint", ClientConfig{Server: "127.0.0.1:1", Key: key, Token: tok, Fingerprint: "xyz"}, "want 32 hex bytes"},
	}
	for _, tt := range clientTests {
		t.Run("client/"+tt.name, func(t *testing.T) {
			_, err := NewClient(tt.cfg)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerConfig{Registerer: reg})
	a := connectedClient(t, s, onTransport(transportQUIC))
	b := connectedClient(t, s, onTransport(transportQUIC))
	exchange(t, a, b, []byte("counted"))

	_, err := NewServer(ServerConfig{Secret: testSecret, Registerer: reg})
	assert.ErrorContains(t, err, "register metrics")

	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				labels += fmt.Sprintf("%s=%s,", l.GetName(), l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			got[mf.GetName()+"{"+labels+"}"] = fmt.Sprint(v)
		}
	}
	assert.Equal(t, "2", got["lattice_relay_clients{transport=quic,}"])
	assert.Equal(t, "1", got["lattice_relay_packets_total{direction=in,}"])
	assert.Equal(t, "7", got["lattice_relay_bytes_total{direction=out,}"])
	assert.Equal(t, "0", got["lattice_relay_drops_total{reason=queue_full,}"])
	assert.Equal(t, "0", got["lattice_relay_auth_failures_total{reason=expired,}"])
	for _, name := range []string{"lattice_relay_connections_total", "lattice_relay_datagrams_total", "lattice_relay_peer_gone_total", "lattice_relay_datagram_fallbacks_total", "lattice_relay_protocol_errors_total"} {
		assert.True(t, hasPrefix(got, name), "missing %s", name)
	}

	require.NoError(t, s.Close())
	mfs, err = reg.Gather()
	require.NoError(t, err)
	assert.Empty(t, mfs, "metrics still registered after Close")
}

func hasPrefix(m map[string]string, p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
