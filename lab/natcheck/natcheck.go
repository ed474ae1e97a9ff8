// Package natcheck discovers a NAT's behaviour the way RFC 5780 does: a
// client behind the NAT probes a server that answers from two addresses and
// two ports, and classifies the NAT's mapping and filtering in RFC 4787
// terms. The lab uses it to prove that an emulated NAT behaves as configured.
//
// The probe protocol is a minimal stand-in for STUN with CHANGE-REQUEST (a
// real RFC 5780 STUN server lives in package stun): a request carries a
// transaction id and whether to answer from the other address and/or port;
// the answer carries the request's source address as the server saw it.
package natcheck

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx"
)

var magic = []byte("LNC1")

const (
	changeIP   = 1 << 0
	changePort = 1 << 1

	requestLen  = 4 + 8 + 1
	responseLen = 4 + 8 + 16 + 2
)

// Endpoints names the server's two addresses and two ports.
type Endpoints struct {
	Primary, Alternate netip.Addr
	Port, AltPort      uint16
}

func (e Endpoints) addr(alt, altPort bool) netip.AddrPort {
	a, p := e.Primary, e.Port
	if alt {
		a = e.Alternate
	}
	if altPort {
		p = e.AltPort
	}
	return netip.AddrPortFrom(a, p)
}

// Server answers probes on all four address × port combinations.
type Server struct {
	ep    Endpoints
	conns [2][2]net.PacketConn // [alt address][alt port]
	wg    sync.WaitGroup
	once  sync.Once
}

// NewServer listens on the four endpoints of ep on network n.
func NewServer(ctx context.Context, n netx.Network, ep Endpoints) (*Server, error) {
	if !ep.Primary.IsValid() || !ep.Alternate.IsValid() || ep.Primary == ep.Alternate {
		return nil, fmt.Errorf("natcheck: server needs two distinct addresses, got %v and %v", ep.Primary, ep.Alternate)
	}
	if ep.Port == 0 || ep.AltPort == 0 || ep.Port == ep.AltPort {
		return nil, fmt.Errorf("natcheck: server needs two distinct non-zero ports, got %d and %d", ep.Port, ep.AltPort)
	}
	s := &Server{ep: ep}
	for i := range 2 {
		for j := range 2 {
			c, err := n.ListenPacket(ctx, "udp4", ep.addr(i == 1, j == 1).String())
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("natcheck: listen %v: %w", ep.addr(i == 1, j == 1), err)
			}
			s.conns[i][j] = c
		}
	}
	for i := range 2 {
		for j := range 2 {
			s.wg.Add(1)
			go s.serve(i, j)
		}
	}
	return s, nil
}

func (s *Server) serve(i, j int) {
	defer s.wg.Done()
	buf := make([]byte, 64)
	for {
		n, from, err := s.conns[i][j].ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if n != requestLen || !bytes.Equal(buf[:4], magic) {
			continue
		}
		src, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		flags := buf[12]
		ri, rj := i, j
		if flags&changeIP != 0 {
			ri ^= 1
		}
		if flags&changePort != 0 {
			rj ^= 1
		}
		resp := make([]byte, responseLen)
		copy(resp, buf[:12])
		ap := src.AddrPort()
		a16 := ap.Addr().As16()
		copy(resp[12:28], a16[:])
		binary.BigEndian.PutUint16(resp[28:30], ap.Port())
		_, _ = s.conns[ri][rj].WriteTo(resp, src)
	}
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	s.once.Do(func() {
		for i := range 2 {
			for j := range 2 {
				if s.conns[i][j] != nil {
					s.conns[i][j].Close()
				}
			}
		}
		s.wg.Wait()
	})
	return nil
}

// Result is what discovery found.
type Result struct {
	Mapping   nat.Mapping
	Filtering nat.Filtering
	// Mapped are the public endpoints seen by the server in mapping tests
	// I, II and III (RFC 5780 §4.3).
	Mapped [3]netip.AddrPort
	// NATed reports whether the client's address was translated at all.
	NATed bool
}

func (r Result) String() string {
	if !r.NATed {
		return "no NAT"
	}
	return fmt.Sprintf("%s mapping, %s filtering", r.Mapping, r.Filtering)
}

// ErrNoResponse means the server never answered a probe that must be
// answered, e.g. because UDP is blocked.
var ErrNoResponse = errors.New("natcheck: no response from server")

// Options tunes discovery. Its zero value works.
type Options struct {
	// Wait is how long to wait for each answer. If zero, 300ms.
	Wait time.Duration
	// Tries is how many times to send each probe. If zero, 2.
	Tries int
}

