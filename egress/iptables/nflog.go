package iptables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/latticelab/lattice/policy"
)

// Event is one packet the chains logged to NFLOG: every one they reject,
// and with Config.ReportAllowed every allowed new connection (conntrack
// NEW: a TCP SYN, a UDP flow's first datagram).
type Event struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // zero for ICMP
	// Proto is TCP, UDP or ICMP; ProtoAny for another protocol.
	Proto policy.Proto
	Allow bool
	// Rule is what Policy.Decide's Decision.Rule says for the packet.
	Rule string
}

func (e Event) String() string {
	verdict := "deny"
	if e.Allow {
		verdict = "allow"
	}
	return fmt.Sprintf("%s %s %s -> %s (%s)", verdict, e.Proto, netip.AddrPortFrom(e.Src, e.SrcPort), netip.AddrPortFrom(e.Dst, e.DstPort), e.Rule)
}

// logPrefix is the NFLOG prefix of a logging rule: "lattice:GEN:ID:V",
// the chains' generation, the label's index and the verdict (1 allow).
func logPrefix(gen uint32, id int, allow bool) string {
	v := 0
	if allow {
		v = 1
	}
	return fmt.Sprintf("lattice:%d:%d:%d", gen, id, v)
}

// parsePrefix reverses logPrefix.
func parsePrefix(s string) (gen uint32, id int, allow bool, err error) {
	f := strings.Split(strings.TrimRight(s, "\x00"), ":")
	if len(f) != 4 || f[0] != "lattice" || (f[3] != "0" && f[3] != "1") {
		return 0, 0, false, fmt.Errorf("iptables: log prefix %q is not lattice's", s)
	}
	g, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return 0, 0, false, fmt.Errorf("iptables: log prefix %q: %w", s, err)
	}
	i, err := strconv.ParseUint(f[2], 10, 31)
	if err != nil {
		return 0, 0, false, fmt.Errorf("iptables: log prefix %q: %w", s, err)
	}
	return uint32(g), int(i), f[3] == "1", nil
}

// Netlink message layout (linux/netfilter/nfnetlink_log.h).
const (
	nlmsgHdrLen    = 16
	nfgenLen       = 4
	subsysULOG     = 4
	msgPacket      = 0
	msgConfig      = 1
	attrPayload    = 9
	attrPrefix     = 10
	attrTypeMask   = 0x3fff
	maxLoggedBytes = 128
)

// logRecord is one NFLOG packet message: its prefix and the start of the
// IP packet.
type logRecord struct {
	prefix  string
	payload []byte
}

// parseMessages splits a netlink datagram into NFLOG packet records,
// skipping other messages. Malformed input is an error, never a panic.
func parseMessages(b []byte) ([]logRecord, error) {
	var out []logRecord
	for len(b) >= nlmsgHdrLen {
		n := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		if n < nlmsgHdrLen || n > len(b) {
			return out, fmt.Errorf("iptables: netlink message of %d bytes in %d", n, len(b))
		}
		msg := b[nlmsgHdrLen:n]
		if typ == subsysULOG<<8|msgPacket {
			if len(msg) < nfgenLen {
				return out, errors.New("iptables: NFLOG message without its header")
			}
			rec, err := parseAttrs(msg[nfgenLen:])
			if err != nil {
				return out, err
			}
			out = append(out, rec)
		}
		b = b[min(align4(n), len(b)):]
	}
	return out, nil
}

func parseAttrs(b []byte) (logRecord, error) {
	var rec logRecord
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & attrTypeMask
		if n < 4 || n > len(b) {
			return rec, fmt.Errorf("iptables: NFLOG attribute of %d bytes in %d", n, len(b))
		}
		v := b[4:n]
		switch typ {
		case attrPayload:
			rec.payload = v
		case attrPrefix:
			rec.prefix = strings.TrimRight(string(v), "\x00")
		}
		b = b[min(align4(n), len(b)):]
	}
	return rec, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// parsePacket reads addresses, protocol and ports from the start of an
// IPv4 or IPv6 packet (no IPv6 extension headers: such a packet is
// ProtoAny, as the chains reject it as "invalid destination").
func parsePacket(p []byte) (Event, error) {
	var e Event
	if len(p) < 1 {
		return e, errors.New("iptables: empty packet")
	}
	var l4 []byte
	var proto byte
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0x0f) * 4
		if ihl < 20 || len(p) < ihl {
			return e, fmt.Errorf("iptables: IPv4 header of %d bytes in %d", ihl, len(p))
		}
		proto = p[9]
		e.Src = netip.AddrFrom4([4]byte(p[12:16]))
		e.Dst = netip.AddrFrom4([4]byte(p[16:20]))
		if binary.BigEndian.Uint16(p[6:])&0x1fff == 0 { // first fragment: ports follow
			l4 = p[ihl:]
		}
	case 6:
		if len(p) < 40 {
			return e, fmt.Errorf("iptables: IPv6 header in %d bytes", len(p))
		}
		proto = p[6]
		e.Src = netip.AddrFrom16([16]byte(p[8:24]))
		e.Dst = netip.AddrFrom16([16]byte(p[24:40]))
		l4 = p[40:]
	default:
		return e, fmt.Errorf("iptables: IP version %d", p[0]>>4)
	}
	switch proto {
	case 6:
		e.Proto = policy.TCP
	case 17:
		e.Proto = policy.UDP
	case 1, 58:
		e.Proto = policy.ICMP
	}
	if (e.Proto == policy.TCP || e.Proto == policy.UDP) && len(l4) >= 4 {
		e.SrcPort = binary.BigEndian.Uint16(l4)
		e.DstPort = binary.BigEndian.Uint16(l4[2:])
	}
	return e, nil
}
