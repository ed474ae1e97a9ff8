package proxy

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseUDPHeader(t *testing.T) {
	tests := []struct {
		name        string
		in          []byte
		wantDst     addr
		wantPayload string
		wantErr     error
	}{
		{
			name: "ipv4", in: append([]byte{0, 0, 0, 1, 10, 0, 0, 1, 0, 53}, "q"...),
			wantDst: addr{ip: netip.MustParseAddr("10.0.0.1"), port: 53}, wantPayload: "q",
		},
		{
			name:    "ipv6",
			in:      append(append([]byte{0, 0, 0}, ipDst("2001:db8::1", 443)...), "x"...),
			wantDst: addr{ip: netip.MustParseAddr("2001:db8::1"), port: 443}, wantPayload: "x",
		},
		{
			name:    "ipv4-mapped unmapped",
			in:      append([]byte{0, 0, 0}, ipDst("::ffff:10.0.0.1", 53)...),
			wantDst: addr{ip: netip.MustParseAddr("10.0.0.1"), port: 53},
		},
		{
			name:    "domain",
			in:      append(append([]byte{0, 0, 0}, nameDst("dns.example", 53)...), "query"...),
			wantDst: addr{name: "dns.example", port: 53}, wantPayload: "query",
		},
		{name: "rsv ignored", in: []byte{0xff, 0xff, 0, 1, 10, 0, 0, 1, 0, 53}, wantDst: addr{ip: netip.MustParseAddr("10.0.0.1"), port: 53}},
		{name: "fragment", in: []byte{0, 0, 1, 1, 10, 0, 0, 1, 0, 53}, wantErr: errFragment},
		{name: "last fragment", in: []byte{0, 0, 0x81, 1, 10, 0, 0, 1, 0, 53}, wantErr: errFragment},
		{name: "empty", in: nil, wantErr: errTruncated},
		{name: "header only", in: []byte{0, 0, 0, 1}, wantErr: errTruncated},
		{name: "truncated ipv4", in: []byte{0, 0, 0, 1, 10, 0, 0, 1, 0}, wantErr: errTruncated},
		{name: "truncated ipv6", in: []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}, wantErr: errTruncated},
		{name: "truncated domain", in: []byte{0, 0, 0, 3, 5, 'a', 'b', 0, 53}, wantErr: errTruncated},
		{name: "bad atyp", in: []byte{0, 0, 0, 2, 10, 0, 0, 1, 0, 53}, wantErr: errATYP},
		{name: "bad name", in: append([]byte{0, 0, 0}, nameDst("a b", 53)...), wantErr: errBadHost},
		{name: "empty name", in: append([]byte{0, 0, 0}, nameDst("", 53)...), wantErr: errBadHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst, payload, err := parseUDPHeader(tt.in)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantDst, dst)
			assert.Equal(t, tt.wantPayload, string(payload))
		})
	}
}

// udpClient is a SOCKS5 client with a UDP association.
type udpClient struct {
	t     *testing.T
	ctrl  net.Conn
	pc    net.PacketConn
	relay *net.UDPAddr
}

// associate opens a UDP association through the proxy at proxyAddr; port,
// if not zero, is the client port announced in the request.
func associate(t *testing.T, proxyAddr string, pc net.PacketConn, port int) *udpClient {
	t.Helper()
	c := dial(t, proxyAddr)
	socksGreet(t, c, testCreds)
	rep, bnd := socksRequest(t, c, cmdUDPAssociate, ipDst("0.0.0.0", port))
	require.Equal(t, repSucceeded, rep)
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), bnd.ip, "relay bound on the listener's IP")
	require.NotZero(t, bnd.port)
	return &udpClient{t: t, ctrl: c, pc: pc, relay: net.UDPAddrFromAddrPort(netip.AddrPortFrom(bnd.ip, bnd.port))}
}

func udpSocket(t *testing.T) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

func (u *udpClient) send(hdr []byte, payload string) {
	u.t.Helper()
	_, err := u.pc.WriteTo(append(bytes.Clone(hdr), payload...), u.relay)
	require.NoError(u.t, err)
}

// recv returns the next datagram from the relay, or nil after wait.
func (u *udpClient) recv(wait time.Duration) []byte {
	u.t.Helper()
	require.NoError(u.t, u.pc.SetReadDeadline(time.Now().Add(wait)))
	buf := make([]byte, maxDatagram)
	n, from, err := u.pc.ReadFrom(buf)
	if isTimeout(err) {
		return nil
	}
	require.NoError(u.t, err)
	require.Equal(u.t, u.relay.String(), from.String())
	return buf[:n]
}

