package bpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/latticelab/lattice/policy"
)

// Event is one decision the kernel reported: every drop, and with
// Config.ReportAllowed every allowed TCP connection attempt (SYN) and new
// UDP flow.
type Event struct {
	// Interface is the index of the interface the packet left by.
	Interface int
	Src, Dst  netip.Addr
	// SrcPort and DstPort are zero for ICMP and later IPv4 fragments.
	SrcPort, DstPort uint16
	// Proto is TCP, UDP or ICMP; ProtoAny for another protocol (denied as
	// "invalid destination").
	Proto policy.Proto
	Allow bool
	// Rule is what Policy.Decide's Decision.Rule says for the packet:
	// "p.yaml:4 deny 10.0.0.0/8", "metadata", "default deny", ...
	Rule string
	// TCPFlags are the TCP header's flags byte (SYN is 0x02).
	TCPFlags uint8
}

func (e Event) String() string {
	verdict := "deny"
	if e.Allow {
		verdict = "allow"
	}
	return fmt.Sprintf("%s %s %s -> %s (%s) if %d", verdict, e.Proto,
		netip.AddrPortFrom(e.Src, e.SrcPort), netip.AddrPortFrom(e.Dst, e.DstPort), e.Rule, e.Interface)
}

// rawEvent is a ring buffer record before its rule id is named.
type rawEvent struct {
	Event
	rule uint32
	gen  uint32
}

// decodeEvent parses one ring buffer record (see the ev* offsets).
func decodeEvent(b []byte) (rawEvent, error) {
	var r rawEvent
	if len(b) != eventSize {
		return r, fmt.Errorf("bpf: event of %d bytes, want %d", len(b), eventSize)
	}
	ne := binary.NativeEndian
	dst := netip.AddrFrom16([16]byte(b[evDst : evDst+16]))
	src := netip.AddrFrom16([16]byte(b[evSrc : evSrc+16]))
	switch b[evFamily] {
	case 4:
		if !dst.Is4In6() || !src.Is4In6() {
			return r, fmt.Errorf("bpf: IPv4 event with IPv6 addresses %s, %s", src, dst)
		}
		dst, src = dst.Unmap(), src.Unmap()
	case 6:
	default:
		return r, fmt.Errorf("bpf: event of address family %d, want 4 or 6", b[evFamily])
	}
	if b[evProto] > byte(policy.ICMP) || b[evVerdict] > 1 {
		return r, fmt.Errorf("bpf: event with protocol %d, verdict %d", b[evProto], b[evVerdict])
	}
	r.Event = Event{
		Interface: int(ne.Uint32(b[evIfindex:])),
		Src:       src,
		Dst:       dst,
		SrcPort:   ne.Uint16(b[evSport:]),
		DstPort:   ne.Uint16(b[evDport:]),
		Proto:     policy.Proto(b[evProto]),
		Allow:     b[evVerdict] == 1,
		TCPFlags:  b[evFlags],
	}
	r.rule = ne.Uint32(b[evRule:])
	r.gen = ne.Uint32(b[evGen:])
	return r, nil
}
