package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestNewConfig(t *testing.T) {
	dial := newTestNet().Dial
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "defaults", cfg: Config{Dial: dial}},
		{name: "no dialer", cfg: Config{}, wantErr: "proxy: config: Dial is required"},
		{name: "empty username", cfg: Config{Dial: dial, Credentials: &Credentials{Password: "p"}}, wantErr: "proxy: config: username and password must be 1 to 255 bytes"},
		{name: "empty password", cfg: Config{Dial: dial, Credentials: &Credentials{Username: "u"}}, wantErr: "proxy: config: username and password must be 1 to 255 bytes"},
		{name: "long password", cfg: Config{Dial: dial, Credentials: &Credentials{Username: "u", Password: strings.Repeat("p", 256)}}, wantErr: "proxy: config: username and password must be 1 to 255 bytes"},
		{name: "colon in username", cfg: Config{Dial: dial, Credentials: &Credentials{Username: "u:v", Password: "p"}}, wantErr: "proxy: config: username contains a colon"},
		{name: "negative timeout", cfg: Config{Dial: dial, HandshakeTimeout: -1}, wantErr: "proxy: config: negative HandshakeTimeout -1ns, DialTimeout 30s or MaxConns 1024"},
		{name: "negative max conns", cfg: Config{Dial: dial, MaxConns: -1}, wantErr: "proxy: config: negative HandshakeTimeout 10s, DialTimeout 30s or MaxConns -1"},
	}
	for _, tt := range tests {
		for _, kind := range []struct {
			name string
			new  func(Config) (*Server, error)
		}{{"socks5", NewSOCKS5}, {"http", NewHTTP}} {
			t.Run(tt.name+"/"+kind.name, func(t *testing.T) {
				s, err := kind.new(tt.cfg)
				if tt.wantErr != "" {
					require.EqualError(t, err, tt.wantErr)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, defaultHandshakeTimeout, s.cfg.HandshakeTimeout)
				assert.Equal(t, defaultDialTimeout, s.cfg.DialTimeout)
				assert.Equal(t, defaultMaxConns, s.cfg.MaxConns)
				require.NoError(t, s.Close())
			})
		}
	}
}

func TestServeAfterClose(t *testing.T) {
	for _, newServer := range []func(Config) (*Server, error){NewSOCKS5, NewHTTP} {
		s, err := newServer(newTestNet().config(nil))
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "idempotent")
		ln := listen(t)
		require.ErrorIs(t, s.Serve(ln), ErrClosed)
		_, err = ln.Accept()
		require.ErrorIs(t, err, net.ErrClosed, "Serve closes its listener")
	}
}

// TestServeListenerClosed checks Serve returns the listener's error when
// the caller closes it, and the server keeps working on others.
func TestServeListenerClosed(t *testing.T) {
	for _, newServer := range []func(Config) (*Server, error){NewSOCKS5, NewHTTP} {
		s, err := newServer(newTestNet().config(nil))
		require.NoError(t, err)
		ln := listen(t)
		done := make(chan error, 1)
		go func() { done <- s.Serve(ln) }()
		proxyAddr := serve(t, s)
		require.NoError(t, ln.Close())
		select {
		case err := <-done:
			require.ErrorIs(t, err, net.ErrClosed)
		case <-time.After(testTimeout):
			t.Fatal("Serve did not return after its listener closed")
		}
		c := dial(t, proxyAddr)
		_, err = c.Write([]byte{5, 1, 0})
		require.NoError(t, err)
	}
}

func TestMaxConns(t *testing.T) {
	t.Run("socks5", func(t *testing.T) {
		cfg := newTestNet().config(nil)
		cfg.MaxConns = 2
		_, proxyAddr := startSOCKS(t, cfg)
		held := []net.Conn{dial(t, proxyAddr), dial(t, proxyAddr)}
		for _, c := range held {
			socksGreet(t, c, nil) // admitted and being served
		}
		over := dial(t, proxyAddr)
		b, err := io.ReadAll(over)
		require.NoError(t, err, "closed at once, not reset or left waiting")
		assert.Empty(t, b)

		require.NoError(t, held[0].Close())
		eventually(t, func() bool {
			c := dial(t, proxyAddr)
			defer c.Close()
			_, _ = c.Write([]byte{5, 1, 0})
			got := make([]byte, 2)
			_, err := io.ReadFull(c, got)
			return err == nil
		}, "a slot frees when a client leaves")
	})
	t.Run("http", func(t *testing.T) {
		srv, _ := backend(t)
		cfg := newTestNet().config(nil)
		cfg.MaxConns = 1
		_, proxyAddr := startHTTP(t, cfg)
		req := fmt.Sprintf("GET http://some-name:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", portOf(t, srv.Listener.Addr().String()))
		resp, _, held, _ := rawHTTP(t, proxyAddr, req) // keep-alive: stays admitted
		require.Equal(t, http.StatusOK, resp.StatusCode)

		over := dial(t, proxyAddr)
		_, _ = io.WriteString(over, req)
		b, _ := io.ReadAll(over)
		assert.Empty(t, b, "closed without an answer")

		require.NoError(t, held.Close())
		eventually(t, func() bool {
			c := dial(t, proxyAddr)
			defer c.Close()
			_, _ = io.WriteString(c, req)
			b := make([]byte, 12)
			_, err := io.ReadFull(c, b)
			return err == nil && string(b) == "HTTP/1.1 200"
		}, "a slot frees when a client leaves")
	})
}

