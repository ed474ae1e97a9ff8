package node

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
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

	// paths are the peers' by overlay address (setPath): toward a peer
	// relayed over QUIC the per-peer MTU applies (mtu.go), and a packet
	// to a trimmed peer (Path.restore set) puts it back into WireGuard
	// first (trim.go).
	mu      sync.RWMutex // guards paths
	paths   map[netip.Addr]*Path
	trimmed atomic.Int32 // how many peers are trimmed: Read's check without the lock

	replies   chan []byte // to writeLoop: the stack may not be entered from Read
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	rejected atomic.Uint64

	mtu peerMTUs // the per-peer MTU toward peers relayed over QUIC (mtu.go)

	// onlineHook, if set (tests), runs as an address is marked online
	// again, before its packets pass.
	onlineHook func(netip.Addr)

	// gate is the Bind's (answer.go), set before WireGuard reads; nil: none.
	gate *answerGate
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
			if u.onlineHook != nil {
				u.onlineHook(addr)
			}
			delete(next, addr)
		}
		if u.offline.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Read implements tun.Device. Packets for offline peers are answered and
// left out of the batch (size 0, which WireGuard skips); packets to peers
// relayed over QUIC are held to QUICRelayMTU (mtu.go).
func (u *unreachableTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(u.mtu.pending) > 0 {
		return u.mtu.takePending(bufs, sizes, offset, 0), nil
	}
	if u.gate != nil {
		u.gate.enterRead()
	}
	n, err := u.Device.Read(bufs, sizes, offset)
	if u.gate != nil {
		u.holdForAnswers(bufs, sizes, offset, n)
	}
	u.restoreTrimmed(bufs, sizes, offset, n)
	u.rejectOffline(bufs, sizes, offset, n)
	if u.mtu.quic() {
		n = u.limitOutbound(bufs, sizes, offset, n)
	}
	return n, err
}

// Write implements tun.Device: SYNs from peers relayed over QUIC get
// their MSS clamped (mtu.go) on the way in.
func (u *unreachableTUN) Write(bufs [][]byte, offset int) (int, error) {
	if u.mtu.quic() {
		u.limitInbound(bufs, offset)
	}
	return u.Device.Write(bufs, offset)
}

func (u *unreachableTUN) rejectOffline(bufs [][]byte, sizes []int, offset, n int) {
	set := u.offline.Load()
	if set == nil || len(*set) == 0 {
		return
	}
	for i := range n {
		pkt := bufs[i][offset : offset+sizes[i]]
		_, dst, ok := ipAddrs(pkt)
		if !ok {
			continue
		}
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
// packet (see icmpv4Error).
func hostUnreachable(pkt []byte) []byte { return icmpv4Error(pkt, 1, 0) }
