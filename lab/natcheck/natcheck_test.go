package natcheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/nat"
	"github.com/latticelab/lattice/netx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2") // Linux answers for all of 127/8
)

// tb is what newServer needs of *testing.T and *testing.F.
type tb interface {
	Helper()
	Cleanup(func())
	Fatalf(string, ...any)
}

// newServer starts a Server on two loopback addresses, on random ports
// (retrying when one is taken), closed at cleanup.
func newServer(t tb) (*Server, Endpoints) {
	t.Helper()
	var last error
	for range 20 {
		p := uint16(20000 + rand.IntN(40000))
		ep := Endpoints{Primary: lo1, Alternate: lo2, Port: p, AltPort: p + 1}
		s, err := NewServer(context.Background(), netx.OS, ep)
		if err == nil {
			t.Cleanup(func() { s.Close() })
			return s, ep
		}
		last = err
	}
	t.Fatalf("start server: %v", last)
	return nil, Endpoints{}
}

func clientConn(t tb) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo1, 0)))
	if err != nil {
		t.Fatalf("client socket: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func request(txid uint64, flags byte) []byte {
	req := make([]byte, requestLen)
	copy(req, magic)
	binary.BigEndian.PutUint64(req[4:12], txid)
	req[12] = flags
	return req
}

// response is what the server must answer req from a client at src.
func response(req []byte, src netip.AddrPort) []byte {
	resp := make([]byte, responseLen)
	copy(resp, req[:12])
	a := src.Addr().As16()
	copy(resp[12:28], a[:])
	binary.BigEndian.PutUint16(resp[28:30], src.Port())
	return resp
}

type datagram struct {
	data []byte
	from netip.AddrPort
}

// read returns the next datagram on c, or ok false after wait.
func read(t tb, c *net.UDPConn, wait time.Duration) (d datagram, ok bool) {
	t.Helper()
	buf := make([]byte, 128)
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatalf("deadline: %v", err)
	}
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return d, false
		}
		t.Fatalf("read: %v", err)
	}
	return datagram{buf[:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port())}, true
}

func TestServerAnswersPerChangeFlags(t *testing.T) {
	_, ep := newServer(t)
	c := clientConn(t)
	self := c.LocalAddr().(*net.UDPAddr).AddrPort()
	for _, to := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		for flags := range byte(4) {
			dst := ep.addr(to[0], to[1])
			req := request(rand.Uint64(), flags)
			_, err := c.WriteToUDPAddrPort(req, dst)
			require.NoError(t, err)
			got, ok := read(t, c, 2*time.Second)
			require.True(t, ok, "no answer from %v to flags %b", dst, flags)
			want := ep.addr(to[0] != (flags&changeIP != 0), to[1] != (flags&changePort != 0))
			assert.Equal(t, want, got.from, "sent to %v with flags %b", dst, flags)
			assert.Equal(t, response(req, self), got.data, "answer to %v with flags %b", dst, flags)
		}
	}
}

func TestServerIgnoresMalformed(t *testing.T) {
	_, ep := newServer(t)
	c := clientConn(t)
	self := c.LocalAddr().(*net.UDPAddr).AddrPort()
	valid := request(42, 0)
	stun := []byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	bad := map[string][]byte{
		"empty":         {},
		"magic only":    magic,
		"one short":     valid[:requestLen-1],
		"one long":      append(bytes.Clone(valid), 0),
		"wrong magic":   append([]byte("LNC2"), valid[4:]...),
		"stun request":  stun,
		"response-size": response(valid, self),
	}
	for _, to := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		dst := ep.addr(to[0], to[1])
		for name, b := range bad {
			_, err := c.WriteToUDPAddrPort(b, dst)
			require.NoError(t, err, name)
		}
		// The server reads in order: the valid probe's answer comes first
		// only if nothing before it was answered, and at all only if the
		// serving goroutine survived.
		_, err := c.WriteToUDPAddrPort(valid, dst)
		require.NoError(t, err)
		got, ok := read(t, c, 2*time.Second)
		require.True(t, ok, "server at %v stopped answering after malformed datagrams", dst)
		assert.Equal(t, response(valid, self), got.data, "first datagram back from %v", dst)
	}
	if d, ok := read(t, c, 100*time.Millisecond); ok {
		t.Errorf("malformed datagram answered: % x from %v", d.data, d.from)
	}
}

