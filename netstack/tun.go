package netstack

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// BatchSize is the batch TUNAdapter asks wireguard-go for: how many
// buffers wireguard-go hands to one Read. Read returns fewer; see
// readLimit. wireguard-go keeps that many 64 KiB buffers for its TUN
// reader for the device's life (the larger of the Bind's and the TUN's
// batch), so conn.IdealBatchSize (128) held 8 MiB per node. A Read never
// needs more than one UDP GSO send carries (64 datagrams: Linux's
// UDP_MAX_SEGMENTS, wireguard-go's limit, node's gsoMaxSegments), and at
// 64 readLimit still returns whole GSO runs for every MTU from 990 up.
// BenchmarkDataPath/pod at 128, 48 and 16 (docs/PERFORMANCE.md,
// 2026-12-02): the same throughput within the noise. There StdNetBind's
// 128 sets the buffer count; in a node, whose Bind asks for 16, this
// constant does: 4 MiB instead of 8.
const BatchSize = conn.IdealBatchSize / 2

// outQueueLen bounds the packets gVisor has written and wireguard-go has
// not read yet, as a NIC's transmit ring does; beyond it packets are
// dropped and TCP recovers. With GSO an entry holds up to 64 KB, so the
// ring holds far more than any flow's send buffer.
const outQueueLen = 1024

// TUNAdapter is the packet device between a gVisor stack and wireguard-go:
// it implements tun.Device for wireguard-go and, through linkEndpoint,
// stack.LinkEndpoint for gVisor.
//
// Outbound (gVisor → Read): the link endpoint advertises host GSO, so
// gVisor's TCP hands over segments of up to 64 KB with only the pseudo-header
// checksum filled in. Read splits each into MTU-sized packets, writing
// headers and checksums straight into wireguard-go's buffers, as many per
// call as wireguard-go can send in one UDP GSO datagram (readLimit).
//
// Inbound (Write → gVisor): consecutive in-order TCP segments of one flow in
// a batch are coalesced into one large segment (GRO) before delivery, so
// gVisor's TCP processes and acknowledges one segment where the wire
// carried dozens; everything else is delivered packet by packet.
//
// Read must be called from one goroutine at a time (wireguard-go does);
// Write may be called concurrently (wireguard-go writes from one goroutine
// per peer).
type TUNAdapter struct {
	mtu     int
	batch   int // BatchSize(): wireguard-go's buffers per read
	readMax int // packets per Read; see readLimit
	events  chan tun.Event
	done    chan struct{} // closed by Close

	out handoff[*stack.PacketBuffer] // gVisor → Read

	// direct holds the flows whose packets Write hands to an agent's
	// link instead of gVisor; nil for an adapter without a Stack.
	direct *directTable

	// dispatcher is gVisor's receive side, set when the NIC attaches.
	dispatcher atomic.Pointer[stack.NetworkDispatcher]

	readMu sync.Mutex // guards the following fields; held by Read
	// backlog holds packets taken from out; those from head on are not
	// read yet, and backlog[head] may be split up to segment next.
	backlog    []*stack.PacketBuffer
	head, next int
	slices     [][]byte // scratch for the payload of the packet being split

	groPool sync.Pool // *groBatch, one per concurrent Write

	stats adapterCounters

	closeOnce sync.Once
}

var (
	_ tun.Device         = (*TUNAdapter)(nil)
	_ stack.LinkEndpoint = (*linkEndpoint)(nil)
	_ stack.GSOEndpoint  = (*linkEndpoint)(nil)
)

// readLimit is how many packets one Read returns at most, so that
// wireguard-go's UDP bind can send them as one GSO datagram that stays
// whole. StdNetBind coalesces the packets of a Read into datagrams of up
// to 64 KiB of payload; with the outer IP, UDP and a 14-byte link header, a
// datagram of 46 full 1452-byte WireGuard messages exceeds the 64 KiB a
// device accepts (gso_max_size), so the kernel segments it in software. A
// peer on loopback or a veth then receives single datagrams, and
// StdNetBind, which with UDP GRO reads two datagrams per recvmmsg, pays a
// system call per two packets instead of one per forty-five.
func readLimit(mtu, batch int) int {
	const wgOverhead = 32                  // message header 16 + Poly1305 tag 16
	const budget = 1<<16 - 1 - 40 - 8 - 14 // IPv6, UDP and Ethernet headers
	return max(1, min(batch, budget/(mtu+wgOverhead)))
}

