package netstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/latticelab/lattice/netx/gvnet"
)

// errDenied is what the tests' egress hook refuses with.
var errDenied = errors.New("denied by test")

// directRig is a sandbox's overlay stack wired to a peer's, and an agent
// whose "kernel" is a gVisor stack on the far end of a packet device to a
// Gateway carrying its TCP to the overlay direct. With vnet, the agent's
// link puts a virtio_net_hdr before each packet and hands over TCP
// segments of up to 64 KB with partial checksums, as a TUN device with
// offloads does.
type directRig struct {
	overlay, peer *Stack
	gw            *Gateway
	agent         *stack.Stack

	mu    sync.Mutex // guards asked
	asked []netip.AddrPort
}

func newDirectRig(t *testing.T, vnet bool) *directRig {
	t.Helper()
	r := &directRig{}
	var err error
	r.overlay, err = New(Config{Address: addrA, Egress: func(network string, dst netip.AddrPort) error {
		r.mu.Lock()
		r.asked = append(r.asked, dst)
		r.mu.Unlock()
		if dst.Port() == 9 {
			return errDenied
		}
		return nil
	}})
	require.NoError(t, err)
	r.peer, err = New(Config{Address: addrB})
	require.NoError(t, err)
	wire(t, r.overlay.TUN(), r.peer.TUN())
	t.Cleanup(func() {
		require.NoError(t, r.overlay.Close())
		require.NoError(t, r.peer.Close())
	})

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	for _, fd := range fds {
		require.NoError(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20))
	}
	r.gw, err = NewGateway(GatewayConfig{
		Device: os.NewFile(uintptr(fds[0]), "gateway"), Agent: addrA.Addr(), VnetHdr: vnet, Overlay: r.overlay,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("the test expects no flow through the gateway's stack")
		},
	})
	require.NoError(t, err)

	r.agent = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	opts := fdbased.Options{FDs: []int{fds[1]}, MTU: GatewayMTU, RXChecksumOffload: true}
	if vnet {
		opts.GSOMaxSize = gsoMaxSize
	}
	ep, err := fdbased.New(&opts)
	require.NoError(t, err)
	require.Nil(t, r.agent.CreateNIC(1, ep))
	require.Nil(t, r.agent.AddProtocolAddress(1, tcpip.ProtocolAddress{
		Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: gvnet.ToTCPIP(addrA.Addr()), PrefixLen: addrA.Bits()},
	}, stack.AddressProperties{}))
	r.agent.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	t.Cleanup(func() {
		require.NoError(t, r.gw.Close())
		r.agent.Close()
		_ = unix.Close(fds[1])
		r.agent.Wait()
	})
	return r
}

// dial connects the agent to dst, from local port from if not zero.
func (r *directRig) dial(ctx context.Context, from uint16, dst netip.AddrPort) (*gonet.TCPConn, error) {
	local := tcpip.FullAddress{NIC: 1, Addr: gvnet.ToTCPIP(addrA.Addr()), Port: from}
	return gonet.DialTCPWithBind(ctx, r.agent, local, tcpip.FullAddress{Addr: gvnet.ToTCPIP(dst.Addr()), Port: dst.Port()}, ipv4.ProtocolNumber)
}