func TestNewServerValidates(t *testing.T) {
	tests := []struct {
		name    string
		ep      Endpoints
		wantErr string
	}{
		{"one address", Endpoints{Primary: lo1, Alternate: lo1, Port: 1, AltPort: 2},
			"natcheck: server needs two distinct addresses, got 127.0.0.1 and 127.0.0.1"},
		{"no alternate", Endpoints{Primary: lo1, Port: 1, AltPort: 2},
			"natcheck: server needs two distinct addresses, got 127.0.0.1 and invalid IP"},
		{"one port", Endpoints{Primary: lo1, Alternate: lo2, Port: 7, AltPort: 7},
			"natcheck: server needs two distinct non-zero ports, got 7 and 7"},
		{"zero port", Endpoints{Primary: lo1, Alternate: lo2, Port: 0, AltPort: 7},
			"natcheck: server needs two distinct non-zero ports, got 0 and 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(context.Background(), netx.OS, tt.ep)
			assert.EqualError(t, err, tt.wantErr)
		})
	}
}

// filterNet stands in for a NAT's filter in front of the client: a socket
// takes datagrams only from endpoints it has sent to (byPort), or from
// addresses it has sent to.
type filterNet struct {
	netx.Network
	byPort bool
}

func (n filterNet) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	c, err := n.Network.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &filterConn{PacketConn: c, byPort: n.byPort, sent: map[netip.AddrPort]bool{}}, nil
}

type filterConn struct {
	net.PacketConn
	byPort bool
	mu     sync.Mutex
	sent   map[netip.AddrPort]bool
}

func (c *filterConn) key(a net.Addr) netip.AddrPort {
	ap := a.(*net.UDPAddr).AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if !c.byPort {
		ap = netip.AddrPortFrom(ap.Addr(), 0)
	}
	return ap
}

func (c *filterConn) WriteTo(b []byte, to net.Addr) (int, error) {
	c.mu.Lock()
	c.sent[c.key(to)] = true
	c.mu.Unlock()
	return c.PacketConn.WriteTo(b, to)
}

func (c *filterConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, from, err
		}
		c.mu.Lock()
		ok := c.sent[c.key(from)]
		c.mu.Unlock()
		if ok {
			return n, from, nil
		}
	}
}

func TestDiscoverLoopback(t *testing.T) {
	_, ep := newServer(t)
	tests := []struct {
		name string
		n    netx.Network
		want nat.Behavior
	}{
		{"open", netx.OS, nat.EndpointIndependent},
		{"address filter", filterNet{netx.OS, false}, nat.AddressDependent},
		{"address and port filter", filterNet{netx.OS, true}, nat.AddressAndPortDependent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Discover(context.Background(), tt.n, ep, Options{Wait: 100 * time.Millisecond})
			require.NoError(t, err)
			assert.False(t, res.NATed, "loopback is not translated: %v", res.Mapped)
			assert.Equal(t, nat.EndpointIndependent, res.Mapping, "mapped %v", res.Mapped)
			assert.Equal(t, tt.want, res.Filtering)
			assert.Equal(t, lo1, res.Mapped[0].Addr())
			assert.Equal(t, "no NAT", res.String())
		})
	}
}

func TestDiscoverNoServer(t *testing.T) {
	s, ep := newServer(t)
	require.NoError(t, s.Close())
	_, err := Discover(context.Background(), netx.OS, ep, Options{Wait: 50 * time.Millisecond, Tries: 1})
	require.ErrorIs(t, err, ErrNoResponse)
	assert.Contains(t, err.Error(), "mapping test 1 to "+ep.addr(false, false).String())
}

