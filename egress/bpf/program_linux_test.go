package bpf

import (
	"encoding/binary"
	"log/slog"
	"net/netip"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/require"

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