// TestCloseWhileActive closes servers with clients in every state: Close
// returns promptly, clients see their connections end, and no goroutine
// is left behind.
func TestCloseWhileActive(t *testing.T) {
	// Registered first, so it runs after every other cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	echoAddr, _ := tcpServer(t, echo)
	udpAddr, _ := udpEcho(t)
	hang := make(chan struct{})
	srv, _ := backend(t)
	slowSrv := newHangingBackend(t, hang)
	tn := newTestNet()

	cfg := tn.config(nil)
	cfg.DialTimeout = time.Minute // Close, not the timeout, must end the dial to slow.test
	socks, err := NewSOCKS5(cfg)
	require.NoError(t, err)
	httpProxy, err := NewHTTP(cfg)
	require.NoError(t, err)
	socksAddr, httpAddr := serve(t, socks), serve(t, httpProxy)

	// SOCKS5: a spliced CONNECT, a client mid-handshake, a UDP association,
	// a dial in progress.
	tunnel, rep, _ := socksConnect(t, socksAddr, nil, ipDst("127.0.0.1", portOf(t, echoAddr)))
	require.Equal(t, repSucceeded, rep)
	midHandshake := dial(t, socksAddr)
	_, err = midHandshake.Write([]byte{5, 1})
	require.NoError(t, err)
	assoc := dial(t, socksAddr)
	socksGreet(t, assoc, nil)
	rep, bnd := socksRequest(t, assoc, cmdUDPAssociate, ipDst("0.0.0.0", 0))
	require.Equal(t, repSucceeded, rep)
	u := &udpClient{t: t, ctrl: assoc, pc: udpSocket(t), relay: net.UDPAddrFromAddrPort(netipAddrPort(bnd))}
	u.send(append([]byte{0, 0, 0}, ipDst("127.0.0.1", udpAddr.Port)...), "x")
	require.NotNil(t, u.recv(testTimeout))
	dialing := dial(t, socksAddr)
	socksGreet(t, dialing, nil)
	_, err = dialing.Write(append([]byte{5, cmdConnect, 0}, nameDst("slow.test", 80)...))
	require.NoError(t, err)

	// HTTP: a CONNECT tunnel, a forwarded request waiting for its
	// response, an idle keep-alive connection.
	target := fmt.Sprintf("echo-name:%d", portOf(t, echoAddr))
	resp, _, httpTunnel, _ := rawHTTP(t, httpAddr, "CONNECT "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	client := proxyClient(t, httpAddr, nil, nil)
	pending := make(chan error, 1)
	go func() {
		resp, err := client.Get(slowSrv)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status) // Close cancelled the request before the connection
			}
		}
		pending <- err
	}()
	resp, _, idle, _ := rawHTTP(t, httpAddr, fmt.Sprintf("GET http://some-name:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", portOf(t, srv.Listener.Addr().String())))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	eventually(t, func() bool { return len(tn.Dialed()) == 6 }, "every dial under way")

	closed := make(chan struct{})
	go func() {
		_ = socks.Close()
		_ = httpProxy.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("Close did not return")
	}
	for name, c := range map[string]net.Conn{
		"socks tunnel": tunnel, "mid-handshake": midHandshake, "association": assoc,
		"dialing": dialing, "http tunnel": httpTunnel, "idle": idle,
	} {
		_, err := io.ReadAll(c)
		assert.NoError(t, err, "%s: closed, not reset", name)
		_ = c.Close()
	}
	assert.Error(t, <-pending, "the forwarded request fails")
	close(hang)
	client.CloseIdleConnections()
}

// newHangingBackend serves requests that answer only once hang is closed
// or the request is cancelled, and returns its URL through the name
// some-name.
func newHangingBackend(t *testing.T, hang <-chan struct{}) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return (&url.URL{Scheme: "http", Host: fmt.Sprintf("some-name:%d", portOf(t, srv.Listener.Addr().String())), Path: "/hang"}).String()
}

func netipAddrPort(a addr) netip.AddrPort { return netip.AddrPortFrom(a.ip, a.port) }
