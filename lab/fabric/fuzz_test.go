package fabric

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/latticelab/lattice/internal/inet"
)

// ipv4Frame builds an Ethernet frame carrying an IPv4 packet with a valid
// header checksum (the transport checksum is left zero).
func ipv4Frame(dst, src mac, proto byte, from, to netip.AddrPort, payload int) []byte {
	l4 := 8
	if proto == protoTCP {
		l4 = 20
	}
	f := make([]byte, ethHeaderLen+20+l4+payload)
	writeEth(f, dst, src, etherTypeIPv4)
	p := f[ethHeaderLen:]
	p[0], p[8], p[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:16], from.Addr().AsSlice())
	copy(p[16:20], to.Addr().AsSlice())
	binary.BigEndian.PutUint16(p[20:], from.Port())
	binary.BigEndian.PutUint16(p[22:], to.Port())
	switch proto {
	case protoUDP:
		binary.BigEndian.PutUint16(p[24:], uint16(8+payload))
	case protoTCP:
		p[32] = 5 << 4
		p[33] = 0x02 // SYN
	case protoICMP:
		p[20], p[21] = 8, 0
	}
	inet.SetIPv4Checksum(p)
	return f
}

// total counts the packets the router disposed of. A ping to the router is
// counted twice, as Local and as its forwarded (or dropped) reply, so Local
// is left out.
func (s RouterStats) total() uint64 {
	return s.Forwarded + s.Malformed + s.TTL + s.NoRoute + s.NoNeighbor + s.TooBig + s.NAT + s.Firewall + s.Other
}

// FuzzRouterInput feeds arbitrary frames to a NAT router's inside and
// outside interfaces. The router must not panic, and must account for
// every frame exactly once: forwarded, answered, or dropped and counted.
//
// The router stands alone, so nothing but the fuzzer sends it frames:
// forwarded frames find no neighbour and are counted as such.
func FuzzRouterInput(f *testing.F) {
	fab, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fab.Close() })
	for _, n := range []NetworkConfig{{Name: "lan", Prefix: lan}, {Name: "internet", Prefix: internet}} {
		if _, err := fab.AddNetwork(n); err != nil {
			f.Fatal(err)
		}
	}
	cfg := profile(f, "port-restricted-cone")
	r, err := fab.AddRouter(RouterConfig{Name: "nat", Interfaces: []InterfaceConfig{
		{Name: "lan", Network: "lan", Addr: ip("192.168.1.1")},
		{Name: "wan", Network: "internet", Addr: ip("203.0.113.10")},
	}, Uplink: "wan", NAT: cfg})
	if err != nil {
		f.Fatal(err)
	}
	lanIfc, wanIfc := r.Interface("lan"), r.Interface("wan")
	host, srv := netip.MustParseAddrPort("192.168.1.2:4000"), netip.MustParseAddrPort("203.0.113.100:3478")
	pub := netip.MustParseAddrPort("203.0.113.10:4000")
	var other mac
	f.Add(ipv4Frame(lanIfc.mac, other, protoUDP, host, srv, 100), false)
	f.Add(ipv4Frame(lanIfc.mac, other, protoTCP, host, srv, 0), false)
	f.Add(ipv4Frame(lanIfc.mac, other, protoICMP, host, netip.AddrPortFrom(ip("192.168.1.1"), 0), 32), false)
	f.Add(ipv4Frame(lanIfc.mac, other, protoUDP, host, pub, 10), false) // hairpin
	f.Add(ipv4Frame(wanIfc.mac, other, protoUDP, srv, pub, 100), true)
	f.Add(ipv4Frame(wanIfc.mac, other, protoICMP, srv, netip.AddrPortFrom(ip("203.0.113.10"), 0), 8), true)
	f.Add([]byte{1, 2, 3}, false)
	big := ipv4Frame(lanIfc.mac, other, protoUDP, host, srv, 3000)
	f.Add(big, false) // fragmented: DF clear
	big = append([]byte(nil), big...)
	big[ethHeaderLen+6] = 0x40 // DF: fragmentation needed
	inet.SetIPv4Checksum(big[ethHeaderLen:])
	f.Add(big, false)
	f.Fuzz(func(t *testing.T, frame []byte, outside bool) {
		in := lanIfc
		if outside {
			in = wanIfc
		}
		st := r.Stats()
		fr := getFrame(len(frame))
		copy(fr, frame)
		r.input(in, fr)
		now := r.Stats()
		// A packet split into fragments is counted as Fragmented, and each
		// fragment as it goes; an ICMP error the router sent, as forwarded.
		got := now.total() - st.total() - (now.ICMPSent - st.ICMPSent)
		if now.Fragmented == st.Fragmented && got != 1 || now.Fragmented != st.Fragmented && got < 2 {
			t.Fatalf("frame accounted %d times: %+v", got, now)
		}
	})
}

