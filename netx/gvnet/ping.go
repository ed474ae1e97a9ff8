package gvnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// Ping sends one ICMP echo request to dst, an IPv4 address, and waits for
// the reply, returning the round-trip time. The context bounds the wait.
func (n *Network) Ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	rtt, err := n.ping(ctx, dst)
	return rtt, n.named(err)
}

func (n *Network) ping(ctx context.Context, dst netip.Addr) (time.Duration, error) {
	if err := n.checkOpen("ping", "icmp"); err != nil {
		return 0, err
	}
	dst = dst.Unmap()
	if !dst.Is4() {
		return 0, &net.OpError{Op: "ping", Net: "icmp", Err: &net.AddrError{Err: "not an IPv4 address", Addr: dst.String()}}
	}
	to := endpointAddr{full: tcpip.FullAddress{Addr: ToTCPIP(dst)}, proto: ipv4.ProtocolNumber}
	var wq waiter.Queue
	ep, terr := n.cfg.Stack.NewEndpoint(icmp.ProtocolNumber4, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return 0, opError("ping", "icmp", to, terr)
	}
	conn := gonet.NewUDPConn(&wq, ep)
	defer conn.Close()
	if terr := ep.Connect(to.full); terr != nil {
		return 0, opError("ping", "icmp", to, terr)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	req := make([]byte, header.ICMPv4MinimumSize+8)
	icmpHdr := header.ICMPv4(req)
	icmpHdr.SetType(header.ICMPv4Echo)
	icmpHdr.SetSequence(1)
	binary.BigEndian.PutUint64(req[header.ICMPv4MinimumSize:], uint64(time.Now().UnixNano()))
	start := time.Now()
	if _, err := conn.Write(req); err != nil {
		return 0, fmt.Errorf("ping %v: %w", dst, err)
	}
	buf := make([]byte, 1500)
	for {
		k, err := conn.Read(buf)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return 0, fmt.Errorf("ping %v: no reply: %w", dst, cerr)
			}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				// The read deadline is ctx's, and its timer can fire
				// before ctx's own: the same timeout.
				return 0, fmt.Errorf("ping %v: no reply: %w", dst, context.DeadlineExceeded)
			}
			return 0, fmt.Errorf("ping %v: %w", dst, err)
		}
		if k >= header.ICMPv4MinimumSize && header.ICMPv4(buf[:k]).Type() == header.ICMPv4EchoReply {
			return time.Since(start), nil
		}
	}
}
