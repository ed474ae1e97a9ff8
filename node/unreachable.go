package node

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/latticelab/lattice/internal/inet"
)

// unreachableTUN sits between the overlay interface and WireGuard and
// answers packets for offline peers with ICMP host unreachable (RFC 792
// type 3 code 1), so a connect to a stopped peer fails at once
// (EHOSTUNREACH, in the kernel and in gVisor alike) instead of waiting
// for the client's timeout: WireGuard, which has no peer for the address
// any more, would drop them silently. The source of the ICMP message is
// the offline peer's own address: a packet from one of our own addresses
// arriving on the interface would be a martian to the kernel.
type unreachableTUN struct {
	tun.Device

	offline atomic.Pointer[map[netip.Addr]struct{}] // copy on write
	trimmed trimmedPeers                            // idle peers out of WireGuard (trim.go)

	replies   chan []byte // to writeLoop: the stack may not be entered from Read
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	rejected atomic.Uint64
}

var _ tun.Device = (*unreachableTUN)(nil)

func newUnreachableTUN(dev tun.Device) *unreachableTUN {
	u := &unreachableTUN{Device: dev, replies: make(chan []byte, 64), stop: make(chan struct{}), done: make(chan struct{})}
	go u.writeLoop()
	return u
}

// setOffline marks addr offline (or online again). A nil u (a Device
// with its own interface) does nothing.
func (u *unreachableTUN) setOffline(addr netip.Addr, offline bool) {
	if u == nil {
		return
	}
	for {
		old := u.offline.Load()
		next := map[netip.Addr]struct{}{}
		if old != nil {
			for a := range *old {
				next[a] = struct{}{}
			}
		}
		if offline {
			next[addr] = struct{}{}
		} else {
			delete(next, addr)
		}
		if u.offline.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Read implements tun.Device. Packets for offline peers are answered and
// left out of the batch (size 0, which WireGuard skips).
func (u *unreachableTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := u.Device.Read(bufs, sizes, offset)
	u.restoreTrimmed(bufs, sizes, offset, n)
	set := u.offline.Load()
	if set == nil || len(*set) == 0 {
		return n, err
	}
	for i := range n {
		pkt := bufs[i][offset : offset+sizes[i]]
		if len(pkt) < 20 || pkt[0]>>4 != 4 {
			continue
		}
		dst, _ := netip.AddrFromSlice(pkt[16:20])
		if _, off := (*set)[dst]; !off {
			continue
		}
		sizes[i] = 0
		u.rejected.Add(1)
		if r := hostUnreachable(pkt); r != nil {
			select {
			case u.replies <- r:
			default: // the stack is far behind; the sender retries
			}
		}
	}
	return n, err
}

func (u *unreachableTUN) writeLoop() {
	defer close(u.done)
	for {
		select {
		case <-u.stop:
			return
		case r := <-u.replies:
			_, _ = u.Device.Write([][]byte{r}, device.MessageTransportOffsetContent)
		}
	}
}

// Close implements tun.Device.
func (u *unreachableTUN) Close() error {
	u.closeOnce.Do(func() {
		close(u.stop)
		<-u.done
	})
	return u.Device.Close()
}

// hostUnreachable builds the ICMP host unreachable answer to an IPv4
// packet, with device.MessageTransportOffsetContent bytes of headroom,
// or nil when none is due: no ICMP error about an ICMP error or about a
// fragment other than the first (RFC 1122 3.2.2).
func hostUnreachable(pkt []byte) []byte {
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl {
		return nil
	}
	if binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
		return nil
	}
	if pkt[9] == 1 && len(pkt) > ihl {
		switch pkt[ihl] { // ICMP type
		case 3, 4, 5, 11, 12:
			return nil
		}
	}
	quote := pkt[:min(len(pkt), ihl+8)] // RFC 792: the header and 64 bits of data
	const off = device.MessageTransportOffsetContent
	b := make([]byte, off+20+8+len(quote))
	ip := b[off : off+20]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+8+len(quote)))
	ip[8] = 64 // TTL
	ip[9] = 1  // ICMP
	copy(ip[12:16], pkt[16:20])
	copy(ip[16:20], pkt[12:16])
	binary.BigEndian.PutUint16(ip[10:12], inet.Checksum(ip))
	icmp := b[off+20:]
	icmp[0], icmp[1] = 3, 1 // destination unreachable: host
	copy(icmp[8:], quote)
	binary.BigEndian.PutUint16(icmp[2:4], inet.Checksum(icmp))
	return b
}
