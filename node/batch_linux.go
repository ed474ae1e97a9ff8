package node

import (
	"encoding/binary"
	"errors"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ipv4OnIPv6Socket: Linux's udpv6_sendmsg sends to an AF_INET address on
// an AF_INET6 socket without IPV6_V6ONLY (as udp_sendmsg, GSO included),
// which is what x/net writes for every IPv4 destination.
const ipv4OnIPv6Socket = true

// gsoSupported says whether the kernel knows UDP_SEGMENT on this socket
// (Linux 4.18 and later), the way wireguard-go's StdNetBind asks.
func gsoSupported(uc *net.UDPConn) bool {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		_, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	}); err != nil {
		return false
	}
	return serr == nil
}

// gsoControl writes into b (grown if short) the control message telling
// the kernel to split a datagram into segments of size bytes.
func gsoControl(b []byte, size int) []byte {
	space := unix.CmsgSpace(2)
	if cap(b) < space {
		b = make([]byte, space)
	}
	b = b[:space]
	clear(b)
	// The header's layout (its length field's width) is the platform's:
	// write it through the kernel's struct as x/sys defines it.
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0])) //nolint:gosec // cmsg header, sized by CmsgSpace
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size)) //nolint:gosec // size ≤ muxBufSize
	return b
}

// shouldDisableGSO: EIO is what a send with UDP_SEGMENT returns where the
// device cannot checksum in hardware (wireguard-go turns GSO off on it
// too); EINVAL, a kernel with tighter limits than gsoMaxSegments.
func shouldDisableGSO(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL)
}

// enableGRO turns UDP_GRO on for the socket and says whether it took: the
// kernel then hands a run of datagrams from one sender as one message,
// with a control message giving their size, and on loopback a sender's
// GSO send arrives whole instead of being split into one socket buffer
// per datagram. It reads the option back, which kernels before 5.12
// cannot; wireguard-go leaves GRO off on those too (its GRO had bugs).
func enableGRO(uc *net.UDPConn) bool {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	on := false
	_ = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) != nil {
			return
		}
		v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO)
		on = err == nil && v == 1
	})
	return on
}

// groOOBSize is the control buffer a read asks for: room for the UDP_GRO
// message (a 16-bit segment size) and one more, as the kernel may add
// others.
var groOOBSize = 2 * unix.CmsgSpace(4)

// groSegment is the segment size in a read's control messages, or 0
// where there is none (the message is one datagram).
func groSegment(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 2 {
			return int(binary.NativeEndian.Uint16(m.Data))
		}
	}
	return 0
}
