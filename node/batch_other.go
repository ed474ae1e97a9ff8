//go:build !linux

package node

import "net"

// ipv4OnIPv6Socket: elsewhere (the BSDs, macOS) an AF_INET address on an
// AF_INET6 socket is refused, so the dual-stack socket goes unbatched.
const ipv4OnIPv6Socket = false

// gsoSupported: UDP GSO is Linux's.
func gsoSupported(*net.UDPConn) bool { return false }

// gsoControl is never called where gsoSupported is false.
func gsoControl(b []byte, _ int) []byte { return b }

func shouldDisableGSO(error) bool { return false }

// enableGRO: UDP GRO is Linux's.
func enableGRO(*net.UDPConn) bool { return false }

// groSegment is never called where enableGRO is false.
func groSegment([]byte) int { return 0 }

// groOOBSize is the control buffer a read asks for: none.
var groOOBSize = 0
