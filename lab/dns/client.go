package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The lab's own stub lookups, made from a lab host the way a host's
// resolver would: what the lab asks on a node's behalf (its control's
// address, its NAT64 prefix) crosses the node's network to the topology's
// DNS server.

// lookupTries and lookupWait bound a lookup: a query is sent again when
// its answer has not come within lookupWait (RFC 1035 section 4.2.1 says
// UDP may lose it).
const (
	lookupTries = 3
	lookupWait  = time.Second
)

// LookupAAAA asks server, from a socket on n, for name's AAAA records.
func LookupAAAA(ctx context.Context, n Network, server netip.AddrPort, name string) ([]netip.Addr, error) {
	q, err := dnsmessage.NewName(fqdn(name))
	if err != nil {
		return nil, fmt.Errorf("dns: lookup %q: %w", name, err)
	}
	network, local := "udp", "[::]:0"
	if server.Addr().Is4() {
		network, local = "udp4", "0.0.0.0:0" // a host without IPv6 refuses [::]
	}
	pc, err := n.ListenPacket(ctx, network, local)
	if err != nil {
		return nil, fmt.Errorf("dns: lookup %s: %w", name, err)
	}
	defer pc.Close()
	var lastErr error
	for try := range lookupTries {
		id := uint16(0x6c00 + try)
		msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: q, Type: dnsmessage.TypeAAAA, Class: dnsmessage.ClassINET}}}
		b, err := msg.Pack()
		if err != nil {
			return nil, fmt.Errorf("dns: lookup %s: %w", name, err)
		}
		if _, err := pc.WriteTo(b, net.UDPAddrFromAddrPort(server)); err != nil {
			return nil, fmt.Errorf("dns: lookup %s at %v: %w", name, server, err)
		}
		addrs, err := readAnswer(ctx, pc, id)
		if err == nil {
			return addrs, nil
		}
		if lastErr = err; ctx.Err() != nil || !errors.Is(err, errNoAnswer) {
			break
		}
	}
	return nil, fmt.Errorf("dns: lookup %s at %v: %w", name, server, lastErr)
}

var errNoAnswer = errors.New("no answer")

// readAnswer waits lookupWait for the response with id.
func readAnswer(ctx context.Context, pc net.PacketConn, id uint16) ([]netip.Addr, error) {
	deadline := time.Now().Add(lookupWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := pc.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	buf := make([]byte, maxUDP)
	for {
		n, _, err := pc.ReadFrom(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, errNoAnswer
		}
		if err != nil {
			return nil, err
		}
		addrs, err := ParseAAAA(buf[:n], id)
		if errors.Is(err, errOtherID) {
			continue // a late answer to an earlier try
		}
		return addrs, err
	}
}

var errOtherID = errors.New("answers another query")

// ParseAAAA returns the AAAA records of the response b to query id: an
// error for a response with another ID, one that fails, or bytes that
// are no response.
func ParseAAAA(b []byte, id uint16) ([]netip.Addr, error) {
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		return nil, fmt.Errorf("bad response: %w", err)
	}
	switch {
	case !m.Response:
		return nil, errors.New("a query, not a response")
	case m.ID != id:
		return nil, errOtherID
	case m.RCode != dnsmessage.RCodeSuccess:
		return nil, fmt.Errorf("server answered %v", m.RCode)
	}
	var out []netip.Addr
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AAAAResource); ok {
			out = append(out, netip.AddrFrom16(r.AAAA))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no AAAA records")
	}
	return out, nil
}

// Prefix64 discovers the NAT64 prefix a DNS64 synthesizes under, as RFC
// 7050 section 3 does: the AAAA records of ipv4only.arpa are its
// well-known IPv4 addresses embedded in the prefix (only /96, the format
// the lab uses, is recognized).
func Prefix64(ctx context.Context, n Network, server netip.AddrPort) (netip.Prefix, error) {
	addrs, err := LookupAAAA(ctx, n, server, ipv4OnlyArpa)
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, a := range addrs {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		for _, w := range ipv4OnlyAddrs {
			if v4 == w {
				return netip.PrefixFrom(a, 96).Masked(), nil
			}
		}
	}
	return netip.Prefix{}, fmt.Errorf("dns: %s answers %v, none a /96 NAT64 prefix (RFC 7050)", ipv4OnlyArpa, addrs)
}
