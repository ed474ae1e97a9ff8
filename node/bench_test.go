package node_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
)

// loopbackMesh runs control and a relay on 127.0.0.1 and two nodes whose
// sockets are bound to 127.0.0.1, so nothing leaves the machine; with
// dualStack their sockets are on [::] (as by default) and ICE sees only
// 127.0.0.1 (loopback4OS).
func loopbackMesh(b *testing.B, relayOnly, dualStack bool, relayTransport ...string) (*stockNetstack, *stockNetstack, *node.Node, *node.Node, *relay.Server) {
	secret := []byte("bench-relay-secret-0123456789abcdef")
	rs, err := relay.NewServer(relay.ServerConfig{Network: netx.OS, Addr: "127.0.0.1:0", Secret: secret, PacketRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	st, err := control.OpenFileStore(filepath.Join(b.TempDir(), "r.json"))
	if err != nil {
		b.Fatal(err)
	}
	ctrl, err := control.New(context.Background(), control.Config{
		Tokens: []control.JoinToken{{Value: labToken}}, Store: st,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Listen: "127.0.0.1:0"},
		Relays:       []controlapi.Relay{{Addr: rs.Addr().String(), Fingerprint: rs.Fingerprint()}},
		RelayToken: func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(secret, k, now.Add(time.Hour))), nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctrl.Close() })
	start := func(name string, port int) (*stockNetstack, *node.Node) {
		prov := &stockNetstack{}
		cfg := node.Config{
			Name: name, Network: netx.OS, Control: ctrl.NATS().URL(), Token: labToken,
			ListenAddr: netip.MustParseAddr("127.0.0.1"), ListenPort: port,
			Provisioner: prov,
			ICE:         node.ICEConfig{RelayOnly: relayOnly, Candidates: func(a netip.Addr) bool { return a.IsLoopback() }},
		}
		if dualStack {
			cfg.Network, cfg.ListenAddr = loopback4OS{netx.OS}, netip.Addr{}
		}
		if len(relayTransport) > 0 {
			cfg.RelayTransport = relayTransport[0]
		}
		n, err := node.Start(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		return prov, n
	}
	pa, a := start("alpha", -1)
	pb, bn := start("beta", -1)
	return pa, pb, a, bn, rs
}

// BenchmarkPath: TCP over the mesh between two nodes on loopback, on the
// direct path (udp4 sockets, and dual-stack ones carrying IPv4) and
// through the relay (over TCP, the default, and over QUIC), in Gbit/s.
// Relayed modes also report the share of relayed packets lost on the way
// up (nodes to relay), on the way down (relay to the nodes' relay
// clients) and in the clients' receive queues (recvq-drop), both
// directions together: the inner TCP takes any loss as congestion.
func BenchmarkPath(b *testing.B) {
	for _, mode := range []string{"direct", "direct-dual-stack", "relay", "relay-quic"} {
		b.Run(mode, func(b *testing.B) {
			relayed := mode == "relay" || mode == "relay-quic"
			transport := "tcp"
			if mode == "relay-quic" {
				transport = "quic"
			}
			pa, pb, a, bn, rs := loopbackMesh(b, relayed, mode == "direct-dual-stack", transport)
			want := node.PathDirect
			if relayed {
				want = node.PathRelay
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				st := a.Status()
				rs, _ := a.RelayStats()
				if len(st) == 1 && st[0].Path == want && (want == node.PathRelay || st[0].Endpoint != "relay") && (!relayed || rs.Transport == transport) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("never reached the %s path: %+v", mode, st)
				}
				time.Sleep(20 * time.Millisecond)
			}
			l, err := pb.net.ListenTCP(&net.TCPAddr{Port: 5201})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			done := make(chan int64, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					done <- 0
					return
				}
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				done <- n
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := pa.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(bn.Address().Addr(), 5201))
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			before := relayCounts(a, bn, rs)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			n := <-done
			b.StopTimer()
			if n != int64(b.N)*int64(len(buf)) {
				b.Fatalf("received %d of %d bytes", n, int64(b.N)*int64(len(buf)))
			}
			b.ReportMetric(float64(n)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
			if relayed {
				d := settledRelayCounts(a, bn, rs).minus(before)
				if d.sent > 0 {
					b.ReportMetric(100*float64(d.sent-min(d.in, d.sent))/float64(d.sent), "up-loss-%")
				}
				if d.out > 0 {
					arrived := min(d.received+d.recvDropped, d.out)
					b.ReportMetric(100*float64(d.out-arrived)/float64(d.out), "down-loss-%")
					b.ReportMetric(100*float64(d.recvDropped)/float64(d.out), "recvq-drop-%")
				}
			}
		})
	}
}

// relayTally counts relayed packets at each hop: sent by both nodes, in
// and out at the relay, received by both nodes' relay clients (and
// dropped there because the node fell behind).
type relayTally struct{ sent, in, out, received, recvDropped uint64 }

func relayCounts(a, b *node.Node, rs *relay.Server) relayTally {
	ra, _ := a.RelayStats()
	rb, _ := b.RelayStats()
	st := rs.Stats()
	return relayTally{
		sent:        ra.PacketsSent + rb.PacketsSent,
		in:          st.PacketsIn,
		out:         st.PacketsOut,
		received:    ra.PacketsReceived + rb.PacketsReceived,
		recvDropped: ra.RecvDropped + rb.RecvDropped,
	}
}

// settledRelayCounts waits until no relayed packet is still on its way
// (the counts stop moving for 50 ms, at most 2 s) and returns them.
func settledRelayCounts(a, b *node.Node, rs *relay.Server) relayTally {
	last := relayCounts(a, b, rs)
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		now := relayCounts(a, b, rs)
		if now == last {
			break
		}
		last = now
	}
	return last
}

func (t relayTally) minus(u relayTally) relayTally {
	return relayTally{t.sent - u.sent, t.in - u.in, t.out - u.out, t.received - u.received, t.recvDropped - u.recvDropped}
}

// BenchmarkConnect: in the lab with no added latency, the time from both
// nodes registered to the first byte delivered (through the relay) and to
// the direct path.
func BenchmarkConnect(b *testing.B) {
	var firstByte, direct time.Duration
	for range b.N {
		fb, d := connectOnce(b)
		firstByte += fb
		direct += d
	}
	b.ReportMetric(float64(firstByte.Milliseconds())/float64(b.N), "ms-first-byte")
	b.ReportMetric(float64(direct.Milliseconds())/float64(b.N), "ms-direct")
}

func connectOnce(b *testing.B) (firstByte, direct time.Duration) {
	w := newLabWorld(b)
	na, nb := &stockNetstack{}, &stockNetstack{}
	a := startNode(b, w.site(b, "port-restricted-cone"), "alpha", na)
	bn := startNode(b, w.site(b, "restricted-cone"), "beta", nb)
	registered := time.Now()
	l, err := nb.net.ListenTCP(&net.TCPAddr{Port: 80})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	got := make(chan time.Time, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := c.Read(make([]byte, 1)); err == nil {
			got <- time.Now()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := na.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(bn.Address().Addr(), 80))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{1}); err != nil {
		b.Fatal(err)
	}
	select {
	case at := <-got:
		firstByte = at.Sub(registered)
	case <-ctx.Done():
		b.Fatal("no first byte")
	}
	for {
		if st := a.Status(); len(st) == 1 && st[0].Path == node.PathDirect {
			return firstByte, time.Since(registered)
		}
		if ctx.Err() != nil {
			b.Fatal("no direct path")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
