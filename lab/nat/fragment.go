package nat

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/latticelab/lattice/internal/inet"
)

// IPv4 fragments (RFC 4787 REQ-14, RFC 5508 section 7): the first
// fragment carries the transport header and is translated like a whole
// packet, its checksum fixed incrementally (the checksum field is in the
// first fragment, and the change touches only words it covers); the NAT
// remembers the translation by the fragment's (source, destination,
// protocol, IP ID), and the later fragments, which carry no ports, get the
// same addresses. A fragment that arrives before its first one, or after
// the last, is dropped: the NAT holds no packets (Process translates in
// place).

// fragTimeout is how long a datagram's later fragments are translated
// after its first: the reassembly timeout of Linux (30s); RFC 791 suggests
// 15s.
const fragTimeout = 30 * time.Second

// maxFragFlows bounds the remembered datagrams, so a flood of first
// fragments cannot grow the NAT without limit. A datagram is forgotten
// when its last fragment passes, so only those in flight count.
const maxFragFlows = 16384

// fragKey names one datagram as the NAT sees it arrive.
type fragKey struct {
	src, dst netip.Addr
	proto    uint8
	id       uint16
}

// fragFlow is the translation of a datagram's first fragment.
type fragFlow struct {
	src, dst netip.Addr // after translation
	expires  time.Time
}

// rememberFragLocked records how the first fragment of a datagram was
// translated (orig is its key as it arrived).
func (n *NAT) rememberFragLocked(now time.Time, orig fragKey, p *packet) {
	if n.frags == nil {
		n.frags = map[fragKey]fragFlow{}
	}
	if len(n.frags) >= maxFragFlows {
		n.sweepFragsLocked(now)
		if len(n.frags) >= maxFragFlows {
			return // its later fragments are dropped as having no first
		}
	}
	n.frags[orig] = fragFlow{src: p.src, dst: p.dst, expires: now.Add(fragTimeout)}
}

func (n *NAT) sweepFragsLocked(now time.Time) {
	for k, f := range n.frags {
		if !now.Before(f.expires) {
			delete(n.frags, k)
		}
	}
}

// laterFragmentLocked translates a fragment after the first: its addresses
// become those of its datagram's first fragment.
func (n *NAT) laterFragmentLocked(now time.Time, p *packet) Result {
	k := fragKey{src: p.src, dst: p.dst, proto: p.b[9], id: p.fragID}
	f, ok := n.frags[k]
	if !ok || !now.Before(f.expires) {
		delete(n.frags, k)
		return n.dropLocked(dropNoMapping, fmt.Sprintf("dropped: ipv4 fragment %s → %s id %d offset %d: no first fragment seen (out of order, or expired)",
			p.src, p.dst, p.fragID, p.fragOff))
	}
	b := p.b
	var d inet.Delta
	d.Addr4(p.src.As4(), f.src.As4())
	d.Addr4(p.dst.As4(), f.dst.As4())
	s, t := f.src.As4(), f.dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], t[:])
	d.Fix(b, ipv4ChecksumOff)
	p.src, p.dst = f.src, f.dst
	if !p.more {
		// The last fragment: a copy of it, or a fragment after it that
		// arrives late (reordered), finds nothing, and is dropped.
		delete(n.frags, k)
	}
	n.stats.Translated++
	n.stats.Fragments++
	return Result{}
}