func TestUDPAssociate(t *testing.T) {
	echoAddr, echoed := udpEcho(t)
	port := echoAddr.Port
	tn := newTestNet()
	_, proxyAddr := startSOCKS(t, tn.config(testCreds))
	u := associate(t, proxyAddr, udpSocket(t), 0)

	ipHdr := append([]byte{0, 0, 0}, ipDst("127.0.0.1", port)...)
	u.send(ipHdr, "ping")
	assert.Equal(t, append(bytes.Clone(ipHdr), "ping"...), u.recv(testTimeout))
	assert.Equal(t, []byte("ping"), <-echoed)

	// A name reaches the Dialer unresolved; the reply carries it back.
	nameHdr := append([]byte{0, 0, 0}, nameDst("udp-name", port)...)
	u.send(nameHdr, "by name")
	assert.Equal(t, append(bytes.Clone(nameHdr), "by name"...), u.recv(testTimeout))
	assert.Equal(t, []byte("by name"), <-echoed)

	// Fragments are dropped; the echo sees only what follows.
	u.send([]byte{0, 0, 1, 1, 127, 0, 0, 1, byte(port >> 8), byte(port)}, "fragment")
	u.send(ipHdr, "after")
	assert.Equal(t, append(bytes.Clone(ipHdr), "after"...), u.recv(testTimeout))
	assert.Equal(t, []byte("after"), <-echoed)

	// A denied destination is dropped, dialed and reported once.
	deniedHdr := append([]byte{0, 0, 0}, nameDst("denied.test", 53)...)
	u.send(deniedHdr, "1")
	u.send(deniedHdr, "2")
	u.send(ipHdr, "still open")
	assert.Equal(t, append(bytes.Clone(ipHdr), "still open"...), u.recv(testTimeout))
	assert.Equal(t, []byte("still open"), <-echoed)

	// Another source port on the client's IP is not the client.
	other := &udpClient{t: t, pc: udpSocket(t), relay: u.relay}
	other.send(ipHdr, "intruder")
	u.send(ipHdr, "last")
	assert.Equal(t, append(bytes.Clone(ipHdr), "last"...), u.recv(testTimeout))
	assert.Equal(t, []byte("last"), <-echoed)
	assert.Nil(t, other.recv(50*time.Millisecond))

	var udpAttempts []string
	for _, a := range tn.Attempts() {
		require.Equal(t, "udp", a.Network)
		require.Equal(t, u.ctrl.LocalAddr().String(), a.Client.String())
		udpAttempts = append(udpAttempts, a.Address)
		if a.Address == "denied.test:53" {
			require.ErrorIs(t, a.Err, ErrDenied)
		} else {
			require.NoError(t, a.Err)
		}
	}
	assert.Equal(t, []string{echoAddr.String(), "udp-name:" + itoa(port), "denied.test:53"}, udpAttempts)

	// The association ends with its TCP connection: the relay port is
	// released.
	require.NoError(t, u.ctrl.Close())
	eventually(t, func() bool {
		pc, err := net.ListenPacket("udp", u.relay.String())
		if err == nil {
			_ = pc.Close()
		}
		return err == nil
	}, "relay socket closed with the control connection")
}

// TestUDPAssociatePinnedPort checks a port announced in the request: only
// that source port is relayed, even for the first datagram.
func TestUDPAssociatePinnedPort(t *testing.T) {
	echoAddr, echoed := udpEcho(t)
	tn := newTestNet()
	_, proxyAddr := startSOCKS(t, tn.config(testCreds))
	pc := udpSocket(t)
	u := associate(t, proxyAddr, pc, pc.LocalAddr().(*net.UDPAddr).Port)
	hdr := append([]byte{0, 0, 0}, ipDst("127.0.0.1", echoAddr.Port)...)

	other := &udpClient{t: t, pc: udpSocket(t), relay: u.relay}
	other.send(hdr, "first but foreign")
	u.send(hdr, "mine")
	assert.Equal(t, append(bytes.Clone(hdr), "mine"...), u.recv(testTimeout))
	assert.Equal(t, []byte("mine"), <-echoed)
	assert.Nil(t, other.recv(50*time.Millisecond))
}

// TestUDPIdle checks a destination's socket is closed after udpIdle and
// dialed (and reported) again on the next datagram.
func TestUDPIdle(t *testing.T) {
	echoAddr, _ := udpEcho(t)
	tn := newTestNet()
	s, err := NewSOCKS5(tn.config(nil))
	require.NoError(t, err)
	s.udpIdle = 100 * time.Millisecond
	proxyAddr := serve(t, s)
	c := dial(t, proxyAddr)
	socksGreet(t, c, nil)
	rep, bnd := socksRequest(t, c, cmdUDPAssociate, ipDst("0.0.0.0", 0))
	require.Equal(t, repSucceeded, rep)
	u := &udpClient{t: t, ctrl: c, pc: udpSocket(t), relay: net.UDPAddrFromAddrPort(netip.AddrPortFrom(bnd.ip, bnd.port))}
	hdr := append([]byte{0, 0, 0}, ipDst("127.0.0.1", echoAddr.Port)...)

	u.send(hdr, "1")
	require.NotNil(t, u.recv(testTimeout))
	conns := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns)
	}
	assert.Equal(t, 2, conns(), "relay socket and one destination")
	eventually(t, func() bool { return conns() == 1 }, "idle destination closed")
	u.send(hdr, "2")
	require.NotNil(t, u.recv(testTimeout))
	assert.Len(t, tn.Attempts(), 2)
}