// echoServer answers each connection on the peer with the SHA-256 of
// what it read, then echoes a block of data back, and reports the
// remote address it saw.
func echoServer(t *testing.T, s *Stack, port uint16, reply int) <-chan netip.AddrPort {
	t.Helper()
	ln, err := s.Listen(t.Context(), "tcp", netip.AddrPortFrom(netip.IPv4Unspecified(), port).String())
	require.NoError(t, err)
	seen := make(chan netip.AddrPort, 8)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			seen <- netip.MustParseAddrPort(c.RemoteAddr().String())
			wg.Go(func() {
				defer c.Close()
				h := sha256.New()
				if _, err := io.Copy(h, c); err != nil {
					return
				}
				_, _ = c.Write(h.Sum(nil))
				_, _ = c.Write(bytes.Repeat([]byte("r"), reply))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return seen
}

// exchange sends n bytes over c, half-closes, and checks the answer.
func exchange(t *testing.T, c *gonet.TCPConn, n, reply int) {
	t.Helper()
	payload := data(0, n)
	want := sha256.Sum256(payload)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err := c.Write(payload)
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Len(t, got, sha256.Size+reply)
	assert.Equal(t, want[:], got[:sha256.Size], "the peer read what the agent sent")
	assert.Equal(t, bytes.Repeat([]byte("r"), reply), got[sha256.Size:], "the agent read what the peer sent")
}

// TestDirectFlow: the agent's TCP to a peer goes end to end through the
// overlay's WireGuard path, both ways, decided once by the overlay's
// egress hook, with the agent's address and port as the peer sees them;
// nothing goes through the gateway's stack; closing the gateway forgets
// the flow and its port.
func TestDirectFlow(t *testing.T) {
	for _, vnet := range []bool{true, false} {
		t.Run(map[bool]string{true: "vnet", false: "plain"}[vnet], func(t *testing.T) {
			r := newDirectRig(t, vnet)
			seen := echoServer(t, r.peer, 5201, 3<<20)
			c, err := r.dial(ctxT(t, 30*time.Second), 40000, netip.AddrPortFrom(addrB.Addr(), 5201))
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, netip.MustParseAddrPort("100.64.1.2:40000"), <-seen, "the agent's own address and port")
			assert.Equal(t, 1, r.overlay.DirectFlows())
			exchange(t, c, 8<<20, 3<<20)
			st := r.gw.Stats()
			assert.Equal(t, uint64(1), st.Direct)
			assert.Equal(t, uint64(1), st.TCP)
			r.mu.Lock()
			assert.Equal(t, []netip.AddrPort{netip.AddrPortFrom(addrB.Addr(), 5201)}, r.asked, "one decision, on the SYN")
			r.mu.Unlock()
			as := r.overlay.TUN().Stats()
			assert.Positive(t, as.InDiverted)
			if vnet {
				// The agent's link handed over segments of up to 64 KB,
				// cut at the overlay's MTU on the way to WireGuard.
				assert.Greater(t, as.OutSegments, 4*as.OutPackets, "%+v", as)
			}
			require.NoError(t, r.gw.Close())
			assert.Equal(t, 0, r.overlay.DirectFlows(), "a closed gateway forgets its flows")
		})
	}
}

// TestDirectFlowRefused: a destination the egress hook refuses fails at
// once with a reset, and no packet reaches the peer.
func TestDirectFlowRefused(t *testing.T) {
	r := newDirectRig(t, true)
	start := time.Now()
	_, err := r.dial(ctxT(t, 30*time.Second), 0, netip.AddrPortFrom(addrB.Addr(), 9))
	require.Error(t, err)
	assert.ErrorContains(t, err, "refused")
	assert.Less(t, time.Since(start), 2*time.Second, "refused at once")
	assert.Equal(t, uint64(1), r.gw.Stats().Refused)
	assert.Zero(t, r.overlay.DirectFlows())
	assert.Zero(t, r.peer.TUN().Stats().InPackets, "nothing reached the peer")
}

// TestDirectFlowPortInUse: an agent port the overlay stack holds (a
// listener, as an inbound forward has) is translated for the overlay: the
// flow works, the peer sees another port, and the stack's own connections
// to the same peer and port go on beside it.
func TestDirectFlowPortInUse(t *testing.T) {
	r := newDirectRig(t, true)
	seen := echoServer(t, r.peer, 5201, 1<<20)
	ln, err := r.overlay.Listen(t.Context(), "tcp", ":7000")
	require.NoError(t, err)
	defer ln.Close()

	c, err := r.dial(ctxT(t, 30*time.Second), 7000, netip.AddrPortFrom(addrB.Addr(), 5201))
	require.NoError(t, err)
	defer c.Close()
	from := <-seen
	assert.Equal(t, addrA.Addr(), from.Addr())
	assert.NotEqual(t, uint16(7000), from.Port(), "the overlay's listener keeps its port")

	own, err := r.overlay.Dial(ctxT(t, 30*time.Second), "tcp", netip.AddrPortFrom(addrB.Addr(), 5201).String())
	require.NoError(t, err)
	defer own.Close()
	ownFrom := <-seen
	assert.NotEqual(t, from.Port(), ownFrom.Port(), "the stack's own connection takes another port")

	exchange(t, c, 2<<20, 1<<20)
	_, err = own.Write([]byte("own"))
	require.NoError(t, err)
	require.NoError(t, own.(interface{ CloseWrite() error }).CloseWrite())
	got, err := io.ReadAll(own)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("own"))
	assert.Equal(t, sum[:], got[:sha256.Size], "the stack's own flow is its own")
}

func TestDirectExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		st    uint32
		idle  time.Duration
		wantX bool
	}{
		{"syn sent, fresh", 0, time.Minute, false},
		{"syn sent, unanswered", 0, 3 * time.Minute, true},
		{"established, idle an hour", flowEstablished, time.Hour, false},
		{"established, idle past RFC 5382's 2h4m", flowEstablished, 2*time.Hour + 5*time.Minute, true},
		{"half closed", flowEstablished | flowFinOut, time.Hour, false},
		{"closed both ways, in time-wait", flowEstablished | flowFinOut | flowFinIn, time.Minute, false},
		{"closed both ways, after time-wait", flowEstablished | flowFinOut | flowFinIn, 3 * time.Minute, true},
		{"reset, just now", flowEstablished | flowRST, 5 * time.Second, false},
		{"reset, a while ago", flowEstablished | flowRST, 11 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.wantX, directExpired(tc.st, t0, t0.Add(tc.idle)))
		})
	}
}

