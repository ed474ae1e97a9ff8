// Package dns is the lab's DNS server: it answers A and AAAA queries for
// lab names over UDP from a table, and as a DNS64 (RFC 6147) synthesizes
// AAAA records from A records under a NAT64 prefix, so that IPv6-only hosts
// behind a NAT64 find IPv4-only servers by name. It answers ipv4only.arpa
// (RFC 7050) so clients can discover the prefix. It is a stub, not a
// resolver: names outside its table are NXDOMAIN.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ipv4OnlyArpa is the name RFC 7050 section 2.2 reserves for NAT64 prefix
// discovery, with its two well-known IPv4 addresses.
const ipv4OnlyArpa = "ipv4only.arpa."

var ipv4OnlyAddrs = []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 0, 170}), netip.AddrFrom4([4]byte{192, 0, 0, 171})}

// maxUDP is the largest answer sent over UDP without EDNS (RFC 1035
// section 4.2.1); a larger one is truncated.
const maxUDP = 512

// Config describes a server. Its zero value answers nothing but
// ipv4only.arpa's A records.
type Config struct {
	// Records maps names ("server.lab", case-insensitive, with or without
	// the final dot) to their addresses: IPv4 ones are A records, IPv6
	// ones AAAA. If nil, no names.
	Records map[string][]netip.Addr
	// DNS64 is the /96 prefix AAAA answers are synthesized under for names
	// with A records and no AAAA (RFC 6147 section 5.1.7, the RFC 6052
	// /96 format). If zero, nothing is synthesized.
	DNS64 netip.Prefix
	// TTL is the answers' time to live. If zero, 60s.
	TTL time.Duration
	// Logger receives a debug line per refused query. If nil, nothing is
	// logged.
	Logger *slog.Logger
}

// ErrInvalidConfig is matched by New's errors.
var ErrInvalidConfig = errors.New("invalid dns configuration")

// Server answers DNS queries. Answer is pure and safe for concurrent use;
// Serve runs it on a socket.
type Server struct {
	records map[string][]netip.Addr // lowercase FQDN → addresses
	dns64   netip.Prefix
	ttl     uint32
	log     *slog.Logger
}

// New validates cfg and returns a server.
func New(cfg Config) (*Server, error) {
	s := &Server{records: map[string][]netip.Addr{}, dns64: cfg.DNS64, ttl: 60, log: cfg.Logger}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("dns: negative TTL %v: %w", cfg.TTL, ErrInvalidConfig)
	}
	if cfg.TTL > 0 {
		s.ttl = uint32(min(cfg.TTL/time.Second, 1<<31-1))
	}
	if p := cfg.DNS64; p != (netip.Prefix{}) && (!p.IsValid() || !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != 96 || p != p.Masked()) {
		return nil, fmt.Errorf("dns: dns64 prefix %s is not an IPv6 /96 without host bits: %w", p, ErrInvalidConfig)
	}
	for name, addrs := range cfg.Records {
		fq := fqdn(name)
		if !validName(fq) {
			return nil, fmt.Errorf("dns: record name %q: not a domain name: %w", name, ErrInvalidConfig)
		}
		for _, a := range addrs {
			if !a.IsValid() {
				return nil, fmt.Errorf("dns: record %q: invalid address: %w", name, ErrInvalidConfig)
			}
			s.records[fq] = append(s.records[fq], a.Unmap())
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "dns")
	return s, nil
}

// validName reports a fully qualified name whose labels are 1 to 63 bytes
// and which fits in 255 bytes on the wire (RFC 1035 section 2.3.4).
func validName(fq string) bool {
	if len(fq) < 2 || len(fq) > 254 {
		return false
	}
	for _, l := range strings.Split(fq[:len(fq)-1], ".") {
		if len(l) == 0 || len(l) > 63 {
			return false
		}
	}
	return true
}

func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// lookup returns the addresses of name of one family.
func (s *Server) lookup(name string, v6 bool) (addrs []netip.Addr, known bool) {
	all, known := s.records[name]
	if name == ipv4OnlyArpa {
		all, known = ipv4OnlyAddrs, true
	}
	for _, a := range all {
		if a.Is6() == v6 {
			addrs = append(addrs, a)
		}
	}
	return addrs, known
}

