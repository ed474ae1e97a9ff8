package netx_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/pion/transport/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
)

// networks runs f once on OS and once on an opaque network whose sockets
// behave like a lab host's.
func networks(t *testing.T, f func(t *testing.T, pn transport.Net)) {
	t.Helper()
	for _, tt := range []struct {
		name string
		n    netx.Network
	}{
		{name: "os", n: netx.OS},
		{name: "opaque", n: &opaqueNetwork{}},
	} {
		t.Run(tt.name, func(t *testing.T) { f(t, pionNet(t, tt.n)) })
	}
}

func listenUDP(t *testing.T, pn transport.Net) (transport.UDPConn, *net.UDPAddr) {
	t.Helper()
	u, err := pn.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	require.NoError(t, u.SetDeadline(time.Now().Add(5*time.Second)))
	ua, ok := u.LocalAddr().(*net.UDPAddr)
	require.True(t, ok, "LocalAddr is %T, pion needs *net.UDPAddr", u.LocalAddr())
	require.NotZero(t, ua.Port)
	return u, ua
}

// otherAddr is a net.Addr that is not a *net.UDPAddr, as some callers
// hand to WriteTo.
type otherAddr string

func (otherAddr) Network() string  { return "udp" }
func (a otherAddr) String() string { return string(a) }

func TestUDPConnMethods(t *testing.T) {
	networks(t, func(t *testing.T, pn transport.Net) {
		a, aAddr := listenUDP(t, pn)
		b, bAddr := listenUDP(t, pn)
		tests := []struct {
			name  string
			write func(to *net.UDPAddr, p []byte) (int, error)
			read  func(p []byte) (int, *net.UDPAddr, error)
		}{
			{name: "WriteTo/ReadFrom",
				write: func(to *net.UDPAddr, p []byte) (int, error) { return a.WriteTo(p, to) },
				read: func(p []byte) (int, *net.UDPAddr, error) {
					n, from, err := b.ReadFrom(p)
					ua, _ := from.(*net.UDPAddr)
					return n, ua, err
				}},
			{name: "16-byte IPv4/ReadFromUDP",
				write: func(to *net.UDPAddr, p []byte) (int, error) {
					return a.WriteTo(p, &net.UDPAddr{IP: to.IP.To16(), Port: to.Port})
				},
				read: b.ReadFromUDP},
			{name: "foreign addr type/ReadMsgUDP",
				write: func(to *net.UDPAddr, p []byte) (int, error) { return a.WriteTo(p, otherAddr(to.String())) },
				read: func(p []byte) (int, *net.UDPAddr, error) {
					n, oobn, flags, from, err := b.ReadMsgUDP(p, make([]byte, 64))
					assert.Zero(t, oobn)
					assert.Zero(t, flags)
					return n, from, err
				}},
			{name: "WriteToUDP/Read",
				write: func(to *net.UDPAddr, p []byte) (int, error) { return a.WriteToUDP(p, to) },
				read: func(p []byte) (int, *net.UDPAddr, error) {
					n, err := b.Read(p)
					return n, aAddr, err
				}},
			{name: "WriteMsgUDP/ReadFromUDP",
				write: func(to *net.UDPAddr, p []byte) (int, error) {
					n, oobn, err := a.WriteMsgUDP(p, nil, to)
					assert.Zero(t, oobn)
					return n, err
				},
				read: b.ReadFromUDP},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				msg := []byte(tt.name)
				n, err := tt.write(bAddr, msg)
				require.NoError(t, err)
				assert.Equal(t, len(msg), n)
				buf := make([]byte, 1500)
				n, from, err := tt.read(buf)
				require.NoError(t, err)
				assert.Equal(t, msg, buf[:n])
				assert.Equal(t, aAddr.String(), from.String())
			})
		}
	})
}

func TestUDPConnErrors(t *testing.T) {
	networks(t, func(t *testing.T, pn transport.Net) {
		u, _ := listenUDP(t, pn)
		to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
		tests := []struct {
			name     string
			call     func() error
			wantIs   error
			contains string
		}{
			{name: "Write unconnected", call: func() error { _, err := u.Write([]byte("x")); return err }, contains: "missing address"},
			{name: "WriteTo nil", call: func() error { _, err := u.WriteTo([]byte("x"), nil); return err }, contains: "missing address"},
			{name: "WriteToUDP nil", call: func() error { _, err := u.WriteToUDP([]byte("x"), nil); return err }, contains: "missing address"},
			{name: "WriteMsgUDP oob", call: func() error { _, _, err := u.WriteMsgUDP([]byte("x"), []byte{1}, to); return err }, wantIs: errors.ErrUnsupported},
			{name: "SyscallConn", call: func() error {
				sc, ok := u.(syscall.Conn)
				require.True(t, ok)
				_, err := sc.SyscallConn()
				return err
			}, wantIs: errors.ErrUnsupported},
			{name: "SetReadBuffer", call: func() error { return u.SetReadBuffer(1 << 20) }},
			{name: "SetWriteBuffer", call: func() error { return u.SetWriteBuffer(1 << 20) }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				switch {
				case tt.wantIs != nil:
					assert.ErrorIs(t, err, tt.wantIs)
				case tt.contains != "":
					assert.ErrorContains(t, err, tt.contains)
					var oe *net.OpError
					assert.ErrorAs(t, err, &oe)
				default:
					assert.NoError(t, err)
				}
			})
		}
		t.Run("read deadline", func(t *testing.T) {
			require.NoError(t, u.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
			_, _, err := u.ReadFrom(make([]byte, 10))
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			assert.True(t, ne.Timeout())
		})
		t.Run("close unblocks read", func(t *testing.T) {
			v, _ := listenUDP(t, pn)
			require.NoError(t, v.SetReadDeadline(time.Time{}))
			done := make(chan error, 1)
			go func() {
				_, _, err := v.ReadFromUDP(make([]byte, 10))
				done <- err
			}()
			require.NoError(t, v.Close())
			select {
			case err := <-done:
				assert.ErrorIs(t, err, net.ErrClosed)
			case <-time.After(5 * time.Second):
				t.Fatal("ReadFromUDP still blocked after Close")
			}
		})
	})
}