func TestClampMSS(t *testing.T) {
	mk := func(opts ...byte) header.TCP {
		th := make(header.TCP, header.TCPMinimumSize+len(opts))
		th.Encode(&header.TCPFields{DataOffset: uint8(len(th)), Flags: header.TCPFlagSyn})
		copy(th[header.TCPMinimumSize:], opts)
		return th
	}
	for _, tc := range []struct {
		name string
		th   header.TCP
		want []byte
	}{
		{"large", mk(2, 4, 0xff, 0xc8, 1, 1, 4, 2), []byte{2, 4, 0x05, 0x64, 1, 1, 4, 2}},
		{"after nops and sack-permitted", mk(1, 1, 4, 2, 2, 4, 0xff, 0xc8), []byte{1, 1, 4, 2, 2, 4, 0x05, 0x64}},
		{"small stays", mk(2, 4, 0x02, 0x18, 0, 0, 0, 0), []byte{2, 4, 0x02, 0x18, 0, 0, 0, 0}},
		{"none", mk(1, 1, 4, 2), []byte{1, 1, 4, 2}},
		{"truncated option", mk(1, 1, 2, 8), []byte{1, 1, 2, 8}},
		{"zero length option", mk(3, 0, 2, 4), []byte{3, 0, 2, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clampMSS(tc.th, 1380)
			assert.Equal(t, tc.want, []byte(tc.th[header.TCPMinimumSize:]))
		})
	}
}

func TestTCPReset(t *testing.T) {
	syn := flowA4.with(77, header.TCPFlagSyn, nil).bytes()
	rst := tcpReset(syn)
	p := parseTCP(t, rst)
	assert.Equal(t, flowA4.dst, p.src)
	assert.Equal(t, flowA4.src, p.dst)
	assert.Equal(t, header.TCPFlagRst|header.TCPFlagAck, p.flags)
	assert.Equal(t, uint32(78), p.ack, "acknowledges the SYN")
	assert.True(t, p.csumOK)
}

// TestDirectICMPError: an ICMP error from the overlay about a direct
// flow's segment (the node answers host unreachable for an offline peer)
// reaches the agent, quoting the agent's own port, so its connect fails at
// once.
func TestDirectICMPError(t *testing.T) {
	overlay, err := New(Config{Address: addrA})
	require.NoError(t, err)
	ln, err := overlay.Listen(t.Context(), "tcp", ":40000") // the agent's port is taken
	require.NoError(t, err)
	defer ln.Close()
	g, _, agent := directHarness(t, overlay)
	g.direct.mu.Lock()
	f := g.direct.flows[directKey{peer: flowA4.dst.Addr().As4(), peerPort: 80, local: 40000}]
	g.direct.mu.Unlock()
	require.NotNil(t, f)
	require.NotEqual(t, uint16(40000), f.local, "translated")

	left := flowA4
	left.src = netip.AddrPortFrom(left.src.Addr(), f.local)
	quote := left.with(1, header.TCPFlagSyn, nil).bytes()[:header.IPv4MinimumSize+8]
	icmp := make([]byte, header.ICMPv4MinimumSize+len(quote))
	header.ICMPv4(icmp).SetType(header.ICMPv4DstUnreachable)
	header.ICMPv4(icmp).SetCode(header.ICMPv4HostUnreachable)
	copy(icmp[header.ICMPv4MinimumSize:], quote)
	header.ICMPv4(icmp).SetChecksum(^checksum.Checksum(icmp, 0))
	writeSegsRaw(t, overlay.TUN(), ipv4Packet(flowA4.dst.Addr(), addrA.Addr(), uint8(header.ICMPv4ProtocolNumber), icmp))

	buf := make([]byte, 2048)
	var n int
	require.Eventually(t, func() bool {
		n, err = unix.Read(agent, buf)
		return err == nil
	}, 5*time.Second, time.Millisecond)
	p := header.IPv4(buf[virtioNetHdrLen:n])
	require.True(t, p.IsValid(len(p)))
	got := header.ICMPv4(p.Payload())
	assert.Equal(t, header.ICMPv4DstUnreachable, got.Type())
	assert.Equal(t, uint16(0xffff), checksum.Checksum(got, 0), "ICMP checksum")
	q := header.IPv4(got[header.ICMPv4MinimumSize:])
	assert.Equal(t, uint16(40000), header.TCP(q[q.HeaderLength():]).SourcePort(), "the agent's port")
	assert.Equal(t, uint64(1), overlay.TUN().Stats().InDiverted)
}

// writeSegsRaw writes packets to a in one batch, as wireguard-go would.
func writeSegsRaw(t testing.TB, a *TUNAdapter, pkts ...[]byte) {
	t.Helper()
	bufs := make([][]byte, len(pkts))
	for i, p := range pkts {
		bufs[i] = append(make([]byte, wgOffset), p...)
	}
	n, err := a.Write(bufs, wgOffset)
	require.NoError(t, err)
	require.Equal(t, len(pkts), n)
}
