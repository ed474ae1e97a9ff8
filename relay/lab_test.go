package relay_test

import (
	"bytes"
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/lab/vtime"
	"github.com/latticelab/lattice/relay"
)

// TestLabUDPBlockedClientLandsOnTCP puts the relay on a public server and
// two clients behind NATs: one behind a firewall that blocks UDP and allows
// only TCP 80 and 443 (nat profile "udp-blocked"), one behind a full-cone
// NAT. The relay listens on 443 so TCP gets through. Nobody tells the
// first client which transport to use: it must end up on TCP by itself
// while the other uses QUIC, and packets must flow between them.
func TestLabUDPBlockedClientLandsOnTCP(t *testing.T) {
	f, s, secret := labRelay(t)
	blockedHost, blockedRouter := labSite(t, f, "blocked", "udp-blocked", 10)
	openHost, _ := labSite(t, f, "open", "full-cone", 11)

	blocked := labClient(t, s, secret, blockedHost, key.Public{1}, "")
	// The open site's client is on QUIC (configured: racing, an open path
	// keeps TCP), so the two talk across transports.
	open := labClient(t, s, secret, openHost, key.Public{2}, "quic")

	assert.Equal(t, "tcp", blocked.Transport(), "the client behind the UDP block")
	assert.Equal(t, "quic", open.Transport(), "the client behind the open NAT")
	assert.NotZero(t, blockedRouter.Stats().Firewall, "QUIC was never tried (the firewall dropped nothing)")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, pair := range [][2]*relay.Client{{blocked, open}, {open, blocked}} {
		from, to := pair[0], pair[1]
		pkt := bytes.Repeat([]byte{byte(i + 1)}, 1400)
		require.NoError(t, from.Send(to.Key(), pkt))
		src, got, err := to.Recv(ctx)
		require.NoError(t, err)
		assert.Equal(t, from.Key(), src)
		assert.Equal(t, pkt, got)
	}
	st := s.Stats()
	assert.Equal(t, map[string]int{"quic": 1, "tcp": 1}, st.Clients)
}

// labRelay starts a fabric with an internet and a relay on 203.0.113.100:443
// that issues tokens with secret.
func labRelay(t *testing.T) (*fabric.Fabric, *relay.Server, []byte) {
	t.Helper()
	return labRelayAt(t, nil)
}

