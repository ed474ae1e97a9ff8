package netstack

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TestDialErrno: a failed dial names its cause as the errno package net
// would, so a SOCKS5 proxy can answer "refused" or "unreachable".
func TestDialErrno(t *testing.T) {
	for _, tc := range []struct {
		name string
		// icmp is the Destination Unreachable code answered to the SYN;
		// -1 dials a closed port on the stack's loopback instead.
		icmp int
		want syscall.Errno
	}{
		{name: "closed loopback port", icmp: -1, want: syscall.ECONNREFUSED},
		{name: "icmp host unreachable", icmp: int(header.ICMPv4HostUnreachable), want: syscall.EHOSTUNREACH},
		{name: "icmp network unreachable", icmp: int(header.ICMPv4NetUnreachable), want: syscall.ENETUNREACH},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, addrA)
			dst := blackhole.String()
			if tc.icmp < 0 {
				ln, err := s.Listen(ctxT(t, time.Second), "tcp4", "127.0.0.1:0")
				require.NoError(t, err)
				dst = ln.Addr().String()
				require.NoError(t, ln.Close())
			} else {
				go answerICMP(s.TUN(), header.ICMPv4Code(tc.icmp))
			}
			_, err := s.Dial(ctxT(t, 2*time.Second), "tcp", dst)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "want %v, got %v", tc.want, err)
			var oe *net.OpError
			assert.ErrorAs(t, err, &oe)
		})
	}
}

// answerICMP reads the first packet the stack sends and answers it with
// an ICMPv4 Destination Unreachable of the given code from its
// destination, as a router would (RFC 792: the IP header and the first 8
// bytes of the datagram).
func answerICMP(tun *TUNAdapter, code header.ICMPv4Code) {
	bufs, sizes := [][]byte{make([]byte, 65535)}, []int{0}
	if _, err := tun.Read(bufs, sizes, 0); err != nil {
		return
	}
	orig := header.IPv4(bufs[0][:sizes[0]])
	quoted := orig[:int(orig.HeaderLength())+8]
	pkt := make([]byte, header.IPv4MinimumSize+header.ICMPv4MinimumSize+len(quoted))
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: orig.DestinationAddress(), DstAddr: orig.SourceAddress(),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	icmp := header.ICMPv4(ip.Payload())
	icmp.SetType(header.ICMPv4DstUnreachable)
	icmp.SetCode(code)
	copy(icmp.Payload(), quoted)
	icmp.SetChecksum(^checksum.Checksum(icmp, 0))
	_, _ = tun.Write([][]byte{pkt}, 0)
}
