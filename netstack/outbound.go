package netstack

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/latticelab/lattice/internal/inet"
)

// queueOut queues a reference to each packet for Read and returns how
// many fit.
func (a *TUNAdapter) queueOut(pkts []*stack.PacketBuffer) int {
	for _, p := range pkts {
		p.IncRef()
	}
	n := a.out.push(pkts)
	bytes := 0
	for _, p := range pkts[:n] {
		bytes += p.Size()
	}
	for _, p := range pkts[n:] {
		p.DecRef()
	}
	a.stats.outPackets.Add(uint64(n))
	a.stats.outBytes.Add(uint64(bytes))
	a.stats.outDropped.Add(uint64(len(pkts) - n))
	return n
}

// Read implements tun.Device: it blocks until gVisor has sent something,
// then fills bufs[i][offset:] with IP packets, splitting GSO segments, and
// sets sizes[i]. It returns at most len(bufs) packets, and at most
// readLimit(MTU) (see there). It returns an error wrapping os.ErrClosed once
// the adapter is closed.
func (a *TUNAdapter) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if len(bufs) > a.readMax {
		bufs = bufs[:a.readMax]
	}
	a.readMu.Lock()
	defer a.readMu.Unlock()
	for {
		if a.closed() {
			a.releaseBacklogLocked()
			return 0, errClosed("read")
		}
		if a.head == len(a.backlog) {
			clear(a.backlog)
			a.head = 0
			var ok bool
			if a.backlog, ok = a.out.take(a.backlog[:0]); !ok {
				continue
			}
		}
		if n := a.fillLocked(bufs, sizes, offset); n > 0 {
			a.stats.outSegments.Add(uint64(n))
			return n, nil
		}
	}
}

// fillLocked writes backlog packets into bufs until either runs out.
func (a *TUNAdapter) fillLocked(bufs [][]byte, sizes []int, offset int) int {
	n := 0
	for ; a.head < len(a.backlog) && n < len(bufs); a.head++ {
		pkt := a.backlog[a.head]
		var done bool
		var k int
		if t := pkt.GSOOptions.Type; t == stack.GSOTCPv4 || t == stack.GSOTCPv6 {
			k, done = a.splitTCPLocked(pkt, bufs[n:], sizes[n:], offset)
		} else {
			k, done = a.copyOut(pkt, bufs[n], sizes[n:], offset), true
		}
		n += k
		if !done {
			break
		}
		pkt.DecRef()
		a.backlog[a.head] = nil
		a.next = 0
	}
	return n
}

func (a *TUNAdapter) releaseBacklogLocked() {
	for _, p := range a.backlog[a.head:] {
		p.DecRef()
	}
	clear(a.backlog)
	a.backlog = a.backlog[:0]
	a.head, a.next = 0, 0
}

// copyOut copies a packet that needs no splitting into buf and returns 1,
// or 0 if it does not fit.
func (a *TUNAdapter) copyOut(pkt *stack.PacketBuffer, buf []byte, sizes []int, offset int) int {
	size := pkt.Size()
	if offset > len(buf) || len(buf)-offset < size {
		a.stats.outDropped.Add(1)
		return 0
	}
	vl, skip := pkt.AsViewList()
	out := buf[offset:]
	for v := vl.Front(); v != nil && len(out) > 0; v = v.Next() {
		b := v.AsSlice()
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		out = out[copy(out, b[skip:]):]
		skip = 0
	}
	sizes[0] = size
	return 1
}