// FuzzUDPDeliver feeds arbitrary frames to a host's UDP sockets, the first
// code every frame a host receives meets. A frame is either taken (queued
// or counted as dropped) or left for gVisor, untouched; nothing panics.
func FuzzUDPDeliver(f *testing.F) {
	w := newWorld(f, Config{})
	h := w.server
	pc, err := h.ListenPacket(f.Context(), "udp4", ":3478")
	if err != nil {
		f.Fatal(err)
	}
	defer pc.Close()
	var m mac
	f.Add(ipv4Frame(m, m, protoUDP, netip.MustParseAddrPort("198.51.100.1:5000"), netip.MustParseAddrPort("203.0.113.100:3478"), 20))
	f.Add(ipv4Frame(m, m, protoUDP, netip.MustParseAddrPort("198.51.100.1:5000"), netip.MustParseAddrPort("203.0.113.101:3478"), 0))
	f.Add(ipv4Frame(m, m, protoTCP, netip.MustParseAddrPort("198.51.100.1:5000"), netip.MustParseAddrPort("203.0.113.100:3478"), 0))
	f.Add([]byte{})
	buf := make([]byte, 70000)
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr := getFrame(len(frame))
		copy(fr, frame)
		if !h.udp.deliver(fr) {
			if string(fr) != string(frame) {
				t.Fatal("a frame left for gVisor was modified")
			}
			putFrame(fr)
		}
		// Drain whatever was queued.
		_ = pc.SetReadDeadline(time.Now())
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				break
			}
		}
	})
}

// FuzzReassembly feeds arbitrary frames to a host's reassembler, which
// takes the UDP fragments a host receives: it must never panic, keep at
// most reasmMaxFlows datagrams, and return only whole, unfragmented
// datagrams.
func FuzzReassembly(f *testing.F) {
	var other mac
	frame := ipv4Frame(other, other, protoUDP, netip.MustParseAddrPort("203.0.113.1:4000"), netip.MustParseAddrPort("203.0.113.100:7"), 3000)
	frags, err := fragmentIPv4(frame[:ethHeaderLen], frame[ethHeaderLen:], 1280)
	if err != nil {
		f.Fatal(err)
	}
	for _, fr := range frags {
		f.Add(append([]byte(nil), fr...), append([]byte(nil), frags[len(frags)-1]...))
	}
	f.Add([]byte{1, 2, 3}, []byte{})
	// A header with options (record route, EOL), cut short of its length.
	withOpts := append(append([]byte(nil), frags[0][:ethHeaderLen+20]...), 7, 7, 4, 0, 0, 0, 0, 0)
	header.IPv4(withOpts[ethHeaderLen:]).SetHeaderLength(28)
	f.Add(withOpts, withOpts[:ethHeaderLen+24])
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var r reassembler
		now := time.Unix(1000, 0)
		for _, in := range [][]byte{a, b, a} {
			fr := getFrame(len(in))
			copy(fr, in)
			whole, ok := r.add(fr, now)
			if !ok {
				putFrame(fr)
				continue
			}
			if len(r.flows) > reasmMaxFlows {
				t.Fatalf("%d flows", len(r.flows))
			}
			if whole != nil {
				ip := header.IPv4(whole[ethHeaderLen:])
				if ip.More() || ip.FragmentOffset() != 0 || int(ip.TotalLength()) != len(ip) {
					t.Fatalf("not a whole datagram: %x", whole)
				}
				putFrame(whole)
			}
		}
	})
}

