package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// StatefulConfig describes an IPv6 stateful packet filter (RFC 6092, "simple
// security" of a home router): nothing is translated; packets from inside
// pass and open state; packets from outside pass only through state an
// inside host opened. Its zero value is the "ipv6-firewall" profile with
// address-and-port-dependent filtering and the NAT's default timeouts.
type StatefulConfig struct {
	// Filtering decides which remotes may send in through state an inside
	// endpoint opened, as a NAT's filtering does (RFC 6092 section 3.2.2
	// leaves it to the router: endpoint-independent for application
	// transparency, stricter otherwise). If zero, EndpointIndependent; the
	// "ipv6-firewall" profile sets AddressAndPortDependent.
	Filtering Filtering
	// UDPTimeout is how long idle UDP state lives. If zero, 2m (RFC 6092:
	// not less than two minutes).
	UDPTimeout time.Duration
	// TCPEstablishedTimeout is how long an idle established TCP flow's
	// state lives. If zero, 2h4m (RFC 6092, as RFC 5382).
	TCPEstablishedTimeout time.Duration
	// TCPTransitoryTimeout is how long an opening or closing TCP flow's
	// state lives. If zero, 4m.
	TCPTransitoryTimeout time.Duration
	// ICMPTimeout is how long idle echo state lives. If zero, 60s.
	ICMPTimeout time.Duration
	// Refresh says which packets keep state alive. If zero, RefreshOutbound.
	Refresh Refresh
	// MaxStates caps the live states; new outbound flows beyond it are
	// dropped. If zero, unlimited.
	MaxStates int
}

// FirewallProfile returns the StatefulConfig of the named profile:
// "ipv6-firewall" is RFC 6092's simple security with address-and-port-
// dependent filtering, as Linux conntrack-based home routers filter.
func FirewallProfile(name string) (StatefulConfig, error) {
	if name != "ipv6-firewall" {
		return StatefulConfig{}, invalid(fmt.Sprintf("unknown firewall profile %q (known: ipv6-firewall)", name))
	}
	return StatefulConfig{Filtering: AddressAndPortDependent}, nil
}

// Validate reports the first invalid field. Errors match ErrInvalidConfig.
func (c StatefulConfig) Validate() error {
	switch {
	case !c.Filtering.valid():
		return invalid(fmt.Sprintf("unknown filtering behavior %d", int(c.Filtering)))
	case !c.Refresh.valid():
		return invalid(fmt.Sprintf("unknown refresh mode %d", int(c.Refresh)))
	case c.UDPTimeout < 0 || c.TCPEstablishedTimeout < 0 || c.TCPTransitoryTimeout < 0 || c.ICMPTimeout < 0:
		return invalid("negative timeout")
	case c.MaxStates < 0:
		return invalid(fmt.Sprintf("negative MaxStates %d", c.MaxStates))
	}
	return nil
}

// flow6 is one state's key: the protocol and both endpoints (ICMP echo:
// the identifier in both ports).
type flow6 struct {
	proto          Proto
	inside, remote netip.AddrPort
}

type state6 struct {
	tcp        tcpState
	lastActive time.Time
}

// Stateful is an RFC 6092 filter. It is safe for concurrent use and
// starts no goroutines: time is what Process is given.
type Stateful struct {
	cfg StatefulConfig

	mu        sync.Mutex
	states    map[flow6]*state6
	nextSweep time.Time
	stats     StatefulStats
}

// StatefulStats counts what the filter did.
type StatefulStats struct {
	Passed, NewStates, Expired           uint64
	DroppedNoState, DroppedMalformed     uint64 // inbound with no state; unparseable
	DroppedTableFull, DroppedUnsupported uint64
}

// NewStateful returns a filter, or the configuration's first problem.
func NewStateful(cfg StatefulConfig) (*Stateful, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := Config{UDPTimeout: cfg.UDPTimeout, TCPEstablishedTimeout: cfg.TCPEstablishedTimeout,
		TCPTransitoryTimeout: cfg.TCPTransitoryTimeout, ICMPTimeout: cfg.ICMPTimeout}.withDefaults()
	cfg.UDPTimeout, cfg.TCPEstablishedTimeout = d.UDPTimeout, d.TCPEstablishedTimeout
	cfg.TCPTransitoryTimeout, cfg.ICMPTimeout = d.TCPTransitoryTimeout, d.ICMPTimeout
	return &Stateful{cfg: cfg, states: map[flow6]*state6{}}, nil
}

