//go:build !linux

package node

import "net"

// gsoSupported: UDP GSO is Linux's.
func gsoSupported(*net.UDPConn) bool { return false }

// gsoControl is never called where gsoSupported is false.
func gsoControl(b []byte, _ int) []byte { return b }

func shouldDisableGSO(error) bool { return false }