// TestFragmentReassemble: a datagram split for a 1280-byte link and
// delivered out of order, with a duplicate, comes back as it was.
func TestFragmentReassemble(t *testing.T) {
	var other mac
	frame := ipv4Frame(other, other, protoUDP, netip.MustParseAddrPort("203.0.113.1:4000"), netip.MustParseAddrPort("203.0.113.100:7"), 3000)
	for i := range 3000 {
		frame[ethHeaderLen+28+i] = byte(i)
	}
	inet.SetIPv4Checksum(frame[ethHeaderLen:])
	frags, err := fragmentIPv4(frame[:ethHeaderLen], frame[ethHeaderLen:], 1280)
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) != 3 {
		t.Fatalf("%d fragments, want 3", len(frags))
	}
	for _, fr := range frags {
		if len(fr)-ethHeaderLen > 1280 {
			t.Fatalf("fragment of %d bytes", len(fr)-ethHeaderLen)
		}
	}
	var r reassembler
	now := time.Unix(1000, 0)
	var whole []byte
	for _, i := range []int{2, 0, 2, 1} {
		w, ok := r.add(append([]byte(nil), frags[i]...), now)
		if !ok {
			t.Fatalf("fragment %d not taken", i)
		}
		if w != nil {
			whole = w
		}
	}
	if string(whole) != string(frame) {
		t.Fatalf("reassembled datagram differs")
	}
	if len(r.flows) != 0 {
		t.Fatalf("%d flows left", len(r.flows))
	}
}

// optionsFrame is a 1500-byte UDP datagram in a frame whose IP header
// carries opts (record route, not copied into later fragments; router
// alert, copied; EOL), its payload numbered by byte.
func optionsFrame() (frame, opts []byte) {
	plain := ipv4Frame(mac{2, 0, 0, 0, 0, 1}, mac{2, 0, 0, 0, 0, 2}, protoUDP, netip.MustParseAddrPort("203.0.113.1:4000"), netip.MustParseAddrPort("203.0.113.100:7"), 1500)
	opts = []byte{7, 7, 4, 0, 0, 0, 0, 148, 4, 0, 0, 0}
	frame = append(append(append([]byte(nil), plain[:ethHeaderLen+20]...), opts...), plain[ethHeaderLen+20:]...)
	for i := ethHeaderLen + 20 + len(opts) + 8; i < len(frame); i++ {
		frame[i] = byte(i)
	}
	p := header.IPv4(frame[ethHeaderLen:])
	p.SetHeaderLength(uint8(20 + len(opts)))
	p.SetTotalLength(uint16(len(p)))
	inet.SetIPv4Checksum(p)
	return frame, opts
}

// TestReassembleWithOptions: a UDP datagram with IP options, split by a
// router (later fragments carry only the copied options, so their headers
// are shorter), reaches the host's UDP socket whole, with the first
// fragment's header and every option.
func TestReassembleWithOptions(t *testing.T) {
	frame, _ := optionsFrame()
	p := header.IPv4(frame[ethHeaderLen:])
	frags, err := fragmentIPv4(frame[:ethHeaderLen], p, 576)
	if err != nil {
		t.Fatal(err)
	}
	var r reassembler
	now := time.Unix(1000, 0)
	var whole []byte
	for _, i := range []int{1, 2, 0} {
		w, ok := r.add(append([]byte(nil), frags[i]...), now)
		if !ok {
			t.Fatalf("fragment %d (%d-byte header) not taken for reassembly", i, header.IPv4(frags[i][ethHeaderLen:]).HeaderLength())
		}
		if w != nil {
			whole = w
		}
	}
	if string(whole) != string(frame) {
		t.Fatalf("reassembled datagram differs:\n got %x\nwant %x", whole, frame)
	}
}

