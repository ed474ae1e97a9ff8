//go:build !linux

package netx

import "net"

func setSocketBuffers(pc net.PacketConn, bytes int) error {
	return setBuffers(pc, bytes)
}
