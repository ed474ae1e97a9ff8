package relay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ringResult is what one round of ringRound measured.
type ringResult struct {
	connect  time.Duration // until every client was connected
	exchange time.Duration // until every packet of the ring arrived
}

// ringRound connects n clients to s at once, half on QUIC and half on TCP,
// all from 127.0.0.1 (a relay restart behind one NAT looks like this), and
// has each send one packet to the next around a ring; every client must
// receive exactly its predecessor's. The clients are closed on return.
func ringRound(tb testing.TB, s *Server, n int) ringResult {
	tb.Helper()
	clients := make([]*Client, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	// Generous: under -race on a shared 2-core machine 300 handshakes
	// have taken over 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	for i := range clients {
		k := newKey(tb)
		c, err := NewClient(ClientConfig{
			Server:      s.Addr().String(),
			Fingerprint: s.Fingerprint(),
			Key:         k,
			Token:       IssueToken(testSecret, k, time.Now().Add(time.Hour)),
			Transport:   transports[i%2],
			MinBackoff:  20 * time.Millisecond,
			MaxBackoff:  500 * time.Millisecond,
		})
		require.NoError(tb, err)
		clients[i] = c
	}
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { errs <- c.WaitConnected(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(tb, err)
	}
	var r ringResult
	r.connect = time.Since(start)

	start = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recvErrs := make(chan error, n)
	for i, c := range clients {
		from := clients[(i+n-1)%n]
		wg.Go(func() {
			src, pkt, err := c.Recv(ctx)
			switch {
			case err != nil:
				recvErrs <- err
			case src != from.Key() || string(pkt) != fmt.Sprint(from.Key()):
				recvErrs <- fmt.Errorf("client %d got %q from %s", i, pkt, src.ShortString())
			default:
				recvErrs <- nil
			}
		})
	}
	for i, c := range clients {
		to := clients[(i+1)%n]
		require.NoError(tb, c.Send(to.Key(), []byte(fmt.Sprint(c.Key()))))
	}
	wg.Wait()
	close(recvErrs)
	for err := range recvErrs {
		require.NoError(tb, err, "after connecting in %v; relay: %d in, %d out, drops %v; clients: %d connected",
			r.connect, s.Stats().PacketsIn, s.Stats().PacketsOut, s.Stats().Drops, s.Stats().Clients)
	}
	r.exchange = time.Since(start)
	return r
}

// TestManyClients: 300 real clients connect at once from one address
// (more than the per-source bound of pending connections, so on a slow
// machine some are refused and retry) and relay around a ring: all must
// get through, and no packet may be lost on the way.
func TestManyClients(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	raiseFileLimit(t, uint64(4*n+2048))
	s := startServer(t, ServerConfig{})
	r := ringRound(t, s, n)
	st := s.Stats()
	t.Logf("%d clients connected in %v, ring exchanged in %v; refused or evicted: %d busy_source, %d busy",
		n, r.connect.Round(time.Millisecond), r.exchange.Round(time.Millisecond), st.AuthFailures["busy_source"], st.AuthFailures["busy"])
	require.Equal(t, uint64(n), st.PacketsOut)
	require.Zero(t, st.Drops["no_peer"]+st.Drops["queue_full"]+st.Drops["rate_limited"], "drops: %v", st.Drops)
}

// BenchmarkManyClients runs ringRound with 200 clients per iteration and
// reports the rate at which the relay let them in (connects/s: clients
// over the time until the last one was connected) and the ring's time.
func BenchmarkManyClients(b *testing.B) {
	const n = 200
	s := startServer(b, ServerConfig{})
	var connect, exchange time.Duration
	b.ResetTimer()
	for range b.N {
		r := ringRound(b, s, n)
		connect += r.connect
		exchange += r.exchange
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/connect.Seconds(), "connects/s")
	b.ReportMetric(float64(exchange.Milliseconds())/float64(b.N), "ring-ms")
	b.ReportMetric(float64(s.Stats().AuthFailures["busy_source"])/float64(b.N), "retries/op")
}