// splitTCPLocked writes the segments of a TCP GSO packet, from segment
// a.next on, into bufs. It reports how many it wrote and whether that
// finished the packet; if not, a.next says where to resume.
//
// Each segment gets the packet's headers with the IP length, IPv4 ID (one
// more per segment, as Linux's TSO does) and header checksum, TCP sequence
// number and checksum adjusted. FIN and PSH stay on the last segment only,
// CWR on the first only (RFC 3168 section 6.1.2: set once per window
// reduction).
func (a *TUNAdapter) splitTCPLocked(pkt *stack.PacketBuffer, bufs [][]byte, sizes []int, offset int) (int, bool) {
	ipHdr := pkt.NetworkHeader().Slice()
	tcpHdr := pkt.TransportHeader().Slice()
	v4 := pkt.GSOOptions.Type == stack.GSOTCPv4
	if len(tcpHdr) < header.TCPMinimumSize || v4 && len(ipHdr) < header.IPv4MinimumSize ||
		!v4 && len(ipHdr) < header.IPv6MinimumSize {
		a.stats.outDropped.Add(1)
		return 0, true
	}
	hdrLen := len(ipHdr) + len(tcpHdr)
	payload := pkt.Data().Size()
	mss := int(pkt.GSOOptions.MSS)
	if mss <= 0 || mss > payload {
		mss = max(payload, 1)
	}
	nseg := max((payload+mss-1)/mss, 1)
	if offset > len(bufs[0]) || len(bufs[0])-offset < hdrLen+min(mss, payload) {
		a.stats.outDropped.Add(1)
		return 0, true
	}

	// The pseudo-header sum without its length, which varies by segment.
	pseudo := inet.PseudoHeaderSum(ipHdr, tcpProto, 0)
	seq := binary.BigEndian.Uint32(tcpHdr[4:])
	flags := tcpHdr[13]
	var id uint16
	if v4 {
		id = binary.BigEndian.Uint16(ipHdr[4:])
	}

	a.slices = payloadSlices(a.slices[:0], pkt)
	var cur sliceCursor
	cur.seek(a.slices, a.next*mss)

	n := 0
	for seg := a.next; seg < nseg; seg++ {
		if n == len(bufs) {
			a.next = seg
			return n, false
		}
		start := seg * mss
		segLen := min(mss, payload-start)
		out := bufs[n][offset:]
		if len(out) < hdrLen+segLen {
			// Only the first buffer was checked above; the
			// caller's buffers are all the same size in practice.
			a.stats.outDropped.Add(1)
			return n, true
		}
		out = out[:hdrLen+segLen]
		copy(out, ipHdr)
		th := out[len(ipHdr):]
		copy(th, tcpHdr)
		cur.copyTo(a.slices, th[len(tcpHdr):])

		ip := out[:len(ipHdr)]
		if v4 {
			h := header.IPv4(ip)
			h.SetTotalLength(uint16(len(out)))
			h.SetID(id + uint16(seg))
			inet.SetIPv4Checksum(h)
		} else {
			binary.BigEndian.PutUint16(ip[4:], uint16(len(out)-header.IPv6MinimumSize))
		}
		binary.BigEndian.PutUint32(th[4:], seq+uint32(start))
		f := flags
		if seg != nseg-1 {
			f &^= uint8(header.TCPFlagFin | header.TCPFlagPsh)
		}
		if seg != 0 {
			f &^= uint8(header.TCPFlagCwr)
		}
		th[13] = f
		th[16], th[17] = 0, 0
		sum := checksum.Checksum(th, checksum.Combine(pseudo, uint16(len(th))))
		binary.BigEndian.PutUint16(th[16:], ^sum)
		sizes[n] = len(out)
		n++
	}
	return n, true
}

// payloadSlices appends pkt's payload, the bytes after its headers, to dst
// as slices of the packet's own storage.
func payloadSlices(dst [][]byte, pkt *stack.PacketBuffer) [][]byte {
	vl, skip := pkt.AsViewList()
	skip += pkt.HeaderSize()
	for v := vl.Front(); v != nil; v = v.Next() {
		b := v.AsSlice()
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		dst = append(dst, b[skip:])
		skip = 0
	}
	return dst
}

// sliceCursor is a read position in a list of byte slices.
type sliceCursor struct {
	i, off int
}

func (c *sliceCursor) seek(s [][]byte, pos int) {
	c.i, c.off = 0, 0
	for c.i < len(s) && pos >= len(s[c.i]) {
		pos -= len(s[c.i])
		c.i++
	}
	c.off = pos
}

// copyTo fills dst from the cursor on and advances it.
func (c *sliceCursor) copyTo(s [][]byte, dst []byte) {
	for len(dst) > 0 && c.i < len(s) {
		k := copy(dst, s[c.i][c.off:])
		dst = dst[k:]
		c.off += k
		if c.off == len(s[c.i]) {
			c.i++
			c.off = 0
		}
	}
}
