package stun_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	pion "github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/stun"
)

var (
	loopback  = netip.MustParseAddr("127.0.0.1")
	loopback2 = netip.MustParseAddr("127.0.0.2")
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts a server on cfg (netx.OS unless cfg says otherwise)
// and closes it when the test ends.
func startServer(t *testing.T, cfg stun.Config) *stun.Server {
	t.Helper()
	if cfg.Network == nil {
		cfg.Network = netx.OS
	}
	s, err := stun.NewServer(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctxT(t, 5*time.Second)))
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// plainServer is an RFC 8489 server on 127.0.0.1 with a port of its own.
func plainServer(t *testing.T) *stun.Server {
	t.Helper()
	return startServer(t, stun.Config{Primary: netip.AddrPortFrom(loopback, 0)})
}

// rfc5780Server serves RFC 5780 on 127.0.0.1 and 127.0.0.2 (both loopback
// on Linux), on ports the system picks.
func rfc5780Server(t *testing.T) *stun.Server {
	t.Helper()
	pc, err := netx.OS.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(loopback2, 0).String())
	if err != nil {
		t.Skipf("needs 127.0.0.2 as a local address (Linux loopback): %v", err)
	}
	require.NoError(t, pc.Close())
	return startServer(t, stun.Config{
		Primary:   netip.AddrPortFrom(loopback, 0),
		Alternate: netip.AddrPortFrom(loopback2, 0),
	})
}

// endpoints are a server's four sockets: primary, alternate address with
// primary port, primary address with alternate port, alternate both.
func endpoints(s *stun.Server) [4]netip.AddrPort {
	p, o := s.Addr(), s.OtherAddr()
	return [4]netip.AddrPort{
		p,
		netip.AddrPortFrom(o.Addr(), p.Port()),
		netip.AddrPortFrom(p.Addr(), o.Port()),
		o,
	}
}

// opposite is the endpoint with the other address and the other port.
func opposite(s *stun.Server, ap netip.AddrPort) netip.AddrPort {
	e := endpoints(s)
	for i, x := range e {
		if x == ap {
			return e[3-i]
		}
	}
	return netip.AddrPort{}
}

// client opens a UDP socket on 127.0.0.1.
func client(t *testing.T) net.PacketConn {
	t.Helper()
	c, err := netx.OS.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(loopback, 0).String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func localAddr(t *testing.T, c net.PacketConn) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	require.NoError(t, err)
	return ap
}

// build makes a message of type typ with a fresh transaction ID.
func build(t *testing.T, typ pion.MessageType, setters ...pion.Setter) *pion.Message {
	t.Helper()
	m, err := pion.Build(append([]pion.Setter{pion.TransactionID, typ}, setters...)...)
	require.NoError(t, err)
	return m
}

// attr adds an attribute with an arbitrary type and value.
type attr struct {
	t pion.AttrType
	v []byte
}

func (a attr) AddTo(m *pion.Message) error {
	m.Add(a.t, a.v)
	return nil
}

// padding is a PADDING attribute with an n-byte value: the way a client
// makes room for a larger answer (RFC 5780 section 7.6).
func padding(n int) attr { return attr{pion.AttrPadding, make([]byte, n)} }

func changeRequest(changeIP, changePort bool) attr {
	var v byte
	if changeIP {
		v |= 0x04
	}
	if changePort {
		v |= 0x02
	}
	return attr{pion.AttrChangeRequest, []byte{0, 0, 0, v}}
}

// send writes b from c to dst.
func send(t *testing.T, c net.PacketConn, dst netip.AddrPort, b []byte) {
	t.Helper()
	_, err := c.WriteTo(b, net.UDPAddrFromAddrPort(dst))
	require.NoError(t, err)
}

// receive reads the next datagram on c and decodes it as STUN.
func receive(t *testing.T, c net.PacketConn) (*pion.Message, netip.AddrPort) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(3*time.Second)))
	buf := make([]byte, 9000) // room for padded answers
	n, from, err := c.ReadFrom(buf)
	require.NoError(t, err)
	m := new(pion.Message)
	require.NoError(t, pion.Decode(buf[:n], m))
	ap, err := netip.ParseAddrPort(from.String())
	require.NoError(t, err)
	return m, ap
}

// exchange sends req to dst and returns the response and its source.
func exchange(t *testing.T, c net.PacketConn, dst netip.AddrPort, req *pion.Message) (*pion.Message, netip.AddrPort) {
	t.Helper()
	send(t, c, dst, req.Raw)
	m, from := receive(t, c)
	require.Equal(t, req.TransactionID, m.TransactionID, "response to another transaction")
	return m, from
}

// addrOf reads an address attribute decoded into ip and port.
func addrOf(ip net.IP, port int) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), uint16(port))
}
