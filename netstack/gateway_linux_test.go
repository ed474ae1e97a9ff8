package netstack

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/latticelab/lattice/netx/gvnet"
)

var (
	gwAgent = netip.MustParseAddr("100.64.1.2")
	gwPeer  = netip.MustParseAddr("100.64.1.3")
)

// ipv4Packet is an IPv4 packet from src to dst carrying payload.
func ipv4Packet(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	b := make([]byte, header.IPv4MinimumSize+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: proto,
		SrcAddr: gvnet.ToTCPIP(src), DstAddr: gvnet.ToTCPIP(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	copy(b[header.IPv4MinimumSize:], payload)
	return b
}

func echoRequest(id, seq uint16, data string) []byte {
	b := make([]byte, header.ICMPv4MinimumSize+len(data))
	icmp := header.ICMPv4(b)
	icmp.SetType(header.ICMPv4Echo)
	icmp.SetIdent(id)
	icmp.SetSequence(seq)
	copy(icmp.Payload(), data)
	icmp.SetChecksum(^checksum.Checksum(b, 0))
	return b
}

func TestGatewayClassify(t *testing.T) {
	icmp := uint8(header.ICMPv4ProtocolNumber)
	reply := echoRequest(1, 1, "x")
	header.ICMPv4(reply).SetType(header.ICMPv4EchoReply)
	for _, tc := range []struct {
		name string
		pkt  []byte
		want packetKind
	}{
		{"tcp from the agent", ipv4Packet(gwAgent, gwPeer, uint8(header.TCPProtocolNumber), make([]byte, 20)), packetDeliver},
		{"udp from the agent", ipv4Packet(gwAgent, gwPeer, uint8(header.UDPProtocolNumber), make([]byte, 8)), packetDeliver},
		{"echo request", ipv4Packet(gwAgent, gwPeer, icmp, echoRequest(7, 1, "hi")), packetEcho},
		{"echo reply", ipv4Packet(gwAgent, gwPeer, icmp, reply), packetDrop},
		{"spoofed source", ipv4Packet(gwPeer, gwAgent, uint8(header.TCPProtocolNumber), make([]byte, 20)), packetDrop},
		{"short", []byte{0x45, 0}, packetDrop},
		{"ipv6", append([]byte{0x60}, make([]byte, 39)...), packetDrop},
		{"truncated icmp", ipv4Packet(gwAgent, gwPeer, icmp, []byte{8, 0}), packetDrop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, classify(tc.pkt, len(tc.pkt), gwAgent))
		})
	}
	// The link reader passes a packet's first bytes: enough for TCP and
	// UDP, not for an echo request, which inbound gathers whole first.
	tcp := ipv4Packet(gwAgent, gwPeer, uint8(header.TCPProtocolNumber), make([]byte, 2000))
	assert.Equal(t, packetDeliver, classify(tcp[:40], len(tcp), gwAgent), "tcp, headers only")
	assert.Equal(t, packetDrop, classify(tcp[:40], 30, gwAgent), "longer than the read")
	ping := ipv4Packet(gwAgent, gwPeer, icmp, echoRequest(7, 1, strings.Repeat("x", 1000)))
	assert.Equal(t, packetDrop, classify(ping[:256], len(ping), gwAgent), "echo, not gathered")
	assert.Equal(t, packetEcho, classify(ping, len(ping), gwAgent), "echo, gathered")
}

func TestEchoReply(t *testing.T) {
	req := ipv4Packet(gwAgent, gwPeer, uint8(header.ICMPv4ProtocolNumber), echoRequest(7, 9, "payload"))
	rep := echoReply(req)
	ip := header.IPv4(rep)
	require.True(t, ip.IsValid(len(rep)))
	assert.True(t, ip.IsChecksumValid())
	assert.Equal(t, gwPeer, addrFromTCPIP(ip.SourceAddress()))
	assert.Equal(t, gwAgent, addrFromTCPIP(ip.DestinationAddress()))
	icmp := header.ICMPv4(ip.Payload())
	assert.Equal(t, header.ICMPv4EchoReply, icmp.Type())
	assert.Equal(t, uint16(7), icmp.Ident())
	assert.Equal(t, uint16(9), icmp.Sequence())
	assert.Equal(t, "payload", string(icmp.Payload()))
	assert.Equal(t, uint16(0xffff), checksum.Checksum(icmp, 0), "ICMP checksum")
}

