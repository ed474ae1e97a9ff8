package link

import (
	"encoding/binary"
	"math/rand/v2"
)

// Per-flow random streams. A pipe whose Config.Flow is set draws each
// packet's loss, duplication, reorder and jitter from the stream of the
// packet's flow, seeded from (Config.Seed, flow key). The draws of one flow
// then depend only on that flow's own packets: a packet of another flow
// arriving earlier or later (a NATS PING, a STUN retry, two goroutines
// sending in the other order) no longer shifts every later draw on the link.

// maxFlows bounds the streams a pipe keeps. Past it the table starts
// afresh, which depends only on the packets the pipe has seen, so a seed
// still replays exactly.
const maxFlows = 4096

// flowStream returns the stream pkt draws from. p.mu must be held.
func (p *Pipe) flowStream(pkt []byte) *rand.PCG {
	if p.flow == nil {
		return &p.rng
	}
	key := p.flow(pkt)
	if r, ok := p.flows[key]; ok {
		return r
	}
	if len(p.flows) >= maxFlows {
		clear(p.flows)
	}
	r := rand.NewPCG(p.seed, mix64(key^seedStream))
	p.flows[key] = r
	return r
}

// chance reports true with probability prob, drawing from r.
func chance(r *rand.PCG, prob float64) bool { return uniform(r) < prob }

// uniform returns a uniform float64 in [0,1) drawn from r.
func uniform(r *rand.PCG) float64 { return float64(r.Uint64()>>11) * 0x1p-53 }

// Ethernet and IP constants EthernetFlow reads.
const (
	ethLen    = 14
	ethIPv4   = 0x0800
	ethIPv6   = 0x86dd
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
	protoUDPL = 136 // UDP-Lite
)

// EthernetFlow is a Config.Flow for Ethernet frames carrying IPv4 or IPv6:
// a key from the IP protocol, the two addresses and, for TCP, UDP, UDP-Lite
// and SCTP (and for IPv4 only in a first or unfragmented piece), the two
// ports. The key is directional: the two directions of a connection are
// two flows, as they are two pipes. Frames it cannot read (short, not IP,
// IPv6 extension headers before the transport) fall into flows keyed by
// what it could read, at worst all into one. It never panics.
func EthernetFlow(frame []byte) uint64 {
	if len(frame) < ethLen {
		return 0
	}
	h := uint64(fnvOffset)
	et := binary.BigEndian.Uint16(frame[12:14])
	h = fnvAdd(h, frame[12:14])
	ip := frame[ethLen:]
	var proto byte
	var l4 []byte
	switch et {
	case ethIPv4:
		if len(ip) < 20 || ip[0]>>4 != 4 {
			return h
		}
		ihl := int(ip[0]&0x0f) * 4
		proto = ip[9]
		h = fnvAdd(h, ip[9:10])
		h = fnvAdd(h, ip[12:20])
		fragOff := binary.BigEndian.Uint16(ip[6:8]) & 0x1fff
		if ihl >= 20 && fragOff == 0 && len(ip) >= ihl {
			l4 = ip[ihl:]
		}
	case ethIPv6:
		if len(ip) < 40 || ip[0]>>4 != 6 {
			return h
		}
		proto = ip[6]
		h = fnvAdd(h, ip[6:7])
		h = fnvAdd(h, ip[8:40])
		l4 = ip[40:]
	default:
		return h
	}
	switch proto {
	case protoTCP, protoUDP, protoSCTP, protoUDPL:
		if len(l4) >= 4 {
			h = fnvAdd(h, l4[:4])
		}
	}
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// mix64 is SplitMix64's finalizer: nearby keys give unrelated seeds.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
