package bpf

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// TCX verdicts (include/uapi/linux/bpf.h).
const (
	tcxNext = -1 // let the next program, or the stack, decide: allow
	tcxDrop = 2
)

// Stack layout, as offsets from the frame pointer R10. The verifier wants
// stack accesses aligned to their size.
const (
	evOff    = -64  // event, eventSize bytes
	keyOff   = -88  // bpf_lpm_trie_key: u32 prefixlen, 16 address bytes
	hdrOff   = -136 // IP header copy (40 bytes), then the L4 header
	zeroOff  = -144 // u32 0, the outer map's key
	stampOff = -152 // u64, a flow's value: when it was last reported (ns)
)

// synWindow is how long an allowed TCP SYN's 5-tuple stays reported: a
// retransmitted SYN within it is the same connection attempt, not another.
const synWindow = 30 * 1e9

// Event record layout (little-endian on the hosts we build for; decoded
// with the native byte order).
const (
	evDst     = 0  // 16 bytes, IPv4 in its IPv4-mapped form
	evSrc     = 16 // 16 bytes
	evSport   = 32 // u16, host order
	evDport   = 34 // u16, host order
	evProto   = 36 // u8, policy.Proto
	evVerdict = 37 // u8, 1 allow
	evFamily  = 38 // u8, 4 or 6
	evFlags   = 39 // u8, TCP flags
	evIfindex = 40 // u32
	evRule    = 44 // u32, label id
	evGen     = 48 // u32, table generation
	eventSize = 56
)

// __sk_buff field offsets.
const (
	skbProtocol = 16
	skbIfindex  = 40
)

// programConfig is what the generated program bakes in.
type programConfig struct {
	outerFD  int  // ARRAY_OF_MAPS holding the current LPM trie at key 0
	eventsFD int  // RINGBUF
	l3Off    int  // 14 on Ethernet links, 0 on TUN
	newConns bool // report allowed TCP SYNs and new UDP flows
	flowsFD  int  // LRU_HASH of UDP flows and TCP SYNs reported, with newConns
}

// flowKeySize is the part of the event that names a UDP flow: addresses,
// ports, protocol, verdict, family and flags (0 for UDP).
const flowKeySize = 40

// program returns the egress classifier: parse the IPv4/IPv6 and TCP/UDP/
// ICMP headers, look the destination up in the LPM trie, take the first
// clause matching protocol and port, and report drops (and, with newConns,
// allowed TCP SYNs and first UDP datagrams) to the ring buffer.
func program(c programConfig) asm.Instructions {
	var p asm.Instructions
	p = append(p, asm.Mov.Reg(asm.R6, asm.R1), asm.Mov.Imm(asm.R1, 0))
	for i := int16(0); i < eventSize/8; i++ {
		p = append(p, asm.StoreMem(asm.RFP, evOff+8*i, asm.R1, asm.DWord))
	}
	p = append(p,
		asm.StoreMem(asm.RFP, zeroOff, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R6, skbIfindex, asm.Word),
		asm.StoreMem(asm.RFP, evOff+evIfindex, asm.R1, asm.Word),
		asm.LoadMem(asm.R7, asm.R6, skbProtocol, asm.Word),
		// skb->protocol is in network byte order.
		asm.JEq.Imm(asm.R7, 0x0008, "ipv4"),
		asm.JEq.Imm(asm.R7, 0xdd86, "ipv6"),
		asm.Mov.Imm(asm.R0, tcxNext), // ARP and other non-IP: not the policy's business
		asm.Return(),
	)
	p = append(p, ipv4(c)...)
	p = append(p, ipv6(c)...)
	p = append(p, transport(c)...)
	p = append(p, lookup(c)...)
	p = append(p, verdicts(c)...)
	return p
}

// loadBytes calls bpf_skb_load_bytes(skb, off, fp+dst, n); the offset is in R2.
func loadBytes(dst int16, n int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(dst)),
		asm.Mov.Imm(asm.R4, n),
		asm.FnSkbLoadBytes.Call(),
	}
}

// copyWords copies n bytes (a multiple of 4) between stack offsets.
func copyWords(dst, src int16, n int16) asm.Instructions {
	var p asm.Instructions
	for i := int16(0); i < n; i += 4 {
		p = append(p, asm.LoadMem(asm.R1, asm.RFP, src+i, asm.Word), asm.StoreMem(asm.RFP, dst+i, asm.R1, asm.Word))
	}
	return p
}

// classify sets R7 to the policy.Proto of IP protocol number R8 (0 for
// others) and stores it in the event.
func classify(label string, icmp int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Imm(asm.R7, 1).WithSymbol(label),
		asm.JEq.Imm(asm.R8, 6, label+"_done"),
		asm.Mov.Imm(asm.R7, 2),
		asm.JEq.Imm(asm.R8, 17, label+"_done"),
		asm.Mov.Imm(asm.R7, 3),
		asm.JEq.Imm(asm.R8, icmp, label+"_done"),
		asm.Mov.Imm(asm.R7, 0),
		asm.StoreMem(asm.RFP, evOff+evProto, asm.R7, asm.Byte).WithSymbol(label + "_done"),
	}
}

