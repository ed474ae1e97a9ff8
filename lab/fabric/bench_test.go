package fabric

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latticelab/lattice/internal/benchtest"

	"github.com/latticelab/lattice/netx"
)

// The fabric benchmarks push traffic between two hosts behind two NAT
// routers (host → NAT → internet → NAT → host: four links, two
// translations each way) at the internet's MTU, 1500, over a path opened by
// hole punching as Lattice nodes open theirs. The Loopback benchmarks run
// the same workload over the operating system's 127.0.0.1 in the same run:
// the baseline the fabric's figures are compared with.

// natPair builds two full-cone NAT sites; the hosts are 192.168.1.2 behind
// 203.0.113.10 and 203.0.113.11.
func natPair(b *testing.B) (a, c *Host) {
	w := newWorld(b, Config{})
	return w.addSite(b, profile(b, "full-cone"), 1).hosts[0], w.addSite(b, profile(b, "full-cone"), 1).hosts[0]
}

var (
	benchLocalA  = netip.MustParseAddrPort("192.168.1.2:5201")
	benchLocalB  = netip.MustParseAddrPort("192.168.1.2:5202")
	benchPublicA = netip.MustParseAddrPort("203.0.113.10:5201")
	benchPublicB = netip.MustParseAddrPort("203.0.113.11:5202")
)

