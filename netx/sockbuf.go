package netx

import (
	"fmt"
	"net"
	"syscall"
)

// SocketBufferSize is what a node asks for its UDP socket's buffers. A
// burst of full-size WireGuard packets (a TCP window's worth from a fast
// sender) overflows Linux's default receive buffer (about 208 KiB, some
// 90 packets), and the sender's TCP then stalls in retransmission
// timeouts. wireguard-go and quic-go ask for the same.
const SocketBufferSize = 7 << 20

// SetSocketBuffers asks for bytes of receive and send buffer on pc. On a
// kernel socket on Linux, with CAP_NET_ADMIN, it passes the system's cap
// (net.core.rmem_max and wmem_max); without it the kernel grants at most
// that cap. Any other socket is asked through its SetReadBuffer and
// SetWriteBuffer, if it has them: a lab host's socket bounds its receive
// queue by what it is given, as SO_RCVBUF does, so a node has the same
// queue in the lab as on a host.
func SetSocketBuffers(pc net.PacketConn, bytes int) error {
	if _, ok := pc.(syscall.Conn); ok {
		return setSocketBuffers(pc, bytes)
	}
	return setBuffers(pc, bytes)
}

// setBuffers asks pc's own setters for bytes of receive and send buffer.
func setBuffers(pc net.PacketConn, bytes int) error {
	b, ok := pc.(interface {
		SetReadBuffer(int) error
		SetWriteBuffer(int) error
	})
	if !ok {
		return nil
	}
	if err := b.SetReadBuffer(bytes); err != nil {
		return fmt.Errorf("netx: receive buffer of %d bytes: %w", bytes, err)
	}
	if err := b.SetWriteBuffer(bytes); err != nil {
		return fmt.Errorf("netx: send buffer of %d bytes: %w", bytes, err)
	}
	return nil
}
