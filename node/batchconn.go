package node

import "net/netip"

// batchPacketConn is a socket that is not a *net.UDPConn but still moves
// runs of datagrams per call: a lab host's (lab/fabric). The mux reads
// and writes through it as it uses recvmmsg and sendmmsg on a real
// socket, so a WireGuard batch crosses the lab in one call each way.
type batchPacketConn interface {
	// ReadBatchFrom blocks until a datagram arrives (or the socket's
	// read deadline passes or it closes), then fills bufs with it and
	// whatever else is queued, up to len(bufs): sizes and from get each
	// one's length and source. It returns how many it filled. Only one
	// goroutine reads at a time.
	ReadBatchFrom(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error)
	// WriteBatchTo sends each of bufs to addr, in order, as that many
	// WriteTo calls would. On an error the ones before the failing one
	// were sent. Safe for concurrent use; it keeps no reference to bufs.
	WriteBatchTo(bufs [][]byte, addr netip.AddrPort) error
}

// readRunLoop is readLoop on a batchPacketConn: up to recvBatch datagrams
// per call, each into its own pool buffer, which route takes over.
func (m *Mux) readRunLoop(bc batchPacketConn) {
	defer m.loop.Done()
	bps := make([]*[]byte, recvBatch)
	bufs := make([][]byte, recvBatch)
	sizes := make([]int, recvBatch)
	from := make([]netip.AddrPort, recvBatch)
	for i := range bps {
		bps[i] = muxPool.Get().(*[]byte)
		bufs[i] = *bps[i]
	}
	defer func() {
		for _, bp := range bps {
			muxPool.Put(bp)
		}
	}()
	for {
		n, err := bc.ReadBatchFrom(bufs, sizes, from)
		if err != nil {
			if m.readError(err) {
				return
			}
			continue
		}
		for i := range n {
			m.route(datagram{buf: bps[i], n: sizes[i], from: unmapAddrPort(from[i])})
			bps[i] = muxPool.Get().(*[]byte)
			bufs[i] = *bps[i]
		}
	}
}