// punchTCP connects a and c by TCP simultaneous open through their NATs.
func punchTCP(b *testing.B, a, c *Host) (net.Conn, net.Conn) {
	ctx := ctxT(b, 10*time.Second)
	type res struct {
		c   net.Conn
		err error
	}
	dial := func(h *Host, local, remote netip.AddrPort, out chan<- res) {
		var err error
		for ctx.Err() == nil {
			var conn net.Conn
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			conn, err = h.DialTCPFrom(dctx, local, remote)
			cancel()
			if err == nil {
				out <- res{c: conn}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		out <- res{err: err}
	}
	ca, cc := make(chan res, 1), make(chan res, 1)
	go dial(a, benchLocalA, benchPublicB, ca)
	go dial(c, benchLocalB, benchPublicA, cc)
	ra, rc := <-ca, <-cc
	if ra.err != nil || rc.err != nil {
		b.Fatalf("punch: %v / %v", ra.err, rc.err)
	}
	return ra.c, rc.c
}

func BenchmarkFabricTCP(b *testing.B) {
	a, c := natPair(b)
	send, recv := punchTCP(b, a, c)
	benchtest.TCP(b, send, recv)
}

func BenchmarkLoopbackTCP(b *testing.B) {
	ctx := ctxT(b, time.Minute)
	l, err := netx.OS.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	send, err := netx.OS.Dial(ctx, "tcp4", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	recv := <-accepted
	if recv == nil {
		b.Fatal("accept failed")
	}
	benchtest.TCP(b, send, recv)
}

func BenchmarkFabricUDP(b *testing.B) {
	tx, rx := punchUDP(b)
	benchUDP(b, tx, rx, benchPublicB)
}

// BenchmarkFabricUDPBatch is BenchmarkFabricUDP with the sender writing
// runs of 16 datagrams per call, as the node's mux does with a WireGuard
// batch (WriteBatchTo), and the receiver draining with ReadBatchFrom.
func BenchmarkFabricUDPBatch(b *testing.B) {
	tx, rx := punchUDP(b)
	benchUDPBatch(b, tx, rx, benchPublicB, 16)
}

// punchUDP opens a socket on each NATed host and punches a path between
// them, as ICE connectivity checks do.
func punchUDP(b *testing.B) (tx, rx net.PacketConn) {
	a, c := natPair(b)
	ctx := ctxT(b, time.Minute)
	rx, err := c.ListenPacket(ctx, "udp4", benchLocalB.String())
	if err != nil {
		b.Fatal(err)
	}
	tx, err = a.ListenPacket(ctx, "udp4", benchLocalA.String())
	if err != nil {
		b.Fatal(err)
	}
	// Punch: both sides send to the other's public endpoint until a
	// datagram gets through, as ICE connectivity checks do.
	buf := make([]byte, 64)
	for i := 0; ; i++ {
		if i == 20 {
			b.Fatal("punch: no datagram got through")
		}
		_, _ = tx.WriteTo([]byte("punch"), net.UDPAddrFromAddrPort(benchPublicB))
		_, _ = rx.WriteTo([]byte("punch"), net.UDPAddrFromAddrPort(benchPublicA))
		_ = rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, _, err := rx.ReadFrom(buf); err == nil {
			break
		}
	}
	_ = rx.SetReadDeadline(time.Time{})
	return tx, rx
}

func BenchmarkLoopbackUDP(b *testing.B) {
	ctx := ctxT(b, time.Minute)
	rx, err := netx.OS.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tx, err := netx.OS.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	benchUDP(b, tx, rx, rx.LocalAddr().(*net.UDPAddr).AddrPort())
}

// udpWindow bounds the datagrams in flight: the sender waits while more
// than this many are sent but not yet received. Without it the sender
// outruns the path and the benchmark measures the cost of dropping, not the
// rate the path delivers. Loss still happens (and is reported) when a queue
// on the path is smaller than the window.
const udpWindow = 256

// benchUDP sends b.N 1400-byte datagrams from tx to dst, where rx reads
// them, and reports the delivered rate in pps and the loss in percent.
func benchUDP(b *testing.B, tx, rx net.PacketConn, dst netip.AddrPort) {
	to := net.UDPAddrFromAddrPort(dst)
	runUDP(b, tx, rx, 1, func(msgs [][]byte) error {
		_, err := tx.WriteTo(msgs[0], to)
		return err
	}, func(buf [][]byte) (int, error) {
		_, _, err := rx.ReadFrom(buf[0])
		return 1, err
	})
}

// udpBatchConn is a lab socket's batch calls (node/batchconn.go).
type udpBatchConn interface {
	ReadBatchFrom(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error)
	WriteBatchTo(bufs [][]byte, addr netip.AddrPort) error
}

// benchUDPBatch is benchUDP sending runs of batch datagrams per call and
// reading with ReadBatchFrom.
func benchUDPBatch(b *testing.B, tx, rx net.PacketConn, dst netip.AddrPort, batch int) {
	btx, brx := tx.(udpBatchConn), rx.(udpBatchConn)
	sizes, from := make([]int, batch), make([]netip.AddrPort, batch)
	runUDP(b, tx, rx, batch, func(msgs [][]byte) error {
		return btx.WriteBatchTo(msgs, dst)
	}, func(bufs [][]byte) (int, error) {
		return brx.ReadBatchFrom(bufs, sizes, from)
	})
}

// runUDP is the benchmark loop: b.N datagrams sent in runs of batch by
// send, read by read, with at most udpWindow in flight.
func runUDP(b *testing.B, tx, rx net.PacketConn, batch int, send func([][]byte) error, read func([][]byte) (int, error)) {
	defer tx.Close()
	defer rx.Close()
	var got atomic.Int64
	rxDone := make(chan struct{})
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	go func() {
		defer close(rxDone)
		for {
			n, err := read(bufs)
			if err != nil {
				return
			}
			got.Add(int64(n))
		}
	}()
	msg := make([]byte, 1400)
	msgs := make([][]byte, batch)
	for i := range msgs {
		msgs[i] = msg
	}
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		// A lost datagram would shrink the window for good: give up
		// waiting after a while, as a sender's timer would.
		for start := time.Now(); int64(i)-got.Load() > udpWindow && time.Since(start) < 10*time.Millisecond; {
			runtime.Gosched()
		}
		if err := send(msgs[:min(batch, b.N-i)]); err != nil {
			b.Fatal(err)
		}
	}
	// Wait for the tail: until everything arrived or nothing more does.
	for last := int64(-1); ; {
		n := got.Load()
		if n == int64(b.N) || n == last {
			break
		}
		last = n
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	n := got.Load()
	rx.Close()
	<-rxDone
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "pps")
	b.ReportMetric(100*(1-float64(n)/float64(b.N)), "%loss")
}