// Discover classifies the NAT between the client network n and the server.
// It opens two sockets on n: one for the mapping tests and a fresh one for
// the filtering tests, so the filter has seen only the primary endpoint.
func Discover(ctx context.Context, n netx.Network, ep Endpoints, opt Options) (Result, error) {
	if opt.Wait == 0 {
		opt.Wait = 300 * time.Millisecond
	}
	if opt.Tries == 0 {
		opt.Tries = 2
	}
	var res Result
	c, err := n.ListenPacket(ctx, "udp4", ":0")
	if err != nil {
		return res, fmt.Errorf("natcheck: listen: %w", err)
	}
	defer c.Close()
	tests := [3]netip.AddrPort{ep.addr(false, false), ep.addr(true, false), ep.addr(true, true)}
	for i, dst := range tests {
		m, ok, err := probe(ctx, c, dst, 0, opt)
		if err != nil {
			return res, err
		}
		if !ok {
			return res, fmt.Errorf("%w: mapping test %d to %v", ErrNoResponse, i+1, dst)
		}
		res.Mapped[i] = m
	}
	res.NATed = !isLocal(n, c, res.Mapped[0].Addr())
	switch {
	case res.Mapped[1] == res.Mapped[0]:
		res.Mapping = nat.EndpointIndependent
	case res.Mapped[2] == res.Mapped[1]:
		res.Mapping = nat.AddressDependent
	default:
		res.Mapping = nat.AddressAndPortDependent
	}

	f, err := n.ListenPacket(ctx, "udp4", ":0")
	if err != nil {
		return res, fmt.Errorf("natcheck: listen: %w", err)
	}
	defer f.Close()
	if _, ok, err := probe(ctx, f, ep.addr(false, false), 0, opt); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: filtering test 1", ErrNoResponse)
		}
		return res, err
	}
	_, okII, err := probe(ctx, f, ep.addr(false, false), changeIP|changePort, opt)
	if err != nil {
		return res, err
	}
	if okII {
		res.Filtering = nat.EndpointIndependent
		return res, nil
	}
	_, okIII, err := probe(ctx, f, ep.addr(false, false), changePort, opt)
	if err != nil {
		return res, err
	}
	if okIII {
		res.Filtering = nat.AddressDependent
	} else {
		res.Filtering = nat.AddressAndPortDependent
	}
	return res, nil
}

// probe sends one request to dst and returns the mapped address from the
// answer; ok is false when no answer came in time.
func probe(ctx context.Context, c net.PacketConn, dst netip.AddrPort, flags byte, opt Options) (mapped netip.AddrPort, ok bool, err error) {
	req := make([]byte, requestLen)
	copy(req, magic)
	if _, err := rand.Read(req[4:12]); err != nil {
		return mapped, false, fmt.Errorf("natcheck: transaction id: %w", err)
	}
	req[12] = flags
	buf := make([]byte, 64)
	for range opt.Tries {
		if err := ctx.Err(); err != nil {
			return mapped, false, fmt.Errorf("natcheck: %w", err)
		}
		if _, err := c.WriteTo(req, net.UDPAddrFromAddrPort(dst)); err != nil {
			return mapped, false, fmt.Errorf("natcheck: send to %v: %w", dst, err)
		}
		deadline := time.Now().Add(opt.Wait)
		for {
			_ = c.SetReadDeadline(deadline)
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return mapped, false, fmt.Errorf("natcheck: read: %w", err)
			}
			if n == responseLen && bytes.Equal(buf[:12], req[:12]) {
				a := netip.AddrFrom16([16]byte(buf[12:28])).Unmap()
				return netip.AddrPortFrom(a, binary.BigEndian.Uint16(buf[28:30])), true, nil
			}
		}
	}
	return mapped, false, nil
}

// isLocal reports whether addr belongs to the client: the socket's own
// address, or, for a socket bound to every address, one of the network's
// interface addresses.
func isLocal(n netx.Network, c net.PacketConn, addr netip.Addr) bool {
	if local, ok := c.LocalAddr().(*net.UDPAddr); ok {
		if a := local.AddrPort().Addr().Unmap(); a.IsValid() && !a.IsUnspecified() {
			return a == addr
		}
	}
	ifcs, err := n.Interfaces()
	if err != nil {
		return false
	}
	for _, ifc := range ifcs {
		for _, p := range ifc.Addrs {
			if p.Addr().Unmap() == addr {
				return true
			}
		}
	}
	return false
}
