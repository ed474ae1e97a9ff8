//go:build !linux

package netx

import (
	"fmt"
	"net"
)

func setSocketBuffers(pc net.PacketConn, bytes int) error {
	u, ok := pc.(*net.UDPConn)
	if !ok {
		return nil
	}
	if err := u.SetReadBuffer(bytes); err != nil {
		return fmt.Errorf("netx: receive buffer of %d bytes: %w", bytes, err)
	}
	if err := u.SetWriteBuffer(bytes); err != nil {
		return fmt.Errorf("netx: send buffer of %d bytes: %w", bytes, err)
	}
	return nil
}
