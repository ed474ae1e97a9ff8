package fabric

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// A host reassembles the UDP datagrams that reach it in fragments (from a
// kernel host, or split by a router before a smaller link), so its UDP
// sockets, which the fabric serves (see udp.go), get them whole. Other
// protocols' fragments are gVisor's, which reassembles its own.

const (
	reasmTimeout  = 30 * time.Second // Linux's ipfrag_time
	reasmMaxFlows = 64               // datagrams in reassembly per host
)

type reasmKey struct {
	src, dst netip.Addr
	id       uint16
}

type reasmPiece struct {
	off  int
	data []byte
}

type reasmFlow struct {
	hdr     [header.IPv4MaximumHeaderSize]byte // the first fragment's header, once seen
	hl      int                                // its length, options included
	eth     [ethHeaderLen]byte
	first   bool
	total   int // payload length, once the last fragment is seen; else -1
	pieces  []reasmPiece
	started time.Time
}

// reassembler holds one host's datagrams in reassembly.
type reassembler struct {
	mu    sync.Mutex // guards flows
	flows map[reasmKey]*reasmFlow
}

// add takes frame f if it is a UDP fragment (it then owns f) and returns
// the whole datagram's frame once its last missing fragment arrived, else
// nil. ok is false for frames that are not UDP fragments.
func (r *reassembler) add(f []byte, now time.Time) (whole []byte, ok bool) {
	if len(f) < ethHeaderLen+ipv4HeaderLen || binary.BigEndian.Uint16(f[12:14]) != etherTypeIPv4 {
		return nil, false
	}
	ip := header.IPv4(f[ethHeaderLen:])
	ihl := int(ip.HeaderLength())
	if header.IPVersion(ip) != header.IPv4Version || ip.Protocol() != protoUDP || ihl < ipv4HeaderLen ||
		(!ip.More() && ip.FragmentOffset() == 0) {
		return nil, false
	}
	defer putFrame(f)
	total := int(ip.TotalLength())
	if ihl > len(ip) || total > len(ip) || total <= ihl || (ip.More() && (total-ihl)%8 != 0) {
		return nil, true // malformed: dropped
	}
	off := int(ip.FragmentOffset())
	data := ip[ihl:total]
	if off+len(data) > inet.MaxIPv4Datagram-ihl {
		return nil, true
	}
	k := reasmKey{src: netip.AddrFrom4([4]byte(ip.SourceAddressSlice())), dst: netip.AddrFrom4([4]byte(ip.DestinationAddressSlice())), id: ip.ID()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flows == nil {
		r.flows = map[reasmKey]*reasmFlow{}
	}
	fl := r.flows[k]
	if fl != nil && now.Sub(fl.started) >= reasmTimeout {
		delete(r.flows, k)
		fl = nil
	}
	if fl == nil {
		if len(r.flows) >= reasmMaxFlows {
			for kk, other := range r.flows {
				if now.Sub(other.started) >= reasmTimeout {
					delete(r.flows, kk)
				}
			}
			if len(r.flows) >= reasmMaxFlows {
				return nil, true
			}
		}
		fl = &reasmFlow{total: -1, started: now}
		r.flows[k] = fl
	}
	if off == 0 {
		fl.first = true
		fl.hl = copy(fl.hdr[:], ip[:ihl])
		copy(fl.eth[:], f[:ethHeaderLen])
	}
	if !ip.More() {
		fl.total = off + len(data)
	}
	fl.pieces = append(fl.pieces, reasmPiece{off: off, data: append([]byte(nil), data...)})
	if !fl.first || fl.total < 0 || !fl.complete() {
		return nil, true
	}
	delete(r.flows, k)
	if fl.hl+fl.total > inet.MaxIPv4Datagram {
		return nil, true // the first fragment's options leave no room for the rest
	}
	return fl.join(), true
}

// complete reports whether the pieces cover the payload without a gap.
func (fl *reasmFlow) complete() bool {
	slices.SortFunc(fl.pieces, func(a, b reasmPiece) int { return a.off - b.off })
	end := 0
	for _, p := range fl.pieces {
		if p.off > end {
			return false
		}
		end = max(end, p.off+len(p.data))
	}
	return end >= fl.total
}

// join builds the datagram's frame: the first fragment's headers (its
// options with them, RFC 791: later fragments may carry fewer), no
// fragment fields, the payload in order (a later copy of a byte wins).
func (fl *reasmFlow) join() []byte {
	n := ethHeaderLen + fl.hl + fl.total
	f := getFrame(n)
	copy(f, fl.eth[:])
	ip := header.IPv4(f[ethHeaderLen:])
	copy(ip, fl.hdr[:fl.hl])
	for _, p := range fl.pieces {
		copy(ip[fl.hl+p.off:], p.data[:min(len(p.data), fl.total-p.off)])
	}
	ip.SetTotalLength(uint16(fl.hl + fl.total))
	ip.SetFlagsFragmentOffset(0, 0)
	inet.SetIPv4Checksum(ip)
	return f
}