func ipv4(c programConfig) asm.Instructions {
	p := asm.Instructions{asm.Mov.Imm(asm.R2, int32(c.l3Off)).WithSymbol("ipv4")}
	p = append(p, loadBytes(hdrOff, 20)...)
	p = append(p,
		asm.JNE.Imm(asm.R0, 0, "invalid"),
		asm.StoreImm(asm.RFP, evOff+evFamily, 4, asm.Byte),
		asm.StoreImm(asm.RFP, evOff+evDst+10, 0xffff, asm.Half),
		asm.StoreImm(asm.RFP, evOff+evSrc+10, 0xffff, asm.Half),
	)
	p = append(p, copyWords(evOff+evDst+12, hdrOff+16, 4)...)
	p = append(p, copyWords(evOff+evSrc+12, hdrOff+12, 4)...)
	p = append(p,
		asm.LoadMem(asm.R8, asm.RFP, hdrOff+9, asm.Byte),
		asm.LoadMem(asm.R9, asm.RFP, hdrOff, asm.Byte),
		asm.And.Imm(asm.R9, 0xf),
		asm.LSh.Imm(asm.R9, 2),
		asm.JLT.Imm(asm.R9, 20, "invalid"),
		asm.Add.Imm(asm.R9, int32(c.l3Off)),
	)
	p = append(p, classify("v4class", 1)...)
	p = append(p, asm.JEq.Imm(asm.R7, 0, "invalid"))
	// A later fragment has no transport header: decide on address and
	// protocol with port 0, as for ICMP.
	p = append(p,
		asm.LoadMem(asm.R1, asm.RFP, hdrOff+6, asm.Half),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.And.Imm(asm.R1, 0x1fff),
		asm.JNE.Imm(asm.R1, 0, "lookup"),
		asm.Ja.Label("transport"),
	)
	return p
}

func ipv6(c programConfig) asm.Instructions {
	p := asm.Instructions{asm.Mov.Imm(asm.R2, int32(c.l3Off)).WithSymbol("ipv6")}
	p = append(p, loadBytes(hdrOff, 40)...)
	p = append(p,
		asm.JNE.Imm(asm.R0, 0, "invalid"),
		asm.StoreImm(asm.RFP, evOff+evFamily, 6, asm.Byte),
	)
	p = append(p, copyWords(evOff+evDst, hdrOff+24, 16)...)
	p = append(p, copyWords(evOff+evSrc, hdrOff+8, 16)...)
	p = append(p,
		asm.LoadMem(asm.R8, asm.RFP, hdrOff+6, asm.Byte),
		asm.Mov.Imm(asm.R9, int32(c.l3Off+40)),
	)
	p = append(p, classify("v6class", 58)...)
	// Extension headers are not walked: such packets are "invalid
	// destination" (R7 0) unless they are ICMPv6 neighbour discovery.
	p = append(p, asm.JNE.Imm(asm.R7, 3, "transport"))
	p = append(p, asm.Mov.Reg(asm.R2, asm.R9))
	p = append(p, loadBytes(hdrOff, 1)...)
	p = append(p,
		asm.JNE.Imm(asm.R0, 0, "invalid"),
		// Router and neighbour discovery (types 133-137) is the kernel's
		// own link-local traffic; without it no IPv6 packet leaves.
		asm.LoadMem(asm.R1, asm.RFP, hdrOff, asm.Byte),
		asm.JLT.Imm(asm.R1, 133, "lookup"),
		asm.JGT.Imm(asm.R1, 137, "lookup"),
		asm.Mov.Imm(asm.R0, tcxNext),
		asm.Return(),
	)
	return p
}

// transport reads ports (and TCP flags) at offset R9 for protocol R7.
func transport(c programConfig) asm.Instructions {
	p := asm.Instructions{
		asm.JEq.Imm(asm.R7, 0, "invalid").WithSymbol("transport"),
		asm.JEq.Imm(asm.R7, 3, "lookup"),
		asm.Mov.Reg(asm.R2, asm.R9),
		asm.JEq.Imm(asm.R7, 2, "udp"),
	}
	p = append(p, loadBytes(hdrOff, 14)...)
	p = append(p,
		asm.JNE.Imm(asm.R0, 0, "invalid"),
		asm.LoadMem(asm.R1, asm.RFP, hdrOff+13, asm.Byte),
		asm.StoreMem(asm.RFP, evOff+evFlags, asm.R1, asm.Byte),
		asm.Ja.Label("ports"),
	)
	udp := loadBytes(hdrOff, 4)
	udp[0] = udp[0].WithSymbol("udp")
	p = append(p, udp...)
	p = append(p,
		asm.JNE.Imm(asm.R0, 0, "invalid"),
		asm.LoadMem(asm.R1, asm.RFP, hdrOff, asm.Half).WithSymbol("ports"),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.StoreMem(asm.RFP, evOff+evSport, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.RFP, hdrOff+2, asm.Half),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.StoreMem(asm.RFP, evOff+evDport, asm.R1, asm.Half),
	)
	return p
}

