package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// UDP association limits. A destination holds a connected socket from the
// Dialer, a goroutine and a 64 KiB buffer, so an association is bounded
// to maxUDPDests of them and each is dropped after udpIdle without
// traffic; with MaxConns that bounds the whole relay.
const (
	defaultUDPIdle = 2 * time.Minute
	maxUDPDests    = 32
	// udpFailTTL is how long a destination the Dialer refused stays
	// refused without asking again, so a client repeating a denied
	// datagram costs neither a dial nor an Event per packet.
	udpFailTTL = 10 * time.Second
	// maxDatagram is the largest UDP payload.
	maxDatagram = 65535
)

// parseUDPHeader parses the header of a client's datagram, RFC 1928 §7:
// RSV(2) FRAG(1) ATYP DST.ADDR DST.PORT, and returns the destination and
// the data after it. Fragmentation is optional in the RFC and not
// implemented: FRAG other than 0 is errFragment, and the datagram is
// dropped. RSV is not checked.
func parseUDPHeader(b []byte) (addr, []byte, error) {
	if len(b) < 5 {
		return addr{}, nil, errTruncated
	}
	if b[2] != 0 {
		return addr{}, nil, errFragment
	}
	n, err := addrLen(b[3], b[4])
	if err != nil {
		return addr{}, nil, err
	}
	if len(b) < 4+n {
		return addr{}, nil, errTruncated
	}
	a, err := parseAddr(b[3], b[4:4+n])
	if err != nil {
		return addr{}, nil, err
	}
	return a, b[4+n:], nil
}

// appendUDPHeader appends the header of a datagram from src to the client.
func appendUDPHeader(b []byte, src addr) []byte {
	return appendAddr(append(b, 0, 0, 0), src)
}

// association is one UDP ASSOCIATE: a relay socket facing the client and
// one connected socket per destination, all closed when the control
// connection ends.
type association struct {
	s        *Server
	ctrl     net.Conn
	relay    net.PacketConn
	clientIP netip.Addr // the control connection's peer; no other source is relayed

	mu     sync.Mutex // guards the following
	client netip.AddrPort
	dests  map[string]*udpDest
	closed bool

	wg sync.WaitGroup // relay reader and destination readers
}

// udpDest is one destination of an association.
type udpDest struct {
	conn      net.Conn  // nil if the dial failed
	failUntil time.Time // when a failed dial may be retried
	hdr       []byte    // header of datagrams from it to the client
	last      atomic.Int64
}

func (d *udpDest) touch() { d.last.Store(time.Now().UnixNano()) }

// associate serves UDP ASSOCIATE. The relay socket is bound on the IP the
// client reached the TCP listener on. RFC 1928 lets the request name the
// address the client will send from: its port, if not zero, pins the
// client's source port; its IP is ignored and only the control
// connection's peer IP is accepted. Otherwise the source of the first
// datagram from that IP is pinned.
func (s *Server) associate(c net.Conn, req addr, _ error) {
	if s.cfg.ListenPacket == nil {
		s.fail(c, repCommandNotSupported)
		return
	}
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		s.fail(c, repGeneralFailure)
		return
	}
	localIP := local.AddrPort().Addr().Unmap()
	relay, err := s.cfg.ListenPacket(s.ctx, "udp", netip.AddrPortFrom(localIP, 0).String())
	if err != nil {
		s.log.Debug("udp relay socket failed", "client", c.RemoteAddr(), "err", err)
		s.fail(c, repGeneralFailure)
		return
	}
	if !s.track(relay) {
		_ = relay.Close()
		return
	}
	defer s.untrack(relay)
	a := &association{
		s:        s,
		ctrl:     c,
		relay:    relay,
		clientIP: remote.AddrPort().Addr().Unmap(),
		dests:    make(map[string]*udpDest),
	}
	if req.port != 0 {
		a.client = netip.AddrPortFrom(a.clientIP, req.port)
	}
	if !s.reply(c, repSucceeded, addrOf(relay.LocalAddr())) {
		_ = relay.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	a.run()
}

// run relays until the control connection ends (RFC 1928 §7: the
// association terminates with the TCP connection), then tears down.
func (a *association) run() {
	a.wg.Go(func() {
		a.readClient()
		_ = a.ctrl.Close() // the relay socket failed: end the association
	})
	_, _ = io.Copy(io.Discard, a.ctrl)
	a.mu.Lock()
	a.closed = true
	conns := make([]net.Conn, 0, len(a.dests))
	for _, d := range a.dests {
		if d.conn != nil {
			conns = append(conns, d.conn)
		}
	}
	a.mu.Unlock()
	_ = a.relay.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	a.wg.Wait()
}

