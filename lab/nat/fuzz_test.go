package nat

import (
	"net/netip"
	"testing"
	"time"
)

// FuzzProcess feeds arbitrary bytes through both directions of a NAT. Process
// must never panic, must leave a dropped packet untouched, and must keep the
// packet's length.
func FuzzProcess(f *testing.F) {
	in, out := ap("192.168.1.10:4000"), ap("198.51.100.7:3478")
	f.Add(udpPkt(in, out), false)
	f.Add(udpPkt(out, ap("203.0.113.1:4000")), true)
	f.Add(tcpPkt(in, out, tcpSYN), false)
	f.Add(icmpEcho(icmpEchoRequest, in.Addr(), out.Addr(), 7), false)
	f.Add(icmpError(3, out.Addr(), public, udpPkt(ap("203.0.113.1:4000"), out)), true)
	f.Add([]byte{0x45}, false)
	frags := split(bigUDP(in, out, 2000), 1480)
	f.Add(frags[0], false)
	f.Add(frags[1], false)

	f.Fuzz(func(t *testing.T, pkt []byte, inbound bool) {
		for _, name := range ProfileNames() {
			cfg, err := Profile(name)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Public = public
			cfg.Hairpin = true
			n, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			// Prime a mapping so inbound packets can reach the translation path.
			n.Process(now, udpPkt(in, out), FromInside)

			dir := FromInside
			if inbound {
				dir = FromOutside
			}
			p := append([]byte(nil), pkt...)
			orig := append([]byte(nil), pkt...)
			res := n.Process(now, p, dir)
			if len(p) != len(orig) {
				t.Fatalf("%s: packet length changed", name)
			}
			if res.Verdict != Forward && string(p) != string(orig) {
				t.Fatalf("%s: dropped packet was modified (%s)", name, res.Reason)
			}
			if res.Verdict != Forward && res.Reason == "" {
				t.Fatalf("%s: drop without a reason", name)
			}
		}
	})
}

// BenchmarkProcess measures one outbound and one inbound translation of an
// established UDP flow, the NAT's hot path in the fabric.
func BenchmarkProcess(b *testing.B) {
	cfg, err := Profile("port-restricted-cone")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Public = public
	n, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	in, remote := ap("192.168.1.10:4000"), ap("198.51.100.7:3478")
	now := time.Unix(1000, 0)
	outPkt := udpPkt(in, remote)
	tmp := append([]byte(nil), outPkt...)
	if r := n.Process(now, tmp, FromInside); r.Verdict != Forward {
		b.Fatal(r.Reason)
	}
	ext, _ := endpoints(tmp)
	inPkt := udpPkt(remote, ext)
	o := make([]byte, len(outPkt))
	i := make([]byte, len(inPkt))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		copy(o, outPkt)
		if n.Process(now, o, FromInside).Verdict != Forward {
			b.Fatal("outbound dropped")
		}
		copy(i, inPkt)
		if n.Process(now, i, FromOutside).Verdict != Forward {
			b.Fatal("inbound dropped")
		}
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "pps")
}

// TestProcessDoesNotAllocate guards the hot path: translating an established
// flow must not allocate, or the fabric's packet rate collapses under GC.
func TestProcessDoesNotAllocate(t *testing.T) {
	n := newNAT(t, Config{Mapping: EndpointIndependent, Filtering: AddressAndPortDependent})
	in, remote := ap("192.168.1.10:4000"), ap("198.51.100.7:3478")
	now := time.Unix(1000, 0)
	ext, _ := sendOut(t, n, now, in, remote)
	out, back := udpPkt(in, remote), udpPkt(remote, ext)
	o, i := make([]byte, len(out)), make([]byte, len(back))
	allocs := testing.AllocsPerRun(200, func() {
		copy(o, out)
		copy(i, back)
		if n.Process(now, o, FromInside).Verdict != Forward || n.Process(now, i, FromOutside).Verdict != Forward {
			t.Fatal("established flow dropped")
		}
	})
	if allocs != 0 {
		t.Fatalf("Process allocates %.1f times per round trip, want 0", allocs)
	}
}

func TestSetFirewall(t *testing.T) {
	n := newNAT(t, Config{Mapping: EndpointIndependent, Filtering: EndpointIndependent})
	now := time.Unix(1000, 0)
	in, remote := ap("192.168.1.10:4000"), ap("198.51.100.7:3478")
	_, res := sendOut(t, n, now, in, remote)
	if res.Verdict != Forward {
		t.Fatal(res.Reason)
	}
	if err := n.SetFirewall(Firewall{Rules: []Rule{{Action: Deny, Proto: UDP, Dst: netip.MustParsePrefix("198.51.100.7/32")}}}); err != nil {
		t.Fatal(err)
	}
	if _, res := sendOut(t, n, now, in, remote); res.Verdict != Drop || !res.Firewall {
		t.Fatalf("not blocked: %+v", res)
	}
	if _, res := sendOut(t, n, now, in, ap("198.51.100.8:3478")); res.Verdict != Forward {
		t.Fatalf("other destinations blocked too: %s", res.Reason)
	}
	if err := n.SetFirewall(Firewall{Rules: []Rule{{Action: Action(9)}}}); err == nil {
		t.Fatal("invalid rules accepted")
	}
	if err := n.SetFirewall(Firewall{}); err != nil {
		t.Fatal(err)
	}
	if _, res := sendOut(t, n, now, in, remote); res.Verdict != Forward {
		t.Fatalf("still blocked after clearing: %s", res.Reason)
	}
}
