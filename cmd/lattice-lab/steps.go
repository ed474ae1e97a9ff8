package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/natcheck"
)

func (l *lab) server() *fabric.Host { return l.f.Host(l.topo.server) }

// ping sends one echo request from every client to the server.
func (l *lab) ping(ctx context.Context) error {
	for _, c := range l.topo.clients {
		rtt, err := l.f.Host(c.host).Ping(ctx, serverAddr)
		if err != nil {
			return fmt.Errorf("%s: ping server: %w", c.host, err)
		}
		fmt.Fprintf(l.out, "  ✓ %s: ping server %s\n", c.host, fmtDuration(rtt))
	}
	return nil
}

// discover classifies every client's NATs, all at once since the sites share
// nothing but the stateless probe server, and checks the result against the
// configured profiles.
func (l *lab) discover(ctx context.Context) error {
	srv, err := natcheck.NewServer(ctx, l.server(), l.topo.probe)
	if err != nil {
		return fmt.Errorf("start probe server: %w", err)
	}
	l.services = append(l.services, srv)

	type outcome struct {
		res natcheck.Result
		err error
		dur time.Duration
	}
	outcomes := make([]outcome, len(l.topo.clients))
	var wg sync.WaitGroup
	for i, c := range l.topo.clients {
		wg.Go(func() {
			start := time.Now()
			res, err := natcheck.Discover(ctx, l.f.Host(c.host), l.topo.probe, natcheck.Options{})
			outcomes[i] = outcome{res: res, err: err, dur: time.Since(start)}
		})
	}
	wg.Wait()
	for i, c := range l.topo.clients {
		o := outcomes[i]
		if o.err != nil {
			return fmt.Errorf("%s: discovery from %s: %w", c.natLabel(), c.host, o.err)
		}
		wantM, wantF := l.topo.expected(c)
		if !o.res.NATed || o.res.Mapping != wantM || o.res.Filtering != wantF {
			return fmt.Errorf("%s: discovered %s, configured %s mapping, %s filtering", c.natLabel(), o.res, wantM, wantF)
		}
		fmt.Fprintf(l.out, "  ✓ %s: %s (as configured)  %s\n", c.natLabel(), o.res, fmtDuration(o.dur))
	}
	return nil
}

// transfer sends --transfer-mib MiB from every client, one after the other,
// to a TCP sink on the server and reports the throughput.
func (l *lab) transfer(ctx context.Context) error {
	addr := netip.AddrPortFrom(serverAddr, sinkPort)
	ln, err := l.server().Listen(ctx, "tcp4", addr.String())
	if err != nil {
		return fmt.Errorf("start tcp sink: %w", err)
	}
	l.services = append(l.services, newTCPSink(ln))

	size := int64(l.opts.transferMiB) << 20
	for _, c := range l.topo.clients {
		dur, err := sendTo(ctx, l.f.Host(c.host), addr, size)
		if err != nil {
			return fmt.Errorf("%s: tcp transfer to %v: %w", c.host, addr, err)
		}
		gbps := float64(size) * 8 / dur.Seconds() / 1e9
		fmt.Fprintf(l.out, "  ✓ %s: %d MiB to server in %s, %.2f Gbit/s\n", c.host, l.opts.transferMiB, fmtDuration(dur), gbps)
	}
	return nil
}

// sendTo connects from h to the sink at addr, sends size bytes and returns
// how long they took to arrive: from the first byte sent to the sink's
// acknowledgement of the last.
func sendTo(ctx context.Context, h *fabric.Host, addr netip.AddrPort, size int64) (time.Duration, error) {
	conn, err := h.Dial(ctx, "tcp4", addr.String())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	defer bindConn(ctx, conn)()

	start := time.Now()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(size))
	if _, err := conn.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	chunk := make([]byte, 256<<10)
	for sent := int64(0); sent < size; {
		n := min(int64(len(chunk)), size-sent)
		if _, err := conn.Write(chunk[:n]); err != nil {
			return 0, fmt.Errorf("send after %d bytes: %w", sent, err)
		}
		sent += n
	}
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return 0, fmt.Errorf("wait for the sink's acknowledgement: %w", err)
	}
	if got := int64(binary.BigEndian.Uint64(hdr[:])); got != size {
		return 0, fmt.Errorf("sink received %d bytes, sent %d", got, size)
	}
	return time.Since(start), nil
}