// readClient relays datagrams from the client to their destinations until
// the relay socket is closed or fails. Datagrams from other sources,
// malformed or fragmented ones, and those to refused destinations are
// dropped, as UDP would.
func (a *association) readClient() {
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := a.relay.ReadFrom(buf)
		if err != nil {
			return
		}
		src, ok := unmappedAddrPort(from)
		if !ok || src.Addr() != a.clientIP || !a.pin(src) {
			continue
		}
		dst, payload, err := parseUDPHeader(buf[:n])
		if err != nil {
			continue
		}
		if d := a.dest(dst); d != nil {
			d.touch()
			_, _ = d.conn.Write(payload) // errors (ICMP refusals) are UDP's to lose
		}
	}
}

// pin accepts src as the client's datagram source if none is pinned yet.
func (a *association) pin(src netip.AddrPort) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.client.IsValid() {
		a.client = src
	}
	return a.client == src
}

// dest returns the open destination for dst, dialing it if new; nil if
// it is refused, or the association is full or closed.
func (a *association) dest(dst addr) *udpDest {
	key := dst.String()
	now := time.Now()
	a.mu.Lock()
	d := a.dests[key]
	if d != nil && d.conn == nil && now.After(d.failUntil) {
		delete(a.dests, key)
		d = nil
	}
	if d == nil && len(a.dests) >= maxUDPDests {
		for k, e := range a.dests {
			if e.conn == nil && now.After(e.failUntil) {
				delete(a.dests, k)
			}
		}
	}
	full := len(a.dests) >= maxUDPDests
	a.mu.Unlock()
	switch {
	case d != nil && d.conn != nil:
		return d
	case d != nil:
		return nil // refused recently
	case full:
		a.s.log.Debug("udp association full, datagram dropped", "client", a.ctrl.RemoteAddr(), "dst", key)
		return nil
	}

	// The dial runs on the relay reader: a slow name resolution holds up
	// this association's other datagrams (never another's), for at most
	// DialTimeout. Only this goroutine adds destinations, so the count
	// checked above still holds after the unlocked dial.
	conn, err := a.s.dial(a.s.ctx, a.ctrl.RemoteAddr(), "udp", key)
	d = &udpDest{hdr: appendUDPHeader(nil, dst)}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed || err == nil && !a.s.track(conn):
		if conn != nil {
			_ = conn.Close()
		}
		return nil
	case err != nil:
		d.failUntil = now.Add(udpFailTTL)
		a.dests[key] = d
		return nil
	}
	d.conn = conn
	d.touch()
	a.dests[key] = d
	client := net.UDPAddrFromAddrPort(a.client)
	a.wg.Go(func() { a.readDest(key, d, client) })
	return d
}

// readDest relays datagrams from one destination to the client until the
// destination has been idle for udpIdle (in either direction) or the
// association closes.
func (a *association) readDest(key string, d *udpDest, client *net.UDPAddr) {
	defer func() {
		_ = d.conn.Close()
		a.s.untrack(d.conn)
		a.mu.Lock()
		if a.dests[key] == d {
			delete(a.dests, key)
		}
		a.mu.Unlock()
	}()
	buf := make([]byte, len(d.hdr)+maxDatagram)
	copy(buf, d.hdr)
	for {
		idle := time.Since(time.Unix(0, d.last.Load()))
		if idle >= a.s.udpIdle {
			return
		}
		_ = d.conn.SetReadDeadline(time.Now().Add(a.s.udpIdle - idle))
		n, err := d.conn.Read(buf[len(d.hdr):])
		switch {
		case err == nil:
			d.touch()
			_, _ = a.relay.WriteTo(buf[:len(d.hdr)+n], client)
		case isTimeout(err):
			// Loop: the deadline is re-armed from the last activity.
		case errors.Is(err, syscall.ECONNREFUSED):
			// An ICMP port unreachable for an earlier datagram; the
			// destination may yet answer later ones.
		default:
			return
		}
	}
}

// unmappedAddrPort returns a datagram source as an unmapped AddrPort.
func unmappedAddrPort(a net.Addr) (netip.AddrPort, bool) {
	u, ok := a.(*net.UDPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := u.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}