// synthesize embeds a in the DNS64 prefix (RFC 6052 section 2.2).
func (s *Server) synthesize(a netip.Addr) netip.Addr {
	b := s.dns64.Addr().As16()
	a4 := a.As4()
	copy(b[12:], a4[:])
	return netip.AddrFrom16(b)
}

// Answer returns the response to one query message, or an error (and no
// response) for bytes that are not a query it can answer at all: a
// response, or a message too short to hold a header. A query it cannot
// parse past the header is answered FORMERR; other opcodes NOTIMP.
func (s *Server) Answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, fmt.Errorf("dns: parse header: %w", err)
	}
	if h.Response {
		return nil, errors.New("dns: a response, not a query")
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeNotImplemented
		return s.build(resp, nil, nil)
	}
	q, err := p.Question()
	if err != nil {
		resp.RCode = dnsmessage.RCodeFormatError
		return s.build(resp, nil, nil)
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		resp.RCode = dnsmessage.RCodeFormatError // one question per query, as every resolver sends
		return s.build(resp, nil, nil)
	}
	if q.Class != dnsmessage.ClassINET {
		resp.RCode = dnsmessage.RCodeNotImplemented
		return s.build(resp, &q, nil)
	}
	name := strings.ToLower(q.Name.String())
	var answers []netip.Addr
	switch q.Type {
	case dnsmessage.TypeA:
		var known bool
		answers, known = s.lookup(name, false)
		if !known {
			resp.RCode = dnsmessage.RCodeNameError
		}
	case dnsmessage.TypeAAAA:
		var known bool
		answers, known = s.lookup(name, true)
		if !known {
			resp.RCode = dnsmessage.RCodeNameError
		} else if len(answers) == 0 && s.dns64.IsValid() {
			// RFC 6147 section 5.1.1: no AAAA, so synthesize from the A
			// records.
			v4, _ := s.lookup(name, false)
			for _, a := range v4 {
				answers = append(answers, s.synthesize(a))
			}
		}
	default:
		if _, known := s.lookup(name, false); !known {
			resp.RCode = dnsmessage.RCodeNameError
		}
	}
	resp.Authoritative = true
	return s.build(resp, &q, answers)
}

// build writes a response; past 512 bytes it drops the answers and sets TC.
func (s *Server) build(h dnsmessage.Header, q *dnsmessage.Question, answers []netip.Addr) ([]byte, error) {
	out, err := s.write(h, q, answers)
	if err == nil && len(out) > maxUDP {
		h.Truncated = true
		out, err = s.write(h, q, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("dns: build response: %w", err)
	}
	return out, nil
}

func (s *Server) write(h dnsmessage.Header, q *dnsmessage.Question, answers []netip.Addr) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, maxUDP), h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if q != nil {
		if err := b.Question(*q); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range answers {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: s.ttl}
		var err error
		if a.Is4() {
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		} else {
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// Network is what Listen needs of a host: a UDP socket.
type Network interface {
	// ListenPacket opens a packet socket as net.ListenPacket does.
	ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error)
}

// Listener serves a Server on one UDP socket until Close.
type Listener struct {
	pc   net.PacketConn
	once sync.Once
	done chan struct{}
}

// Listen opens addr ("[::]:53") on n and answers every query arriving there
// with s, on one goroutine that Close stops.
func (s *Server) Listen(ctx context.Context, n Network, addr string) (*Listener, error) {
	pc, err := n.ListenPacket(ctx, "udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dns: listen on %s: %w", addr, err)
	}
	l := &Listener{pc: pc, done: make(chan struct{})}
	go l.serve(s)
	return l, nil
}

// Addr returns the socket's address.
func (l *Listener) Addr() net.Addr { return l.pc.LocalAddr() }

func (l *Listener) serve(s *Server) {
	defer close(l.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := l.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		resp, err := s.Answer(buf[:n])
		if err != nil {
			s.log.Debug("query refused", "from", from, "err", err)
			continue
		}
		if _, err := l.pc.WriteTo(resp, from); err != nil {
			s.log.Debug("answer not sent", "to", from, "err", err)
		}
	}
}

// Close closes the socket and waits for the serving goroutine. Idempotent.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.pc.Close()
		<-l.done
	})
	return err
}
