package bpf

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/policy"
)

// loaded loads the program and a table without attaching them, for
// BPF_PROG_TEST_RUN.
func loaded(tb testing.TB, p *policy.Policy, in compileInput) *Filter {
	tb.Helper()
	requireKernel(tb)
	f := &Filter{cfg: Config{MaxEntries: 16384, HostAddrs: in.hosts}, labels: map[uint32][]string{}, done: make(chan struct{})}
	f.log = slog.New(slog.DiscardHandler)
	require.NoError(tb, f.load(false))
	tb.Cleanup(func() { _ = f.closeObjects() })
	require.NoError(tb, f.Reload(p, in.peers))
	return f
}

// frame builds an Ethernet frame from 10.0.0.1 / fd00::1 to dst.
func frame(dst netip.Addr, proto policy.Proto, port uint16) []byte {
	var l4 []byte
	var ipProto byte
	switch proto {
	case policy.TCP:
		l4 = make([]byte, 20)
		l4[12], l4[13] = 5<<4, 0x02
		ipProto = 6
	case policy.UDP:
		l4 = make([]byte, 8)
		ipProto = 17
	case policy.ICMP:
		l4 = make([]byte, 8)
		l4[0], ipProto = 8, 1
	}
	if proto != policy.ICMP {
		binary.BigEndian.PutUint16(l4[0:], 40000)
		binary.BigEndian.PutUint16(l4[2:], port)
	}
	eth := make([]byte, 14)
	var ip []byte
	if dst.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip = make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, ipProto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		copy(ip[12:], []byte{10, 0, 0, 1})
		d := dst.As4()
		copy(ip[16:], d[:])
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		if proto == policy.ICMP {
			ipProto, l4[0] = 58, 128
		}
		ip = make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, ipProto, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[8], ip[23] = 0xfd, 1
		d := dst.As16()
		copy(ip[24:], d[:])
	}
	return append(append(eth, ip...), l4...)
}

// TestProgramMatchesDecide runs the loaded program on packets to the
// addresses around every key and checks its verdict against
// Policy.Decide: the kernel path and pod mode decide alike.
func TestProgramMatchesDecide(t *testing.T) {
	peers := map[string][]netip.Addr{"web-1": {netip.MustParseAddr("100.64.0.5")}}
	hosts := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	p, err := policy.Parse("p.yaml", []byte(samplePolicy))
	require.NoError(t, err)
	f := loaded(t, p, compileInput{peers: peers, hosts: hosts})
	tab, err := compile(p, compileInput{peers: peers, hosts: hosts})
	require.NoError(t, err)
	runs := 0
	for _, e := range tab.entries {
		for _, a := range []netip.Addr{e.prefix.Addr(), lastAddr(e.prefix)} {
			for _, proto := range []policy.Proto{policy.TCP, policy.UDP, policy.ICMP} {
				for _, port := range []uint16{53, 80, 443, 8080, 9000, 2000} {
					want := p.Decide(dest(p, a, proto, port, peers, hosts))
					ret, err := f.prog.Run(&ebpf.RunOptions{Data: frame(a, proto, port)})
					require.NoError(t, err)
					if got := int32(ret) == tcxNext; got != want.Allow {
						t.Fatalf("%s %s port %d: program returned %d, Decide says %v (%s)", a, proto, port, int32(ret), want.Allow, want.Rule)
					}
					runs++
				}
			}
		}
	}
	require.Greater(t, runs, 500)
}

// BenchmarkProgram is the program's own cost per packet (BPF_PROG_TEST_RUN,
// 1,000 rules) against a program that only returns, in the same run.
func BenchmarkProgram(b *testing.B) {
	var src string
	for i := range benchRules - 1 {
		src += "  - deny: 198.18." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff) + "\n    proto: tcp\n    ports: [22]\n"
	}
	p, err := policy.Parse("bench.yaml", []byte("default: deny\nrules:\n  - allow: 10.9.9.9\n"+src))
	require.NoError(b, err)
	f := loaded(b, p, compileInput{})
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, tcxNext), asm.Return()}})
	require.NoError(b, err)
	defer empty.Close()
	pkt := frame(netip.MustParseAddr("10.9.9.9"), policy.UDP, 443)
	const repeat = 100000
	for b.Loop() {
		_, filt, err := f.prog.Benchmark(pkt, repeat, nil)
		require.NoError(b, err)
		_, base, err := empty.Benchmark(pkt, repeat, nil)
		require.NoError(b, err)
		b.ReportMetric(float64(filt.Nanoseconds()), "ns/pkt-filter")
		b.ReportMetric(float64(base.Nanoseconds()), "ns/pkt-empty")
	}
}

// FuzzProgram feeds arbitrary frames to the loaded program. A frame Go
// reads as an unfragmented IPv4 TCP or UDP packet must get the table's
// verdict for its destination; every other IPv4 or IPv6 frame with a
// protocol outside TCP, UDP and ICMP must be dropped; non-IP passes.
func FuzzProgram(f *testing.F) {
	p, err := policy.Parse("p.yaml", []byte(samplePolicy))
	require.NoError(f, err)
	in := compileInput{peers: map[string][]netip.Addr{"web-1": {netip.MustParseAddr("100.64.0.5")}}}
	prog := loaded(f, p, in)
	tab, err := compile(p, in)
	require.NoError(f, err)
	for _, a := range []string{"93.184.216.34", "10.1.2.3", "169.254.169.254", "1.1.1.1", "2606:4700:4700::1111"} {
		for _, pr := range []policy.Proto{policy.TCP, policy.UDP, policy.ICMP} {
			f.Add(frame(netip.MustParseAddr(a), pr, 443))
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 14 {
			return // the kernel's test run wants a whole Ethernet header
		}
		ret, err := prog.prog.Run(&ebpf.RunOptions{Data: b})
		if errors.Is(err, unix.EINVAL) {
			return // the test-run harness refuses the frame before the program runs
		}
		require.NoError(t, err)
		allow := int32(ret) == tcxNext
		et := binary.BigEndian.Uint16(b[12:])
		if et != 0x0800 && et != 0x86dd {
			require.True(t, allow, "non-IP frame dropped")
			return
		}
		if et != 0x0800 || len(b) < 14+20 {
			return
		}
		ip := b[14:]
		ihl := int(ip[0]&0xf) * 4
		if ihl < 20 || binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
			return
		}
		var pr policy.Proto
		switch ip[9] {
		case 6:
			pr = policy.TCP
		case 17:
			pr = policy.UDP
		case 1:
			return
		default:
			require.False(t, allow, "protocol %d allowed", ip[9])
			return
		}
		l4 := 14 + ihl
		if (pr == policy.TCP && len(b) < l4+14) || (pr == policy.UDP && len(b) < l4+4) {
			require.False(t, allow, "truncated transport header allowed")
			return
		}
		dst := netip.AddrFrom4([4]byte(ip[16:20]))
		want, why := tab.lookup(dst, pr, binary.BigEndian.Uint16(b[l4+2:]))
		require.Equal(t, want, allow, "%s %s: table says %v (%s)", dst, pr, want, why)
	})
}