// Stats returns the counters.
func (s *Stateful) Stats() StatefulStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// States returns how many states are alive at now.
func (s *Stateful) States(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, st := range s.states {
		if s.alive(k, st, now) {
			n++
		}
	}
	return n
}

func (s *Stateful) timeout(k flow6, st *state6) time.Duration {
	switch k.proto {
	case UDP:
		return s.cfg.UDPTimeout
	case ICMP:
		return s.cfg.ICMPTimeout
	}
	if st.tcp.established() {
		return s.cfg.TCPEstablishedTimeout
	}
	return s.cfg.TCPTransitoryTimeout
}

func (s *Stateful) alive(k flow6, st *state6, now time.Time) bool {
	return now.Before(st.lastActive.Add(s.timeout(k, st)))
}

// Process decides an IPv6 packet p (from the IPv6 header on) crossing the
// filter in direction dir at time now. It never modifies p. Reason is set
// for drops and for packets that opened state.
func (s *Stateful) Process(now time.Time, p []byte, dir Direction) Result {
	pk, err := parse6(p, false)
	if err != "" {
		return s.drop(&s.stats.DroppedMalformed, "malformed: "+err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !now.Before(s.nextSweep) {
		for k, st := range s.states {
			if !s.alive(k, st, now) {
				delete(s.states, k)
				s.stats.Expired++
			}
		}
		s.nextSweep = now.Add(time.Second)
	}
	if dir == FromInside {
		return s.outboundLocked(now, pk)
	}
	return s.inboundLocked(now, pk)
}

func (s *Stateful) drop(counter *uint64, reason string) Result {
	s.mu.Lock()
	*counter++
	s.mu.Unlock()
	return Result{Verdict: Drop, Reason: reason}
}

func (s *Stateful) outboundLocked(now time.Time, pk packet6) Result {
	if pk.proto == Any || pk.icmpError || pk.proto == ICMP && pk.icmpType != icmp6EchoRequest {
		s.stats.Passed++ // no state to open: other protocols, errors, replies
		return Result{}
	}
	k := flow6{proto: pk.proto, inside: pk.src, remote: pk.dst}
	st := s.states[k]
	var reason string
	if st == nil || !s.alive(k, st, now) {
		if st != nil {
			delete(s.states, k)
			s.stats.Expired++
		}
		if s.cfg.MaxStates > 0 && len(s.states) >= s.cfg.MaxStates {
			s.stats.DroppedTableFull++
			return Result{Verdict: Drop, Reason: "state table full"}
		}
		st = &state6{}
		s.states[k] = st
		s.stats.NewStates++
		reason = fmt.Sprintf("opened %s %v → %v", pk.proto, pk.src, pk.dst)
	}
	st.tcp.update(pk.tcpFlags, true)
	st.lastActive = now
	s.stats.Passed++
	return Result{Reason: reason}
}

func (s *Stateful) inboundLocked(now time.Time, pk packet6) Result {
	switch {
	case pk.icmpError && pk.icmpType == icmp6PacketTooBig:
		s.stats.Passed++ // RFC 4890 section 4.3.1: never filter Packet Too Big
		return Result{}
	case pk.icmpError:
		// An error about a packet an inside host sent: the quoted packet
		// is that one, inside → remote.
		if pk.quoted.proto != Any && s.findLocked(now, pk.quoted.proto, pk.quoted.src, pk.quoted.dst) != nil {
			s.stats.Passed++
			return Result{}
		}
		s.stats.DroppedNoState++
		return Result{Verdict: Drop, Reason: fmt.Sprintf("ipv6 firewall: icmpv6 error type %d about no flow of an inside host", pk.icmpType)}
	case pk.proto == Any:
		s.stats.DroppedUnsupported++
		return Result{Verdict: Drop, Reason: fmt.Sprintf("ipv6 firewall: inbound next header %d is not tracked", pk.nextHeader)}
	case pk.proto == ICMP && pk.icmpType != icmp6EchoReply:
		s.stats.DroppedNoState++
		return Result{Verdict: Drop, Reason: fmt.Sprintf("ipv6 firewall: inbound icmpv6 type %d with no state", pk.icmpType)}
	}
	st := s.findLocked(now, pk.proto, pk.dst, pk.src)
	if st == nil {
		s.stats.DroppedNoState++
		return Result{Verdict: Drop, Reason: fmt.Sprintf("ipv6 firewall (%s filtering): no state for %s %v → %v", s.cfg.Filtering, pk.proto, pk.src, pk.dst)}
	}
	st.tcp.update(pk.tcpFlags, false)
	if s.cfg.Refresh == RefreshBoth {
		st.lastActive = now
	}
	s.stats.Passed++
	return Result{}
}

// findLocked returns live state of inside for remote under the filtering
// behaviour: the exact flow, one to the same address, or any.
func (s *Stateful) findLocked(now time.Time, proto Proto, inside, remote netip.AddrPort) *state6 {
	k := flow6{proto: proto, inside: inside, remote: remote}
	if proto == ICMP || s.cfg.Filtering == AddressAndPortDependent {
		if st := s.states[k]; st != nil && s.alive(k, st, now) {
			return st
		}
		return nil
	}
	for k, st := range s.states {
		if k.proto != proto || k.inside != inside || !s.alive(k, st, now) {
			continue
		}
		if s.cfg.Filtering == EndpointIndependent || k.remote.Addr() == remote.Addr() {
			return st
		}
	}
	return nil
}

const (
	icmp6PacketTooBig = 2
	icmp6EchoRequest  = 128
	icmp6EchoReply    = 129
)

// packet6 is what the filter reads of an IPv6 packet.
type packet6 struct {
	proto      Proto // Any for what it does not track
	nextHeader uint8
	src, dst   netip.AddrPort
	tcpFlags   uint8
	icmpType   uint8
	icmpError  bool
	quoted     *packet6 // an ICMPv6 error's packet, if it parses
}

// parse6 reads p's header, its extension headers (hop-by-hop, routing,
// destination options; a fragment header with offset 0) and its transport
// ports. It trusts no length. A quoted packet (inside an ICMPv6 error) may
// be cut short: its payload length is not checked and 4 bytes of transport
// header (the ports) are enough. The error is empty on success.
func parse6(p []byte, quoted bool) (packet6, string) {
	var pk packet6
	if len(p) < 40 {
		return pk, fmt.Sprintf("%d-byte packet is shorter than an ipv6 header", len(p))
	}
	if p[0]>>4 != 6 {
		return pk, fmt.Sprintf("ip version %d", p[0]>>4)
	}
	n := int(binary.BigEndian.Uint16(p[4:6]))
	if quoted {
		n = min(n, len(p)-40)
	}
	if 40+n > len(p) {
		return pk, fmt.Sprintf("ipv6 payload length %d in %d bytes", n, len(p)-40)
	}
	src, dst := netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
	pk.src, pk.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
	next, off, end := p[6], 40, 40+n
headers:
	for range 8 {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if off+8 > end {
				return pk, "truncated ipv6 extension header"
			}
			next, off = p[off], off+(int(p[off+1])+1)*8
			continue
		case 44: // fragment
			if off+8 > end {
				return pk, "truncated ipv6 fragment header"
			}
			if binary.BigEndian.Uint16(p[off+2:off+4])&^7 != 0 {
				pk.nextHeader = 44
				return pk, "" // a later fragment: no ports to read
			}
			next, off = p[off], off+8
			continue
		}
		break headers
	}
	if off > end {
		return pk, "truncated ipv6 extension header"
	}
	pk.nextHeader = next
	t := p[off:end]
	switch next {
	case 6, 17:
		if len(t) < 4 || !quoted && (len(t) < 8 || next == 6 && len(t) < 20) {
			return pk, fmt.Sprintf("truncated transport header (%d bytes)", len(t))
		}
		pk.proto = UDP
		if next == 6 {
			pk.proto = TCP
			if len(t) >= 14 {
				pk.tcpFlags = t[13]
			}
		}
		pk.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(t[0:2]))
		pk.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(t[2:4]))
	case 58:
		if len(t) < 8 && !(quoted && len(t) >= 6) {
			return pk, fmt.Sprintf("truncated icmpv6 header (%d bytes)", len(t))
		}
		pk.proto, pk.icmpType = ICMP, t[0]
		pk.icmpError = t[0] < 128
		if pk.icmpError {
			pk.quoted = &packet6{}
			if quoted || len(t) < 8 {
				return pk, "" // an error about an error is never about a flow
			}
			if q, err := parse6(t[8:], true); err == "" {
				pk.quoted = &q
			}
			return pk, ""
		}
		id := binary.BigEndian.Uint16(t[4:6])
		pk.src, pk.dst = netip.AddrPortFrom(src, id), netip.AddrPortFrom(dst, id)
	}
	return pk, ""
}
