package stun

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/latticelab/lattice/netx"
)

// Report is what Netcheck found about the path from a host to the STUN
// servers: the answer to "what kind of NAT am I behind?". Its JSON shape
// is what `lattice netcheck --json` prints.
type Report struct {
	// UDP reports whether any server answered; false means UDP is
	// blocked on the way (or every server is down).
	UDP bool `json:"udp"`
	// Public is the host's endpoint as the first answering server saw it.
	Public netip.AddrPort `json:"public"`
	// NATed: Public is not one of the host's own endpoints.
	NATed bool `json:"nat"`
	// PortPreserved: the NAT kept the socket's own port in Public.
	PortPreserved bool `json:"port_preserved"`
	// Hairpin: a datagram sent to Public from inside came back in, so
	// peers behind the same NAT reach each other at their public
	// endpoints (RFC 4787 REQ-9). Meaningful only when NATed.
	Hairpin bool `json:"hairpin"`
	// Mapping and Filtering are RFC 5780's classification against
	// BehaviorServer, nil when no server supports RFC 5780.
	Mapping   *Behavior `json:"mapping"`
	Filtering *Behavior `json:"filtering"`
	// BehaviorServer is the server Mapping and Filtering came from;
	// BehaviorError says why there are none.
	BehaviorServer netip.AddrPort `json:"behavior_server,omitzero"`
	BehaviorError  string         `json:"behavior_error,omitempty"`
	// MappingVaries: two servers saw different public endpoints for one
	// socket, so the mapping depends on the destination (when no server
	// supports RFC 5780, the only evidence there is).
	MappingVaries bool `json:"mapping_varies"`
	// Servers is one entry per server asked, in the order given.
	Servers []ServerReport `json:"servers"`
}

// ServerReport is one server's answer to a plain Binding request.
type ServerReport struct {
	Addr   netip.AddrPort `json:"addr"`
	Mapped netip.AddrPort `json:"mapped,omitzero"`
	// RTT is the Binding transaction's round trip, retransmissions
	// included.
	RTT time.Duration `json:"rtt_ns"`
	Err string        `json:"error,omitempty"`
}

// MarshalText implements encoding.TextMarshaler: the RFC 4787 term.
func (b Behavior) MarshalText() ([]byte, error) {
	if b < 0 || int(b) >= len(behaviorNames) {
		return nil, fmt.Errorf("stun: behavior %d out of range", int(b))
	}
	return []byte(b.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *Behavior) UnmarshalText(t []byte) error {
	for i, n := range behaviorNames {
		if string(t) == n {
			*b = Behavior(i)
			return nil
		}
	}
	return fmt.Errorf("stun: unknown behavior %q", t)
}

// Netcheck asks every server in servers (one address family: the first
// server's; others are reported as skipped) for the host's public
// endpoint from one socket on n, checks port preservation and
// hairpinning on that socket, and classifies the NAT with Discover
// against the first server that supports RFC 5780. Unanswered servers are
// not an error: a Report with UDP false says UDP is blocked. opt's Wait
// and Tries bound each request (Discover's defaults: 3 × 500ms).
func Netcheck(ctx context.Context, n netx.Network, servers []netip.AddrPort, opt Options) (Report, error) {
	rep := Report{Servers: make([]ServerReport, 0, len(servers))}
	switch {
	case n == nil:
		return rep, errors.New("stun: netcheck: nil Network")
	case len(servers) == 0:
		return rep, errors.New("stun: netcheck: no STUN servers")
	case opt.Wait < 0 || opt.Tries < 0:
		return rep, fmt.Errorf("stun: netcheck: negative Wait %v or Tries %d", opt.Wait, opt.Tries)
	}
	servers = slices.Clone(servers)
	for i, s := range servers {
		s = unmap(s)
		servers[i] = s
		if !s.IsValid() || s.Port() == 0 || s.Addr().IsUnspecified() {
			return rep, fmt.Errorf("stun: netcheck: invalid server address %v", s)
		}
	}
	network, laddr := listenAddr(servers[0], opt.Local)
	c, err := n.ListenPacket(ctx, network, laddr)
	if err != nil {
		return rep, fmt.Errorf("stun: netcheck: listen %s %s: %w", network, laddr, err)
	}
	defer c.Close()
	d := discovery{ctx: ctx, n: n, waits: opt.waits()}
	for _, s := range servers {
		sr := ServerReport{Addr: s}
		if s.Addr().Is4() != servers[0].Addr().Is4() {
			sr.Err = "skipped: another address family than " + servers[0].String()
			rep.Servers = append(rep.Servers, sr)
			continue
		}
		d.server = s
		start := time.Now()
		r, err := d.ask(c, s, 0)
		if err != nil {
			sr.Err = err.Error()
		} else {
			sr.Mapped, sr.RTT = r.mapped, time.Since(start)
			if !rep.UDP {
				rep.UDP, rep.Public = true, r.mapped
			} else if r.mapped != rep.Public {
				rep.MappingVaries = true
			}
		}
		rep.Servers = append(rep.Servers, sr)
	}
	if ctx.Err() != nil {
		return rep, fmt.Errorf("stun: netcheck: %w", ctx.Err())
	}
	if !rep.UDP {
		return rep, nil
	}
	rep.NATed = !isLocal(n, c, rep.Public)
	if local, ok := addrPortOf(c.LocalAddr()); ok {
		rep.PortPreserved = local.Port() == rep.Public.Port()
	}
	if rep.NATed {
		if rep.Hairpin, err = hairpin(ctx, c, rep.Public, d.waits); err != nil {
			return rep, err
		}
	}
	rep.behavior(ctx, n, opt)
	return rep, nil
}

// behavior runs Discover against each answering server in turn until one
// classifies the NAT.
func (rep *Report) behavior(ctx context.Context, n netx.Network, opt Options) {
	var errs []error
	for _, sr := range rep.Servers {
		if sr.Err != "" {
			continue
		}
		res, err := Discover(ctx, n, sr.Addr, opt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Mapping, rep.Filtering, rep.BehaviorServer = &res.Mapping, &res.Filtering, sr.Addr
		return
	}
	rep.BehaviorError = errors.Join(errs...).Error()
}

// hairpin sends a probe from c to its own public endpoint and reports
// whether it came back. The probe goes out through c's mapping and, if the
// NAT hairpins, in through the same mapping, from an endpoint c has just
// sent to, so filtering of any kind admits it; a NAT whose mapping depends
// on the destination gives the probe another external port, which c's
// mapping does not admit, and that is what such a NAT does to peers too.
func hairpin(ctx context.Context, c net.PacketConn, public netip.AddrPort, waits []time.Duration) (bool, error) {
	probe := make([]byte, 20)
	copy(probe, "lattice-hairpin:")
	_, _ = rand.Read(probe[16:])
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	buf := make([]byte, clientBuffer)
	for _, w := range waits {
		if _, err := c.WriteTo(probe, net.UDPAddrFromAddrPort(public)); err != nil {
			return false, fmt.Errorf("stun: netcheck: hairpin probe to %v: %w", public, err)
		}
		deadline := time.Now().Add(w)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		_ = c.SetReadDeadline(deadline)
		for {
			nr, _, err := c.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return false, fmt.Errorf("stun: netcheck: hairpin: %w", err)
			}
			if bytes.Equal(buf[:nr], probe) {
				return true, nil
			}
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("stun: netcheck: hairpin: %w", ctx.Err())
		}
	}
	return false, nil
}