// echoRounds is how many datagrams each client sends in the UDP echo step.
const echoRounds = 10

// echo bounces datagrams off a UDP echo server, checking each answer and the
// public endpoint the server saw.
func (l *lab) echo(ctx context.Context) error {
	addr := netip.AddrPortFrom(serverAddr, echoPort)
	pc, err := l.server().ListenPacket(ctx, "udp4", addr.String())
	if err != nil {
		return fmt.Errorf("start udp echo server: %w", err)
	}
	l.services = append(l.services, newUDPEcho(pc))

	for _, c := range l.topo.clients {
		avg, seen, err := echoFrom(ctx, l.f.Host(c.host), addr)
		if err != nil {
			return fmt.Errorf("%s: udp echo to %v: %w", c.host, addr, err)
		}
		if want := l.topo.publicAddr(c); seen.Addr() != want {
			return fmt.Errorf("%s: udp echo: server saw %v, want %s's public address %v", c.host, seen, c.nats[len(c.nats)-1], want)
		}
		fmt.Fprintf(l.out, "  ✓ %s: udp echo %d× avg %s, server saw %v\n", c.host, echoRounds, fmtDuration(avg), seen)
	}
	return nil
}

// echoFrom sends echoRounds datagrams from h to the echo server at addr and
// returns the average round trip and the source endpoint the server saw.
func echoFrom(ctx context.Context, h *fabric.Host, addr netip.AddrPort) (time.Duration, netip.AddrPort, error) {
	pc, err := h.ListenPacket(ctx, "udp4", ":0")
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	defer pc.Close()
	stop := context.AfterFunc(ctx, func() { _ = pc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	dst := net.UDPAddrFromAddrPort(addr)
	buf := make([]byte, 512)
	var total time.Duration
	var seen netip.AddrPort
	for i := range echoRounds {
		msg := []byte("lattice-lab echo " + strconv.Itoa(i))
		start := time.Now()
		if _, err := pc.WriteTo(msg, dst); err != nil {
			return 0, seen, fmt.Errorf("send %d: %w", i, err)
		}
		// The fabric's links are perfect here, so one lost datagram is a
		// fault worth failing on, not noise to retry through.
		if err := pc.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
			return 0, seen, err
		}
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return 0, seen, fmt.Errorf("answer %d: %w", i, err)
		}
		total += time.Since(start)
		got, from, ok := bytes.Cut(buf[:n], []byte{0})
		if !ok || !bytes.Equal(got, msg) {
			return 0, seen, fmt.Errorf("answer %d: got %q, want %q", i, buf[:n], msg)
		}
		if seen, err = netip.ParseAddrPort(string(from)); err != nil {
			return 0, seen, fmt.Errorf("answer %d: server's view of the sender: %w", i, err)
		}
	}
	return total / echoRounds, seen, nil
}

