package inet

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// ipv4OptionCopied is the option type bit (RFC 791 section 3.1) that says
// the option goes into every fragment, not only the first.
const ipv4OptionCopied = 0x80

// FragmentIPv4 splits IPv4 packet pkt into fragments of at most mtu bytes
// (RFC 791 section 3.2). Offsets and MF continue those of a packet that is
// a fragment already, and DF is cleared. The first fragment keeps pkt's
// header; later ones carry only the options with the copied bit, padded
// to a multiple of 4 bytes. Each fragment's data is what its own header
// leaves room for, a multiple of 8 bytes but for the last. A packet that
// fits mtu comes back as one fragment.
//
// Each fragment starts headroom bytes into its buffer, which are left for
// the caller (a link header). alloc returns a buffer of length n for one
// fragment; nil means one allocation holds them all. pkt is not changed.
// The errors wrap ErrMalformedIPv4, ErrFragmentMTU or ErrPastDatagramLimit.
func FragmentIPv4(pkt []byte, mtu, headroom int, alloc func(n int) []byte) ([][]byte, error) {
	ip := header.IPv4(pkt)
	if len(pkt) < header.IPv4MinimumSize || ip.HeaderLength() < header.IPv4MinimumSize || int(ip.HeaderLength()) > len(pkt) {
		return nil, fmt.Errorf("fragment ipv4: %w: %d bytes do not hold their header", ErrMalformedIPv4, len(pkt))
	}
	if v := header.IPVersion(pkt); v != header.IPv4Version {
		return nil, fmt.Errorf("fragment ipv4: %w: version %d", ErrMalformedIPv4, v)
	}
	hl, total := int(ip.HeaderLength()), int(ip.TotalLength())
	if total < hl || total > len(pkt) {
		return nil, fmt.Errorf("fragment ipv4: %w: total length %d with a %d-byte header in %d bytes", ErrMalformedIPv4, total, hl, len(pkt))
	}
	var later [header.IPv4MaximumHeaderSize]byte
	laterHL, err := laterHeader(&later, pkt[:hl])
	if err != nil {
		return nil, err
	}
	data := pkt[hl:total]
	base := int(ip.FragmentOffset())
	if hl+base+len(data) > MaxIPv4Datagram {
		return nil, fmt.Errorf("fragment ipv4: %d bytes of data at offset %d: %w", len(data), base, ErrPastDatagramLimit)
	}
	if total > mtu && mtu-hl < 8 {
		return nil, fmt.Errorf("fragment ipv4: mtu %d with a %d-byte header: %w", mtu, hl, ErrFragmentMTU)
	}

	// Count first, so the fragments (and with a nil alloc their bytes)
	// take one allocation each.
	n, size := 0, 0
	for off, h := 0, hl; ; h = laterHL {
		part := fragmentData(len(data)-off, mtu-h)
		n++
		size += headroom + h + part
		if off += part; off == len(data) {
			break
		}
	}
	var block []byte
	if alloc == nil {
		block = make([]byte, size)
	}
	frags := make([][]byte, 0, n)
	hdr := pkt[:hl]
	for off := 0; len(frags) < n; hdr = later[:laterHL] {
		part := fragmentData(len(data)-off, mtu-len(hdr))
		m := headroom + len(hdr) + part
		var buf []byte
		if alloc == nil {
			buf, block = block[:m:m], block[m:]
		} else {
			buf = alloc(m)
		}
		f := header.IPv4(buf[headroom:])
		copy(f, hdr)
		copy(f[len(hdr):], data[off:off+part])
		off += part
		f.SetTotalLength(uint16(len(f)))
		var flags uint8
		if off < len(data) || ip.More() {
			flags = header.IPv4FlagMoreFragments
		}
		f.SetFlagsFragmentOffset(flags, uint16(base+off-part))
		SetIPv4Checksum(f)
		frags = append(frags, buf)
	}
	return frags, nil
}

// fragmentData is how much of left bytes of data a fragment with room
// bytes after its header carries: all of them if they fit, else a
// multiple of 8 (RFC 791: offsets count 8-byte units).
func fragmentData(left, room int) int {
	if left <= room {
		return left
	}
	return room &^ 7
}

// laterHeader writes into dst the header of fragments after the first
// (RFC 791 section 3.1): h's fixed part and its options with the copied
// bit, zero-padded (EOL) to a multiple of 4 bytes, with the IHL to match.
// It returns the length, or an error for options that run past h.
func laterHeader(dst *[header.IPv4MaximumHeaderSize]byte, h []byte) (int, error) {
	n := copy(dst[:], h[:header.IPv4MinimumSize])
options:
	for i := header.IPv4MinimumSize; i < len(h); {
		switch header.IPv4OptionType(h[i]) {
		case header.IPv4OptionListEndType:
			break options
		case header.IPv4OptionNOPType:
			i++
			continue
		}
		if i+1 >= len(h) || h[i+1] < 2 || i+int(h[i+1]) > len(h) {
			return 0, fmt.Errorf("fragment ipv4: %w: option %d at header byte %d runs past the %d-byte header", ErrMalformedIPv4, h[i], i, len(h))
		}
		l := int(h[i+1])
		if h[i]&ipv4OptionCopied != 0 {
			n += copy(dst[n:], h[i:i+l])
		}
		i += l
	}
	n = (n + 3) &^ 3 // dst is zero past what was copied: EOL padding
	header.IPv4(dst[:]).SetHeaderLength(uint8(n))
	return n, nil
}