// lookup finds the destination's clause list and walks it, unrolled.
func lookup(c programConfig) asm.Instructions {
	p := asm.Instructions{asm.StoreImm(asm.RFP, keyOff, 128, asm.Word).WithSymbol("lookup")}
	p = append(p, copyWords(keyOff+4, evOff+evDst, 16)...)
	p = append(p,
		asm.LoadMapPtr(asm.R1, c.outerFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, zeroOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "nopolicy"),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "nopolicy"),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadMem(asm.R1, asm.R8, 4, asm.Word),
		asm.StoreMem(asm.RFP, evOff+evGen, asm.R1, asm.Word),
		asm.LoadMem(asm.R9, asm.R8, 0, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, evOff+evProto, asm.Byte),
		asm.LoadMem(asm.R3, asm.RFP, evOff+evDport, asm.Half),
	)
	for i := 0; i < MaxClauses; i++ {
		base := int16(8 + i*clauseSize)
		next := fmt.Sprintf("clause%d", i+1)
		check := fmt.Sprintf("ports%d", i)
		p = append(p,
			asm.JLE.Imm(asm.R9, int32(i), "nopolicy").WithSymbol(fmt.Sprintf("clause%d", i)),
			asm.LoadMem(asm.R4, asm.R8, base, asm.Byte),
			asm.JEq.Imm(asm.R4, 0, check),
			asm.JNE.Reg(asm.R4, asm.R2, next),
			asm.LoadMem(asm.R4, asm.R8, base+2, asm.Half).WithSymbol(check),
			asm.JLT.Reg(asm.R3, asm.R4, next),
			asm.LoadMem(asm.R4, asm.R8, base+4, asm.Half),
			asm.JGT.Reg(asm.R3, asm.R4, next),
			asm.LoadMem(asm.R4, asm.R8, base+6, asm.Half),
			asm.StoreMem(asm.RFP, evOff+evRule, asm.R4, asm.Word),
			asm.LoadMem(asm.R4, asm.R8, base+1, asm.Byte),
			asm.Ja.Label("verdict"),
		)
	}
	// Past the last clause: the table always ends with a catch-all, so
	// this is a table the program does not understand.
	p = append(p, asm.Ja.Label("nopolicy").WithSymbol(fmt.Sprintf("clause%d", MaxClauses)))
	return p
}

func verdicts(c programConfig) asm.Instructions {
	p := asm.Instructions{
		asm.StoreImm(asm.RFP, evOff+evRule, ruleInvalid, asm.Word).WithSymbol("invalid"),
		asm.Ja.Label("drop"),
		asm.StoreImm(asm.RFP, evOff+evRule, ruleNoPolicy, asm.Word).WithSymbol("nopolicy"),
		asm.Ja.Label("drop"),
		asm.StoreMem(asm.RFP, evOff+evVerdict, asm.R4, asm.Byte).WithSymbol("verdict"),
		asm.JEq.Imm(asm.R4, 0, "drop"),
	}
	if c.newConns {
		p = append(p,
			asm.JEq.Imm(asm.R7, 2, "udpnew"),
			asm.JNE.Imm(asm.R7, 1, "pass"),
			// A SYN without ACK opens a connection: reported unless its
			// 5-tuple was within synWindow (a retransmission).
			asm.LoadMem(asm.R1, asm.RFP, evOff+evFlags, asm.Byte),
			asm.And.Imm(asm.R1, 0x12),
			asm.JNE.Imm(asm.R1, 0x02, "pass"),
			asm.LoadMapPtr(asm.R1, c.flowsFD),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, evOff),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "flownew"),
			asm.LoadMem(asm.R8, asm.R0, 0, asm.DWord),
			asm.FnKtimeGetNs.Call(),
			asm.Sub.Reg(asm.R0, asm.R8),
			asm.LoadImm(asm.R1, synWindow, asm.DWord),
			asm.JLT.Reg(asm.R0, asm.R1, "pass"),
			asm.Ja.Label("flownew"),
			// A UDP flow is new when its 5-tuple (the event's first
			// flowKeySize bytes) is not in the LRU map yet.
			asm.LoadMapPtr(asm.R1, c.flowsFD).WithSymbol("udpnew"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, evOff),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "pass"),
			asm.FnKtimeGetNs.Call().WithSymbol("flownew"),
			asm.StoreMem(asm.RFP, stampOff, asm.R0, asm.DWord),
			asm.LoadMapPtr(asm.R1, c.flowsFD),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, evOff),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, stampOff),
			asm.Mov.Imm(asm.R4, 0), // BPF_ANY
			asm.FnMapUpdateElem.Call(),
		)
		report := emit(c)
		report[0] = report[0].WithSymbol("report")
		p = append(p, report...)
	}
	p = append(p, asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("pass"), asm.Return())
	drop := emit(c)
	drop[0] = drop[0].WithSymbol("drop")
	p = append(p, drop...)
	p = append(p, asm.Mov.Imm(asm.R0, tcxDrop), asm.Return())
	return p
}

// emit copies the event into the ring buffer; a full ring loses the
// event, never the verdict.
func emit(c programConfig) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, c.eventsFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, evOff),
		asm.Mov.Imm(asm.R3, eventSize),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
	}
}