// labRelayAt is labRelay with a relay whose clock is now (nil: time.Now).
func labRelayAt(t *testing.T, now func() time.Time) (*fabric.Fabric, *relay.Server, []byte) {
	t.Helper()
	f, err := fabric.New(fabric.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: "internet", Prefix: netip.MustParsePrefix("203.0.113.0/24")})
	require.NoError(t, err)
	server, err := f.AddHost(fabric.HostConfig{Name: "relay", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.100")}}})
	require.NoError(t, err)
	secret := bytes.Repeat([]byte{7}, relay.MinSecretSize)
	s, err := relay.NewServer(relay.ServerConfig{Network: server, Addr: "203.0.113.100:443", Secret: secret, Now: now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return f, s, secret
}

// labClient connects a client of s on host h with key k over transport
// (empty: either), closed when the test ends.
func labClient(t *testing.T, s *relay.Server, secret []byte, h *fabric.Host, k key.Public, transport string) *relay.Client {
	t.Helper()
	c, err := relay.NewClient(relay.ClientConfig{
		Network:     h,
		Server:      s.Addr().String(),
		Fingerprint: s.Fingerprint(),
		Key:         k,
		Token:       relay.IssueToken(secret, k, time.Now().Add(time.Hour)),
		Transport:   transport,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.WaitConnected(ctx))
	return c
}

// labSite adds a LAN with one host behind a router whose uplink is
// 203.0.113.<uplink>, translating with the named NAT profile.
func labSite(t *testing.T, f *fabric.Fabric, name, profile string, uplink byte) (*fabric.Host, *fabric.Router) {
	t.Helper()
	natCfg, err := nat.Profile(profile)
	require.NoError(t, err)
	lan := "lan-" + name
	_, err = f.AddNetwork(fabric.NetworkConfig{Name: lan, Prefix: netip.MustParsePrefix("192.168.1.0/24")})
	require.NoError(t, err)
	r, err := f.AddRouter(fabric.RouterConfig{
		Name: "nat-" + name,
		Interfaces: []fabric.InterfaceConfig{
			{Name: "lan", Network: lan, Addr: netip.MustParseAddr("192.168.1.1")},
			{Name: "wan", Network: "internet", Addr: netip.AddrFrom4([4]byte{203, 0, 113, uplink})},
		},
		Uplink: "wan",
		NAT:    &natCfg,
	})
	require.NoError(t, err)
	h, err := f.AddHost(fabric.HostConfig{
		Name:       name,
		Interfaces: []fabric.InterfaceConfig{{Network: lan, Addr: netip.MustParseAddr("192.168.1.2")}},
		Gateway:    netip.MustParseAddr("192.168.1.1"),
	})
	require.NoError(t, err)
	return h, r
}

// TestLabProbeAfterNATReboot: the NAT in front of a TCP client reboots and
// forgets the connection's mapping; the connection is silently dead (the
// NAT drops the client's segments, which are no SYN, and the server's).
// Probe notices within its timeout and the client reconnects at once,
// where the keepalive would have waited three intervals.
func TestLabProbeAfterNATReboot(t *testing.T) {
	f, s, secret := labRelay(t)
	host, router := labSite(t, f, "site", "port-restricted-cone", 10)
	key := key.Public{1}
	c, err := relay.NewClient(relay.ClientConfig{
		Network: host, Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: key,
		Token: relay.IssueToken(secret, key, time.Now().Add(time.Hour)), Transport: "tcp",
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.WaitConnected(ctx))

	require.NoError(t, c.Probe(ctx, time.Second), "a live connection answers")
	require.Equal(t, uint64(1), c.Stats().Connects)

	router.NAT().Reboot()
	start := time.Now()
	err = c.Probe(ctx, 500*time.Millisecond)
	require.ErrorIs(t, err, relay.ErrNotConnected)
	assert.ErrorContains(t, err, "no answer to a probe within 500ms")
	require.Eventually(t, func() bool { return c.Stats().Connects == 2 }, 3*time.Second, 10*time.Millisecond,
		"no reconnect within 3 s of the failed probe")
	t.Logf("reconnected %v after the reboot", time.Since(start))
	require.NoError(t, c.Probe(ctx, time.Second), "the new connection answers")
}

// TestLabRenewOnExpiredAnswer is LRP over a lab Network, behind a NAT, on
// both transports: the relay's clock runs 2 h ahead, so it calls the
// client's token (1 h left) expired; the client renews at once and
// connects without waiting out its backoff.
func TestLabRenewOnExpiredAnswer(t *testing.T) {
	f, s, secret := labRelayAt(t, func() time.Time { return time.Now().Add(2 * time.Hour) })
	host, _ := labSite(t, f, "site", "port-restricted-cone", 10)
	for i, tr := range []string{"quic", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			k := key.Public{byte(i + 1)}
			var renewals atomic.Int64
			c, err := relay.NewClient(relay.ClientConfig{
				Network: host, Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: k, Transport: tr,
				Token: relay.IssueToken(secret, k, time.Now().Add(time.Hour)),
				RenewToken: func(context.Context) (relay.Token, error) {
					renewals.Add(1)
					return relay.IssueToken(secret, k, time.Now().Add(24*time.Hour)), nil
				},
				MinBackoff: 10 * time.Second, MaxBackoff: 20 * time.Second,
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			require.NoError(t, c.WaitConnected(ctx))
			assert.Equal(t, tr, c.Transport())
			assert.Equal(t, int64(1), renewals.Load())
			assert.Equal(t, uint64(i+1), s.Stats().AuthFailures["expired"])
		})
	}
}

// TestLabBurstToFarClient: a sender next to the relay bursts 900
// full-size packets to a client 20 ms away over TCP. The relay's TCP
// toward that client starts slowly, so the burst backs up in the relay;
// the default queue must hold it (a bandwidth-delay product at a few
// hundred Mbit/s) rather than drop what a relayed TCP flow would then
// have to retransmit. With the former 256-packet queue, hundreds were
// dropped.
func TestLabBurstToFarClient(t *testing.T) {
	f, s, secret := labRelay(t)
	near, err := f.AddHost(fabric.HostConfig{Name: "near", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.50")}}})
	require.NoError(t, err)
	far, err := f.AddHost(fabric.HostConfig{Name: "far", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.60"),
		Egress: link.Impairments{Latency: 10 * time.Millisecond}, Ingress: link.Impairments{Latency: 10 * time.Millisecond}}}})
	require.NoError(t, err)
	from, to := labClient(t, s, secret, near, key.Public{1}, "tcp"), labClient(t, s, secret, far, key.Public{2}, "tcp")

	const burst = 900
	pkt := bytes.Repeat([]byte{0xab}, 1400)
	for range burst {
		require.NoError(t, from.Send(to.Key(), pkt))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := 0
	for got < burst {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, _, err := to.Recv(rctx)
		rcancel()
		if err != nil {
			break
		}
		got++
	}
	st := s.Stats()
	assert.Zero(t, st.Drops["queue_full"], "packets the relay dropped for a full queue")
	assert.Equal(t, burst, got, "packets the far client received")
}

// TestLabHelloPipelinedVirtual measures, in virtual time, a packet sent
// the moment a client starts, 20 ms round trip from the relay, to a peer
// next to it: the packet waits for the connection, not for WELCOME. Over
// TCP the connection takes one round trip and TLS 1.3 one more, so HELLO
// and the packet behind it reach the relay at 50 ms, where WELCOME
// reaches the client at 60 (before pipelining the packet could leave only
// then, and reach the peer at 70); over QUIC the handshake takes one
// round trip and the packet arrives at 30 ms, WELCOME at 40. A client
// whose HELLO is refused gets the refusal and delivers nothing.
func TestLabHelloPipelinedVirtual(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	for _, tt := range []struct {
		transport         string
		arrives, welcomed time.Duration
	}{
		{"tcp", 50 * time.Millisecond, 60 * time.Millisecond},
		{"quic", 30 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tt.transport, func(t *testing.T) {
			dog := vtime.Watch(vtime.WatchdogConfig{Name: t.Name()})
			synctest.Test(t, func(t *testing.T) {
				defer dog.Pulse()()
				f, s, secret := labRelay(t)
				near, err := f.AddHost(fabric.HostConfig{Name: "near", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.50")}}})
				require.NoError(t, err)
				far, err := f.AddHost(fabric.HostConfig{Name: "far", Interfaces: []fabric.InterfaceConfig{{Network: "internet", Addr: netip.MustParseAddr("203.0.113.60"),
					Egress: link.Impairments{Latency: 10 * time.Millisecond}, Ingress: link.Impairments{Latency: 10 * time.Millisecond}}}})
				require.NoError(t, err)
				to := labClient(t, s, secret, near, key.Public{2}, tt.transport)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()

				start := time.Now()
				from, err := relay.NewClient(relay.ClientConfig{
					Network: far, Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: key.Public{1},
					Token: relay.IssueToken(secret, key.Public{1}, time.Now().Add(time.Hour)), Transport: tt.transport,
				})
				require.NoError(t, err)
				require.NoError(t, from.Send(to.Key(), []byte("first")), "a packet sent while the client dials")
				src, pkt, err := to.Recv(ctx)
				require.NoError(t, err)
				arrived := time.Since(start)
				assert.Equal(t, key.Public{1}, src)
				assert.Equal(t, []byte("first"), pkt)
				require.NoError(t, from.WaitConnected(ctx))
				welcomed := time.Since(start)
				require.NoError(t, from.Close())
				t.Logf("%s: first packet at the peer %v, WELCOME at the client %v", tt.transport, arrived, welcomed)
				assert.Equal(t, tt.arrives, arrived.Round(time.Millisecond), "the first packet's arrival")
				assert.Equal(t, tt.welcomed, welcomed.Round(time.Millisecond), "WELCOME")

				// Refused: an expired token, a packet behind it.
				before := s.Stats()
				bad, err := relay.NewClient(relay.ClientConfig{
					Network: far, Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: key.Public{3},
					Token: relay.IssueToken(secret, key.Public{3}, time.Now().Add(-time.Second)), Transport: tt.transport,
				})
				require.NoError(t, err)
				defer func() { require.NoError(t, bad.Close()) }()
				require.NoError(t, bad.Send(to.Key(), []byte("refused")))
				var ce *relay.CloseError
				require.ErrorAs(t, bad.WaitConnected(ctx), &ce)
				assert.Equal(t, relay.CloseAuthExpired, ce.Code)
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				defer rcancel()
				_, pkt, err = to.Recv(rctx)
				require.ErrorIs(t, err, context.DeadlineExceeded, "delivered behind a refused HELLO: %q", pkt)
				assert.Equal(t, before.PacketsIn, s.Stats().PacketsIn)
				assert.Equal(t, uint64(1), bad.Stats().PacketsSent, "the packet went out behind HELLO")
			})
			require.NoError(t, dog.Stop())
		})
	}
}