// FuzzServer sends the server arbitrary datagrams: it answers exactly the
// well-formed requests, with the request's id and the sender's endpoint,
// and keeps serving.
func FuzzServer(f *testing.F) {
	f.Add(request(1, 0))
	f.Add(request(2, changeIP|changePort))
	f.Add(request(3, 0xff))
	f.Add([]byte("LNC1"))
	f.Add(response(request(4, 0), netip.MustParseAddrPort("127.0.0.1:9")))
	f.Add(append([]byte("LNC1"), make([]byte, 60)...))
	_, ep := newServer(f)
	c := clientConn(f)
	self := c.LocalAddr().(*net.UDPAddr).AddrPort()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 100 { // the server reads 64 bytes; longer is the same case
			return
		}
		_, err := c.WriteToUDPAddrPort(data, ep.addr(false, false))
		require.NoError(t, err)
		marker := request(rand.Uint64(), 0)
		_, err = c.WriteToUDPAddrPort(marker, ep.addr(false, false))
		require.NoError(t, err)
		var got [][]byte
		for {
			d, ok := read(t, c, 2*time.Second)
			require.True(t, ok, "no answer to the marker probe after % x", data)
			if bytes.Equal(d.data, response(marker, self)) {
				break
			}
			got = append(got, d.data)
		}
		if len(data) == requestLen && bytes.HasPrefix(data, magic) {
			require.Equal(t, [][]byte{response(data, self)}, got)
		} else {
			require.Empty(t, got, "answered % x", data)
		}
	})
}

// fakeConn answers probe's first request with one datagram, then times out.
type fakeConn struct {
	net.PacketConn // nil: only what probe calls is implemented
	answer         []byte
	echo           bool // put the request's magic and id in front of answer
	req            []byte
	sent           bool
}

type timeout struct{}

func (timeout) Error() string   { return "i/o timeout" }
func (timeout) Timeout() bool   { return true }
func (timeout) Temporary() bool { return true }

func (c *fakeConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.req = bytes.Clone(b)
	return len(b), nil
}

func (c *fakeConn) SetReadDeadline(time.Time) error { return nil }

func (c *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if c.sent {
		return 0, nil, &net.OpError{Op: "read", Err: timeout{}}
	}
	c.sent = true
	a := bytes.Clone(c.answer)
	if c.echo && len(a) >= 12 {
		copy(a, c.req[:12])
	}
	return copy(b, a), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3478}, nil
}

// FuzzProbeResponse feeds the client arbitrary answers: it takes exactly a
// well-formed answer to its own request, and the endpoint it returns
// encodes back to the answer's bytes.
func FuzzProbeResponse(f *testing.F) {
	req := request(0, 0)
	f.Add(response(req, netip.MustParseAddrPort("203.0.113.7:40000")), true)
	f.Add(response(req, netip.MustParseAddrPort("[2001:db8::1]:1")), true)
	f.Add(response(req, netip.MustParseAddrPort("203.0.113.7:40000")), false)
	f.Add(req, true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, answer []byte, echo bool) {
		c := &fakeConn{answer: answer, echo: echo}
		mapped, ok, err := probe(context.Background(), c, netip.MustParseAddrPort("127.0.0.1:3478"), 0, Options{Tries: 1, Wait: time.Millisecond})
		require.NoError(t, err)
		got := bytes.Clone(answer)
		if echo && len(got) >= 12 {
			copy(got, c.req[:12])
		}
		wellFormed := len(got) == responseLen && bytes.Equal(got[:12], c.req[:12])
		require.Equal(t, wellFormed, ok, "answer % x to request % x", got, c.req)
		if ok {
			assert.Equal(t, got, response(c.req, mapped), "mapped %v does not encode back", mapped)
		}
	})
}
