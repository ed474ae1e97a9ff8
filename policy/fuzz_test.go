package policy

import (
	"errors"
	"net/netip"
	"testing"
)

var fuzzDests = func() []Dest {
	var out []Dest
	addrs := []string{
		"1.1.1.1", "10.1.2.3", "93.184.216.34", "100.64.5.3", "100.127.255.255",
		"169.254.169.254", "100.100.100.200", "2001:db8::1", "::ffff:1.1.1.1", "fd00:ec2::254", "::",
		"127.0.0.1", "fe80::1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "169.254.1.1", "0.0.0.0",
	}
	for _, a := range addrs {
		for _, proto := range []Proto{TCP, UDP, ICMP, ProtoAny} {
			for _, port := range []uint16{0, 22, 443, 8080, 65535} {
				d := Dest{Addr: netip.MustParseAddr(a), Port: port, Proto: proto}
				out = append(out, d)
				d.Host = true
				out = append(out, d)
				d.Host = false
				d.Overlay, d.Peer = true, "web-1"
				out = append(out, d)
				d.Peer = ""
				out = append(out, d)
			}
		}
	}
	return append(out, Dest{})
}()

func FuzzParse(f *testing.F) {
	seeds := []string{
		"", "# c\n", docExample, mainPolicy, badFile,
		"{default: allow, rules: [{deny: 10.0.0.0/8, ports: [22, 23]}]}",
		"rules:\n  - allow: peer:*\n    proto: tcp\n",
		"rules:\n  - allow: *\n",
		"a: &x 1\nb: *x\n",
		"a: 1\n---\nb: 2\n",
		"rules:\n  - allow: 1.1.1.1\n    ports: [0, 65536, http, 90-80, 1-2-3, -5, 0x50, 1.5, true]\n",
		"allow_metadata: true\ndefault: allow\nrules:\n  - deny: [::/0, 0.0.0.0/0]\n    proto: udp\n",
		"default: allow\nrules:\n  - allow: [127.0.0.1, fe80::/10, 64:ff9b::7f00:0/104]\n    ports: [80]\n  - allow: any\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data)
		if err != nil {
			if p != nil {
				t.Fatal("policy and error both returned")
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error wraps neither ErrInvalid nor ErrTooLarge: %v", err)
			}
			return
		}
		q := p.WithOverlay(netip.MustParsePrefix("10.0.0.0/8"))
		for _, d := range fuzzDests {
			got := p.Decide(d)
			if got.Rule == "" {
				t.Fatalf("Decide(%+v) gave no reason", d)
			}
			if got != p.Decide(d) {
				t.Fatalf("Decide(%+v) not deterministic", d)
			}
			if IsMetadata(d.Addr) && d.Proto != ProtoAny && !p.allowMetadata && got.Rule != "metadata" {
				t.Fatalf("Decide(%+v) = %+v, want metadata denied", d, got)
			}
			i, denied := defaultDenied(d.Addr.Unmap().WithZone(""))
			if (denied || d.Host) && got.Allow && got.Rule == "default allow" && !(p.allowMetadata && denied && defaults[i].Metadata) {
				t.Fatalf("Decide(%+v): default allowed a default-denied address", d)
			}
			if d.Overlay && got.Allow && got.Rule == "default allow" {
				t.Fatalf("Decide(%+v): default allowed an overlay peer", d)
			}
			_ = q.Decide(d)
		}
		_ = p.String()
	})
}
