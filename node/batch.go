package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	netipv4 "golang.org/x/net/ipv4"
	netipv6 "golang.org/x/net/ipv6"
)

// udpBatch moves many datagrams per system call on a real UDP socket, as
// wireguard-go's StdNetBind does: recvmmsg and sendmmsg through x/net's
// ipv4.PacketConn and, where the kernel supports it, UDP GSO (one
// sendmsg carries a run of datagrams to one address as iovecs, with a
// UDP_SEGMENT control message saying where the kernel splits them; no
// copy). A WireGuard Send is one peer's packets, all full-size but the
// last in a bulk transfer, so a batch is usually one sendmsg. The lab's
// sockets are not *net.UDPConn: there the mux moves one datagram per
// call (newUDPBatch returns nil).
type udpBatch struct {
	pc  batchConn
	gso atomic.Bool // the kernel takes UDP_SEGMENT; cleared when a send says otherwise
	gro bool        // the socket has UDP_GRO: a read may be a run of datagrams

	scratch sync.Pool // *sendScratch, one per concurrent Send
}

const (
	// recvBatch is how many datagrams one recvmmsg may return.
	recvBatch = 32
	// groBatch is how many messages one recvmmsg returns on a socket
	// with UDP_GRO. Each needs a groBufSize buffer (512 KiB in all), and
	// each can be a run of up to 64 datagrams (a peer's GSO send, which
	// on loopback arrives whole, or what the NIC's GRO merged).
	groBatch = 8
	// groBufSize holds the largest coalesced message: an IPv4 UDP
	// datagram's payload at most, which is what GRO stops at.
	groBufSize = 1 << 16
	// gsoMaxSegments is UDP_MAX_SEGMENTS on the kernels we run on (64
	// until Linux 6.9 raised it to 128).
	gsoMaxSegments = 64
	// gsoMaxBytes is the payload of one IPv4 UDP datagram at most: a GSO
	// run's bytes, headers excluded.
	gsoMaxBytes = 65535 - 20 - 8
)

// sendScratch is one Send's messages and control buffers, reused.
type sendScratch struct {
	msgs []netipv4.Message
	oob  [][]byte
}

// batchConn is recvmmsg and sendmmsg as x/net's ipv4 and ipv6
// PacketConns both offer them (their Message is one type).
type batchConn interface {
	ReadBatch(ms []netipv4.Message, flags int) (int, error)
	WriteBatch(ms []netipv4.Message, flags int) (int, error)
}

// newUDPBatch returns a batcher for pc, or nil where pc is not a
// *net.UDPConn (a lab host's socket); with gro, it turns UDP GRO on where
// the kernel has it. On an IPv6 socket (the node's
// dual-stack one) x/net's ipv6 side does the calls where
// ipv4OnIPv6Socket says the kernel takes the AF_INET addresses it
// writes for IPv4 destinations.
func newUDPBatch(pc net.PacketConn, gro bool) *udpBatch {
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		return nil
	}
	la, ok := uc.LocalAddr().(*net.UDPAddr)
	if !ok {
		return nil
	}
	var bc batchConn = netipv4.NewPacketConn(uc)
	if la.IP.To4() == nil {
		if !ipv4OnIPv6Socket {
			return nil // package net maps IPv4 destinations itself
		}
		bc = netipv6.NewPacketConn(uc)
	}
	u := &udpBatch{pc: bc, gro: gro && enableGRO(uc)}
	u.gso.Store(gsoSupported(uc))
	u.scratch.New = func() any { return &sendScratch{} }
	return u
}

// write sends bufs to one address in as few system calls as the kernel
// allows. On an error that says the device cannot offload segmentation
// (EIO) GSO is turned off for the socket's life and the batch resent
// without it.
func (u *udpBatch) write(bufs [][]byte, to netip.AddrPort) error {
	s := u.scratch.Get().(*sendScratch)
	defer u.scratch.Put(s)
	addr := net.UDPAddrFromAddrPort(to)
	gso := u.gso.Load()
	sent, err := u.send(s.split(bufs, addr, gso))
	if err != nil && gso && shouldDisableGSO(err) {
		u.gso.Store(false)
		_, err = u.send(s.split(bufs[sent:], addr, false))
	}
	clear(s.msgs) // drop the references to WireGuard's buffers
	return err
}

// send writes msgs, looping over partial sendmmsg results, and returns
// how many datagrams (not messages) went out.
func (u *udpBatch) send(msgs []netipv4.Message) (int, error) {
	sent := 0
	for len(msgs) > 0 {
		n, err := u.pc.WriteBatch(msgs, 0)
		if err != nil {
			return sent, fmt.Errorf("node: sendmmsg: %w", err)
		}
		if n == 0 {
			return sent, errors.New("node: sendmmsg sent nothing")
		}
		for _, m := range msgs[:n] {
			sent += len(m.Buffers)
		}
		msgs = msgs[n:]
	}
	return sent, nil
}

// split turns bufs into messages: with gso, each run of datagrams of one
// size (the last may be shorter, which ends the run) up to the kernel's
// limits is one message; without, each datagram is one.
func (s *sendScratch) split(bufs [][]byte, addr net.Addr, gso bool) []netipv4.Message {
	s.msgs = s.msgs[:0]
	for i := 0; i < len(bufs); {
		size := len(bufs[i])
		j, total := i+1, size
		for gso && j < len(bufs) && j-i < gsoMaxSegments && len(bufs[j]) <= size &&
			total+len(bufs[j]) <= gsoMaxBytes && len(bufs[j-1]) == size {
			total += len(bufs[j])
			j++
		}
		m := netipv4.Message{Buffers: bufs[i:j:j], Addr: addr}
		if j-i > 1 {
			k := len(s.msgs)
			for len(s.oob) <= k {
				s.oob = append(s.oob, nil)
			}
			s.oob[k] = gsoControl(s.oob[k], size)
			m.OOB = s.oob[k]
		}
		s.msgs = append(s.msgs, m)
		i = j
	}
	return s.msgs
}

// splitGRO calls each with every datagram of a coalesced message b whose
// control message says the datagrams are seg bytes long (the last may be
// shorter); seg 0 means b is one datagram.
func splitGRO(b []byte, seg int, each func([]byte)) {
	if seg <= 0 {
		seg = len(b)
	}
	for len(b) > 0 {
		k := min(seg, len(b))
		each(b[:k])
		b = b[k:]
	}
}
