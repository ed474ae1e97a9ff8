package netx

import "net"

// SocketBufferSize is what a node asks for its UDP socket's buffers. A
// burst of full-size WireGuard packets (a TCP window's worth from a fast
// sender) overflows Linux's default receive buffer (about 208 KiB, some
// 90 packets), and the sender's TCP then stalls in retransmission
// timeouts. wireguard-go and quic-go ask for the same.
const SocketBufferSize = 7 << 20

// SetSocketBuffers asks for bytes of receive and send buffer on pc, if pc
// is a kernel socket; other sockets (a lab host's) are left alone. On
// Linux, with CAP_NET_ADMIN, it passes the system's cap
// (net.core.rmem_max and wmem_max); without it the kernel grants at most
// that cap.
func SetSocketBuffers(pc net.PacketConn, bytes int) error {
	return setSocketBuffers(pc, bytes)
}