func newTUNAdapter(mtu int) *TUNAdapter { return newTUNAdapterBatch(mtu, BatchSize) }

// newTUNAdapterBatch is a TUNAdapter whose reads return at most batch
// packets (1..BatchSize).
func newTUNAdapterBatch(mtu, batch int) *TUNAdapter {
	a := &TUNAdapter{
		mtu:     mtu,
		batch:   batch,
		readMax: readLimit(mtu, batch),
		events:  make(chan tun.Event, 1),
		done:    make(chan struct{}),
	}
	a.out.init(outQueueLen, a.done)
	a.groPool.New = func() any { return newGROBatch(true) }
	a.events <- tun.EventUp
	return a
}

// File implements tun.Device. There is no file descriptor: it returns nil.
func (a *TUNAdapter) File() *os.File { return nil }

// MTU implements tun.Device.
func (a *TUNAdapter) MTU() (int, error) { return a.mtu, nil }

// Name implements tun.Device.
func (a *TUNAdapter) Name() (string, error) { return InterfaceName, nil }

// Events implements tun.Device: it delivers tun.EventUp once and is closed
// by Close.
func (a *TUNAdapter) Events() <-chan tun.Event { return a.events }

// BatchSize implements tun.Device.
func (a *TUNAdapter) BatchSize() int { return a.batch }

// Close implements tun.Device: it unblocks Read, makes later Reads and
// Writes fail with os.ErrClosed, drops queued packets and closes the events
// channel. gVisor's packets to the overlay are dropped from then on. It is
// idempotent and returns nil.
func (a *TUNAdapter) Close() error {
	a.closeOnce.Do(func() {
		close(a.done)
		for _, p := range a.out.close() {
			p.DecRef()
		}
		// Read notices done and returns; once it has, nobody else
		// touches the backlog.
		a.readMu.Lock()
		a.releaseBacklogLocked()
		a.readMu.Unlock()
		close(a.events)
	})
	return nil
}

func (a *TUNAdapter) closed() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func errClosed(op string) error {
	return fmt.Errorf("netstack: tun %s: %w", op, os.ErrClosed)
}

// AdapterStats counts what a TUNAdapter did since it was created.
type AdapterStats struct {
	// OutPackets and OutBytes count what gVisor wrote to the adapter
	// (a GSO segment counts once); OutSegments counts the packets Read
	// handed to wireguard-go after splitting.
	OutPackets, OutBytes, OutSegments uint64
	// OutDropped counts packets gVisor wrote while the queue was full or
	// the adapter closed, and packets too large for wireguard-go's buffers.
	OutDropped uint64
	// InPackets counts the packets Write received; InDelivered the
	// packets handed to gVisor after coalescing; InCoalesced the received
	// packets merged into an earlier one.
	InPackets, InDelivered, InCoalesced uint64
	// InDropped counts received packets that were not IP.
	InDropped uint64
	// InDiverted counts received packets of direct flows, handed to an
	// agent's link instead of gVisor.
	InDiverted uint64
}

type adapterCounters struct {
	outPackets, outBytes, outSegments, outDropped  atomic.Uint64
	inPackets, inDelivered, inCoalesced, inDropped atomic.Uint64
	inDiverted                                     atomic.Uint64
}

// Stats returns the adapter's counters.
func (a *TUNAdapter) Stats() AdapterStats {
	c := &a.stats
	return AdapterStats{
		OutPackets: c.outPackets.Load(), OutBytes: c.outBytes.Load(),
		OutSegments: c.outSegments.Load(), OutDropped: c.outDropped.Load(),
		InPackets: c.inPackets.Load(), InDelivered: c.inDelivered.Load(),
		InCoalesced: c.inCoalesced.Load(), InDropped: c.inDropped.Load(),
		InDiverted: c.inDiverted.Load(),
	}
}