// summary prints every router's counters.
func (l *lab) summary(_ context.Context) error {
	rows := [][]string{{"router", "profile", "forwarded", "translated", "mappings", "NAT drops", "firewall drops", "other drops"}}
	now := l.f.Clock().Now()
	for _, rs := range l.topo.routers {
		r := l.f.Router(rs.cfg.Name)
		st := r.Stats()
		var translated uint64
		var mappings int
		if n := r.NAT(); n != nil {
			translated = n.Stats().Translated
			mappings = len(n.Mappings(now))
		}
		rows = append(rows, []string{
			rs.cfg.Name, rs.profile,
			strconv.FormatUint(st.Forwarded, 10),
			strconv.FormatUint(translated, 10),
			strconv.Itoa(mappings),
			strconv.FormatUint(st.NAT, 10),
			strconv.FormatUint(st.Firewall, 10),
			strconv.FormatUint(st.Malformed+st.TTL+st.NoRoute+st.NoNeighbor+st.TooBig+st.Other, 10),
		})
	}
	printTable(l.out, "  ", rows, 2)
	fmt.Fprintln(l.out, "  (NAT drops include the probes discovery sends to see what a NAT filters)")
	var rxDrops, linkDrops uint64
	var ifcs []*fabric.Interface
	for _, hc := range l.topo.hosts {
		ifcs = append(ifcs, l.f.Host(hc.Name).FabricInterfaces()...)
	}
	for _, rs := range l.topo.routers {
		ifcs = append(ifcs, l.f.Router(rs.cfg.Name).Interfaces()...)
	}
	for _, ifc := range ifcs {
		rxDrops += ifc.RXDropped()
		for _, dir := range []fabric.Direction{fabric.Egress, fabric.Ingress} {
			st := ifc.LinkStats(dir)
			linkDrops += st.DroppedLoss + st.DroppedQueue + st.DroppedMTU + st.DroppedDown + st.DroppedClosed
		}
	}
	fmt.Fprintf(l.out, "  interfaces: %d frames dropped by full receive queues, %d by links\n", rxDrops, linkDrops)
	return nil
}

// printTable writes rows as aligned columns, the first textCols of them
// left-aligned and the rest, numbers, right-aligned.
func printTable(w io.Writer, indent string, rows [][]string, textCols int) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(cell))
		}
	}
	for _, row := range rows {
		line := indent
		for i, cell := range row {
			switch {
			case i < textCols:
				line += fmt.Sprintf("%-*s  ", widths[i], cell)
			default:
				line += fmt.Sprintf("%*s  ", widths[i], cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// bindConn applies ctx's deadline to conn and cuts it short when ctx is
// cancelled. Call the returned function when done with conn.
func bindConn(ctx context.Context, conn net.Conn) (stop func() bool) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	return context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
}

var (
	_ io.Closer = (*tcpSink)(nil)
	_ io.Closer = (*udpEcho)(nil)
	_ io.Closer = (*natcheck.Server)(nil)
)

// tcpSink accepts connections and, on each, reads an 8-byte big-endian
// length, discards that many bytes and answers with the count received.
type tcpSink struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex // guards the following fields
	conns map[net.Conn]struct{}
	done  bool
}

func newTCPSink(ln net.Listener) *tcpSink {
	s := &tcpSink{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	return s
}

func (s *tcpSink) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Go(func() { s.serve(c) })
		s.mu.Unlock()
	}
}

func (s *tcpSink) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	n, _ := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint64(hdr[:])))
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	_, _ = c.Write(hdr[:])
}

// Close stops accepting, cuts open connections and waits for every
// goroutine. Idempotent.
func (s *tcpSink) Close() error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil
	}
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

// udpEcho answers every datagram with its payload, a zero byte and the
// sender's address as the server saw it (after any NAT).
type udpEcho struct {
	pc   net.PacketConn
	wg   sync.WaitGroup
	once sync.Once
}

func newUDPEcho(pc net.PacketConn) *udpEcho {
	e := &udpEcho{pc: pc}
	e.wg.Go(e.serve)
	return e
}

func (e *udpEcho) serve() {
	buf := make([]byte, 2048)
	for {
		n, from, err := e.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		reply := append(append(buf[:n:n], 0), from.String()...)
		_, _ = e.pc.WriteTo(reply, from)
	}
}

// Close stops the server and waits for its goroutine. Idempotent.
func (e *udpEcho) Close() error {
	var err error
	e.once.Do(func() {
		err = e.pc.Close()
		e.wg.Wait()
	})
	return err
}