// TestFragmentPastDatagramLimit: a fragment whose data reaches past the
// 65535-byte datagram limit is refused, not split into fragments whose
// offsets wrap to the datagram's start.
func TestFragmentPastDatagramLimit(t *testing.T) {
	var other mac
	frame := ipv4Frame(other, other, protoUDP, netip.MustParseAddrPort("203.0.113.1:4000"), netip.MustParseAddrPort("203.0.113.100:7"), 1000)
	ip := header.IPv4(frame[ethHeaderLen:])
	ip.SetFlagsFragmentOffset(0, 65000)
	inet.SetIPv4Checksum(ip)
	frags, err := fragmentIPv4(frame[:ethHeaderLen], frame[ethHeaderLen:], 576)
	if err == nil {
		for _, fr := range frags {
			t.Errorf("fragment at offset %d", header.IPv4(fr[ethHeaderLen:]).FragmentOffset())
		}
		t.Fatal("a fragment ending past byte 65535 was split")
	}
	if !strings.Contains(err.Error(), "65535") {
		t.Errorf("error %q does not name the limit", err)
	}
	// The largest legal fragment still splits.
	frame = ipv4Frame(other, other, protoUDP, netip.MustParseAddrPort("203.0.113.1:4000"), netip.MustParseAddrPort("203.0.113.100:7"), 0xffff-20-64000-8)
	ip = header.IPv4(frame[ethHeaderLen:])
	ip.SetFlagsFragmentOffset(0, 64000)
	inet.SetIPv4Checksum(ip)
	if _, err := fragmentIPv4(frame[:ethHeaderLen], frame[ethHeaderLen:], 576); err != nil {
		t.Fatalf("a fragment ending at byte 65535: %v", err)
	}
}

// TestFragmentWithOptions: a packet with IP options is split too, each
// fragment in a frame behind the packet's Ethernet header; the first
// fragment keeps every option, later ones only those with the copied bit
// (RFC 791 section 3.1).
func TestFragmentWithOptions(t *testing.T) {
	frame, opts := optionsFrame()
	p := header.IPv4(frame[ethHeaderLen:])

	frags, err := fragmentIPv4(frame[:ethHeaderLen], p, 576)
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) != 3 {
		t.Fatalf("%d fragments, want 3", len(frags))
	}
	var data []byte
	for i, fr := range frags {
		if string(fr[:ethHeaderLen]) != string(frame[:ethHeaderLen]) {
			t.Errorf("fragment %d: ethernet header %x", i, fr[:ethHeaderLen])
		}
		ip := header.IPv4(fr[ethHeaderLen:])
		hl := int(ip.HeaderLength())
		wantOpts := []byte{148, 4, 0, 0}
		if i == 0 {
			wantOpts = opts
		}
		if string(ip[20:hl]) != string(wantOpts) {
			t.Errorf("fragment %d: options %x, want %x", i, ip[20:hl], wantOpts)
		}
		if len(ip) > 576 || int(ip.TotalLength()) != len(ip) || !ip.IsChecksumValid() {
			t.Errorf("fragment %d: %d bytes, total length %d, checksum valid %v", i, len(ip), ip.TotalLength(), ip.IsChecksumValid())
		}
		if int(ip.FragmentOffset()) != len(data) || ip.More() != (i < len(frags)-1) {
			t.Errorf("fragment %d: offset %d MF %v", i, ip.FragmentOffset(), ip.More())
		}
		data = append(data, ip[hl:]...)
		putFrame(fr)
	}
	if string(data) != string(p[20+len(opts):]) {
		t.Error("fragments do not reassemble to the packet's data")
	}
}