// TestGatewayEcho: over a packet device (a socketpair standing in for a
// TUN device), an echo request the Ping hook confirms is answered, one it
// refuses is not, and Close stops the gateway's goroutines.
func TestGatewayEcho(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	agent := os.NewFile(uintptr(fds[1]), "agent")
	defer agent.Close()
	g, err := NewGateway(GatewayConfig{
		Device: os.NewFile(uintptr(fds[0]), "gateway"), Agent: gwAgent,
		Dial: func(context.Context, string, string) (net.Conn, error) { return nil, ErrClosed },
		Ping: func(_ context.Context, dst netip.Addr) error {
			if dst == gwPeer {
				return nil
			}
			return ErrClosed
		},
	})
	require.NoError(t, err)
	defer g.Close()
	icmp := uint8(header.ICMPv4ProtocolNumber)
	_, err = agent.Write(ipv4Packet(gwAgent, netip.MustParseAddr("100.64.9.9"), icmp, echoRequest(1, 1, "nobody")))
	require.NoError(t, err)
	_, err = agent.Write(ipv4Packet(gwAgent, gwPeer, icmp, echoRequest(1, 2, "peer")))
	require.NoError(t, err)
	require.NoError(t, agent.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 1500)
	n, err := agent.Read(buf)
	require.NoError(t, err)
	ip := header.IPv4(buf[:n])
	assert.Equal(t, gwPeer, addrFromTCPIP(ip.SourceAddress()))
	assert.Equal(t, uint16(2), header.ICMPv4(ip.Payload()).Sequence(), "only the confirmed ping is answered")

	// A ping longer than the reader's head view is answered with all its data.
	data := strings.Repeat("0123456789", 100)
	_, err = agent.Write(ipv4Packet(gwAgent, gwPeer, icmp, echoRequest(1, 3, data)))
	require.NoError(t, err)
	n, err = agent.Read(buf)
	require.NoError(t, err)
	ip = header.IPv4(buf[:n])
	require.True(t, ip.IsValid(n))
	reply := header.ICMPv4(ip.Payload())
	assert.Equal(t, uint16(3), reply.Sequence())
	assert.Equal(t, data, string(reply.Payload()))
	require.Eventually(t, func() bool { return g.Stats().Pings == 2 && g.Stats().Dropped == 1 }, 5*time.Second, 10*time.Millisecond, "%+v", g.Stats())
	require.NoError(t, g.Close())
}

func FuzzGatewayClassify(f *testing.F) {
	f.Add(ipv4Packet(gwAgent, gwPeer, uint8(header.ICMPv4ProtocolNumber), echoRequest(7, 1, "hi")))
	f.Add(ipv4Packet(gwAgent, gwPeer, uint8(header.TCPProtocolNumber), make([]byte, 20)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if classify(b, len(b), gwAgent) == packetEcho {
			rep := echoReply(b)
			if !header.IPv4(rep).IsChecksumValid() {
				t.Fatal("reply with a bad IP checksum")
			}
		}
	})
}

func TestUDPProhibited(t *testing.T) {
	id := stack.TransportEndpointID{LocalAddress: gvnet.ToTCPIP(gwPeer), LocalPort: 53, RemoteAddress: gvnet.ToTCPIP(gwAgent), RemotePort: 40000}
	b := udpProhibited(id)
	ip := header.IPv4(b)
	require.True(t, ip.IsValid(len(b)))
	assert.True(t, ip.IsChecksumValid())
	assert.Equal(t, gwPeer, addrFromTCPIP(ip.SourceAddress()))
	assert.Equal(t, gwAgent, addrFromTCPIP(ip.DestinationAddress()))
	icmp := header.ICMPv4(ip.Payload())
	assert.Equal(t, header.ICMPv4DstUnreachable, icmp.Type())
	assert.Equal(t, header.ICMPv4AdminProhibited, icmp.Code())
	assert.Equal(t, uint16(0xffff), checksum.Checksum(icmp, 0), "ICMP checksum")
	quoted := header.IPv4(icmp.Payload())
	assert.Equal(t, gwAgent, addrFromTCPIP(quoted.SourceAddress()), "the quoted packet is the agent's")
	assert.Equal(t, uint16(53), header.UDP(quoted.Payload()).DestinationPort())
}