// TestDialUDPWithLocalAddr covers the filtering wrapper: pion asks for a
// particular local address, which a Network cannot bind for a dial.
func TestDialUDPWithLocalAddr(t *testing.T) {
	networks(t, func(t *testing.T, pn transport.Net) {
		peer, peerAddr := listenUDP(t, pn)
		stranger, _ := listenUDP(t, pn)
		d, err := pn.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, peerAddr)
		require.NoError(t, err)
		defer d.Close()
		require.NoError(t, d.SetDeadline(time.Now().Add(5*time.Second)))
		dAddr, ok := d.LocalAddr().(*net.UDPAddr)
		require.True(t, ok)
		assert.Equal(t, peerAddr.String(), d.RemoteAddr().String())

		_, err = d.Write([]byte("hello"))
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, from, err := peer.ReadFromUDP(buf)
		require.NoError(t, err)
		assert.Equal(t, "hello", string(buf[:n]))
		assert.Equal(t, dAddr.String(), from.String())

		// Loopback keeps order: the stranger's datagram arrives first
		// and must be dropped.
		_, err = stranger.WriteTo([]byte("intruder"), dAddr)
		require.NoError(t, err)
		_, err = peer.WriteTo([]byte("reply"), dAddr)
		require.NoError(t, err)
		n, err = d.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, "reply", string(buf[:n]))

		_, err = d.WriteTo([]byte("x"), peerAddr)
		assert.ErrorIs(t, err, net.ErrWriteToConnected)
	})
}

// TestDialUDPWithoutLocalAddr covers the dialed path: the Network picks
// the source address, so LocalAddr is concrete.
func TestDialUDPWithoutLocalAddr(t *testing.T) {
	networks(t, func(t *testing.T, pn transport.Net) {
		peer, peerAddr := listenUDP(t, pn)
		d, err := pn.DialUDP("udp4", nil, peerAddr)
		require.NoError(t, err)
		defer d.Close()
		require.NoError(t, d.SetDeadline(time.Now().Add(5*time.Second)))
		dAddr, ok := d.LocalAddr().(*net.UDPAddr)
		require.True(t, ok)
		assert.Equal(t, "127.0.0.1", dAddr.IP.String())
		assert.NoError(t, d.SetReadBuffer(1<<20))

		_, _, err = d.WriteMsgUDP([]byte("ping"), nil, nil)
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, from, err := peer.ReadFromUDP(buf)
		require.NoError(t, err)
		assert.Equal(t, "ping", string(buf[:n]))
		assert.Equal(t, dAddr.String(), from.String())

		_, err = peer.WriteToUDP([]byte("pong"), from)
		require.NoError(t, err)
		n, src, err := d.ReadFrom(buf)
		require.NoError(t, err)
		assert.Equal(t, "pong", string(buf[:n]))
		assert.Equal(t, peerAddr.String(), src.String())
	})
}

func TestPionNetworkNames(t *testing.T) {
	pn := pionNet(t, netx.OS)
	tests := []struct {
		name    string
		call    func() error
		wantErr string
	}{
		{name: "ListenUDP tcp", call: func() error { _, err := pn.ListenUDP("tcp", nil); return err }, wantErr: "listen tcp: unknown network tcp"},
		{name: "DialUDP tcp", call: func() error { _, err := pn.DialUDP("tcp", nil, &net.UDPAddr{}); return err }, wantErr: "dial tcp: unknown network tcp"},
		{name: "DialUDP no raddr", call: func() error { _, err := pn.DialUDP("udp", nil, nil); return err }, wantErr: "dial udp: missing address"},
		{name: "ListenTCP udp", call: func() error { _, err := pn.ListenTCP("udp", nil); return err }, wantErr: "listen udp: unknown network udp"},
		{name: "DialTCP udp", call: func() error { _, err := pn.DialTCP("udp", nil, &net.TCPAddr{}); return err }, wantErr: "dial udp: unknown network udp"},
		{name: "DialTCP no raddr", call: func() error { _, err := pn.DialTCP("tcp", nil, nil); return err }, wantErr: "dial tcp: missing address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.EqualError(t, tt.call(), tt.wantErr)
		})
	}
}
