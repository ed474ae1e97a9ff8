package proxy

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSOCKS5Connect(t *testing.T) {
	echoAddr, peers := tcpServer(t, echo)
	port := portOf(t, echoAddr)
	tn := newTestNet()
	_, proxyAddr := startSOCKS(t, tn.config(testCreds))

	tests := []struct {
		name       string
		dst        []byte
		wantDialed string
	}{
		{"ipv4", ipDst("127.0.0.1", port), "tcp " + echoAddr},
		{"ipv6", ipDst("2001:db8::1", port), "tcp [2001:db8::1]:" + itoa(port)},
		{"domain unresolved", nameDst("echo-name", port), "tcp echo-name:" + itoa(port)},
		{"ipv4-mapped ipv6 unmapped", ipDst("::ffff:127.0.0.1", port), "tcp " + echoAddr},
		{"ip literal as domain", nameDst("127.0.0.1", port), "tcp " + echoAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rep, bnd := socksConnect(t, proxyAddr, testCreds, tt.dst)
			require.Equal(t, repSucceeded, rep)
			assert.Equal(t, tt.wantDialed, tn.Dialed()[len(tn.Dialed())-1])

			// BND is the proxy's end of the upstream connection (RFC 1928 §6).
			peer := (<-peers).(*net.TCPAddr)
			assert.Equal(t, addrOf(peer), bnd)

			_, err := c.Write([]byte("ping"))
			require.NoError(t, err)
			requireRead(t, c, []byte("ping"))
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			rest, err := io.ReadAll(c)
			require.NoError(t, err, "the echo's half-close reaches the client as EOF")
			assert.Empty(t, rest)
		})
	}
}

// TestSOCKS5HalfClose checks both directions of a half-close: the server
// answers only after the client's EOF reaches it.
func TestSOCKS5HalfClose(t *testing.T) {
	upAddr, _ := tcpServer(t, func(c net.Conn) {
		b, err := io.ReadAll(c)
		if err == nil {
			_, _ = c.Write(append([]byte("got:"), b...))
		}
	})
	tn := newTestNet()
	_, proxyAddr := startSOCKS(t, tn.config(nil))
	c, rep, _ := socksConnect(t, proxyAddr, nil, nameDst("some-name", portOf(t, upAddr)))
	require.Equal(t, repSucceeded, rep)
	_, err := c.Write([]byte("abc"))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "got:abc", string(got))
}

func TestSOCKS5Auth(t *testing.T) {
	tests := []struct {
		name    string
		creds   *Credentials // the server's
		send    []byte
		want    []byte // everything the server sends before closing
		wantLog bool   // an Info line about the refusal
		// The refused login reported to LoginFailed, if any.
		wantUser, wantReason string
	}{
		{
			name: "no auth", send: []byte{5, 1, 0},
			want: []byte{5, 0}, // then waits for the request
		},
		{
			name: "no auth required, client offers only user/pass",
			send: []byte{5, 1, 2}, want: []byte{5, 0xff},
		},
		{
			name: "right credentials", creds: testCreds,
			send: authMsg(0, "agent", "s3cret"), want: []byte{5, 2, 1, 0},
		},
		{
			name: "wrong password", creds: testCreds,
			send: authMsg(0, "agent", "s3creT"), want: []byte{5, 2, 1, 1}, wantLog: true,
			wantUser: "agent", wantReason: ReasonBadCredentials,
		},
		{
			name: "wrong username", creds: testCreds,
			send: authMsg(0, "agent2", "s3cret"), want: []byte{5, 2, 1, 1}, wantLog: true,
			wantUser: "agent2", wantReason: ReasonBadCredentials,
		},
		{
			name: "password is a prefix", creds: testCreds,
			send: authMsg(0, "agent", "s3c"), want: []byte{5, 2, 1, 1}, wantLog: true,
			wantUser: "agent", wantReason: ReasonBadCredentials,
		},
		{
			name: "empty fields", creds: testCreds,
			send: authMsg(0, "", ""), want: []byte{5, 2, 1, 1}, wantLog: true,
			wantReason: ReasonBadCredentials,
		},
		{
			name: "client offers only no auth", creds: testCreds,
			send: []byte{5, 1, 0}, want: []byte{5, 0xff}, wantLog: true,
			wantReason: ReasonNoCredentials,
		},
		{
			name: "wrong subnegotiation version", creds: testCreds,
			send: authMsg(5, "agent", "s3cret"), want: []byte{5, 2, 1, 1}, wantLog: true,
			wantReason: ReasonMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logBuf
			n := newTestNet()
			cfg := n.config(tt.creds)
			cfg.Logger = logs.logger()
			cfg.HandshakeTimeout = 200 * time.Millisecond
			_, proxyAddr := startSOCKS(t, cfg)
			c := dial(t, proxyAddr)
			_, err := c.Write(tt.send)
			require.NoError(t, err)
			got, _ := io.ReadAll(c) // the server closes: refusal or handshake timeout
			assert.Equal(t, tt.want, got)
			if tt.wantLog {
				assert.Contains(t, logs.String(), "level=INFO msg=\"socks5 authentication refused\"")
			}
			assert.NotContains(t, logs.String(), "s3cre", "no password in the logs")
			var want []LoginFailure
			if tt.wantReason != "" {
				want = []LoginFailure{{Client: c.LocalAddr(), Username: tt.wantUser, Reason: tt.wantReason}}
			}
			assert.Equal(t, want, n.LoginFailures())
		})
	}
}

// authMsg is a greeting offering user/pass followed by an RFC 1929
// request; ver 0 means the right subnegotiation version.
func authMsg(ver byte, user, pass string) []byte {
	if ver == 0 {
		ver = authVersion
	}
	b := append([]byte{5, 1, 2, ver, byte(len(user))}, user...)
	return append(append(b, byte(len(pass))), pass...)
}

// TestSOCKS5Replies checks the reply code for each way a request fails.
func TestSOCKS5Replies(t *testing.T) {
	refusedPort := portOf(t, refusedAddr(t))

	tests := []struct {
		name      string
		cmd       byte
		dst       []byte
		want      byte
		wantEvent string // Attempt.Address, if one is reported
	}{
		{"denied", cmdConnect, nameDst("denied.test", 443), repNotAllowed, "denied.test:443"},
		{"no such host", cmdConnect, nameDst("nohost.test", 80), repHostUnreachable, "nohost.test:80"},
		{"unroutable ip", cmdConnect, ipDst("192.0.2.1", 80), repHostUnreachable, "192.0.2.1:80"},
		{"refused", cmdConnect, ipDst("127.0.0.1", refusedPort), repConnectionRefused, "127.0.0.1:" + itoa(refusedPort)},
		{"timeout error", cmdConnect, nameDst("timeout.test", 80), repTTLExpired, "timeout.test:80"},
		{"dial timeout", cmdConnect, nameDst("slow.test", 80), repTTLExpired, "slow.test:80"},
		{"other error", cmdConnect, nameDst("boom.test", 80), repGeneralFailure, "boom.test:80"},
		{"name with a colon", cmdConnect, nameDst("a:b", 80), repHostUnreachable, "[a:b]:80"},
		{"numeric name", cmdConnect, nameDst("2130706433", 80), repHostUnreachable, "2130706433:80"},
		{"hex name", cmdConnect, nameDst("0x7f.1", 80), repHostUnreachable, "0x7f.1:80"},
		{"empty name", cmdConnect, nameDst("", 80), repHostUnreachable, ":80"},
		{"zone", cmdConnect, nameDst("fe80::1%lo", 80), repHostUnreachable, "[fe80::1%lo]:80"},
		{"bind", cmdBind, ipDst("127.0.0.1", 80), repCommandNotSupported, ""},
		{"unknown command", 9, ipDst("127.0.0.1", 80), repCommandNotSupported, ""},
		{"bad atyp", cmdConnect, []byte{2, 127, 0, 0, 1, 0, 80}, repATYPNotSupported, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNet()
			cfg := tn.config(nil)
			cfg.DialTimeout = 200 * time.Millisecond
			_, proxyAddr := startSOCKS(t, cfg)
			start := time.Now()
			c := dial(t, proxyAddr)
			socksGreet(t, c, nil)
			_, err := c.Write(append([]byte{5, tt.cmd, 0}, tt.dst...))
			require.NoError(t, err)
			got, err := io.ReadAll(c)
			require.NoError(t, err, "the server closes after a failure reply")
			assert.Equal(t, []byte{5, tt.want, 0, atypIPv4, 0, 0, 0, 0, 0, 0}, got)
			assert.Less(t, time.Since(start), 2*time.Second)
			attempts := tn.Attempts()
			if tt.wantEvent == "" {
				assert.Empty(t, attempts)
				return
			}
			require.Len(t, attempts, 1)
			assert.Equal(t, tt.wantEvent, attempts[0].Address)
			assert.Equal(t, "tcp", attempts[0].Network)
			assert.Equal(t, c.LocalAddr().String(), attempts[0].Client.String())
			assert.Error(t, attempts[0].Err)
		})
	}
}

// TestSOCKS5Garbage feeds malformed handshakes: each is answered as RFC
// 1928 says, or the connection closed, within the handshake timeout.
func TestSOCKS5Garbage(t *testing.T) {
	const timeout = 200 * time.Millisecond
	generalFailure := []byte{5, repGeneralFailure, 0, 1, 0, 0, 0, 0, 0, 0}
	tests := []struct {
		name  string
		creds *Credentials
		send  []byte
		junk  int // bytes of junk streamed after send
		want  []byte
	}{
		{name: "empty", send: nil, want: []byte{}},
		{name: "socks4", send: []byte{4, 1, 0, 80, 127, 0, 0, 1, 0}, want: []byte{}},
		{name: "http", send: []byte("GET / HTTP/1.1\r\n\r\n"), want: []byte{}},
		{name: "no methods", send: []byte{5, 0}, want: []byte{5, 0xff}},
		{name: "truncated greeting", send: []byte{5}, want: []byte{}},
		{name: "truncated methods", send: []byte{5, 3, 0}, want: []byte{}},
		{name: "truncated request", send: []byte{5, 1, 0, 5, 1, 0, 1, 127, 0}, want: []byte{5, 0}},
		{name: "truncated domain", send: []byte{5, 1, 0, 5, 1, 0, 3, 200, 'a'}, want: []byte{5, 0}},
		{name: "truncated username", creds: testCreds, send: []byte{5, 1, 2, 1, 10, 'a'}, want: []byte{5, 2}},
		{name: "truncated password", creds: testCreds, send: []byte{5, 1, 2, 1, 1, 'a', 10}, want: []byte{5, 2}},
		{name: "request version 4", send: []byte{5, 1, 0, 4, 1, 0, 1, 127, 0, 0, 1, 0, 80}, want: append([]byte{5, 0}, generalFailure...)},
		{name: "bad atyp", send: []byte{5, 1, 0, 5, 1, 0, 0xff}, want: []byte{5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0}},
		{
			name: "all 255 methods unacceptable", creds: testCreds,
			send: append([]byte{5, 255}, bytes.Repeat([]byte{0x80}, 255)...), want: []byte{5, 0xff},
		},
		{
			name: "max-length username and password, wrong", creds: testCreds,
			send: authMsg(0, strings.Repeat("u", 255), strings.Repeat("p", 255)), want: []byte{5, 2, 1, 1},
		},
		{
			name: "max-length name of junk", send: append([]byte{5, 1, 0, 5, 1, 0, 3, 255}, bytes.Repeat([]byte{0xfe}, 257)...),
			want: []byte{5, 0, 5, repHostUnreachable, 0, 1, 0, 0, 0, 0, 0, 0},
		},
		{name: "megabyte after the greeting", send: []byte{5, 1, 0, 5, 1, 0, 0xff}, junk: 1 << 20, want: []byte{5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0}},
		{name: "megabyte instead of a greeting", send: []byte{5, 1, 9}, junk: 1 << 20, want: []byte{5, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := newTestNet().config(tt.creds)
			cfg.HandshakeTimeout = timeout
			_, proxyAddr := startSOCKS(t, cfg)
			c := dial(t, proxyAddr)
			start := time.Now()
			goAll(t, func() {
				_, _ = c.Write(tt.send)
				if tt.junk > 0 {
					// The server stops reading; the write fails once it closes.
					_, _ = c.Write(bytes.Repeat([]byte{0xaa}, tt.junk))
				}
			})
			got, _ := io.ReadAll(c) // EOF, or a reset if junk was left unread
			assert.Equal(t, tt.want, append([]byte{}, got...))
			assert.Less(t, time.Since(start), timeout+2*time.Second, "closed within the handshake timeout")
		})
	}
}

// TestSOCKS5NoUDPWithoutListenPacket checks UDP ASSOCIATE is refused when
// the Config has no ListenPacket.
func TestSOCKS5NoUDPWithoutListenPacket(t *testing.T) {
	cfg := newTestNet().config(nil)
	cfg.ListenPacket = nil
	_, proxyAddr := startSOCKS(t, cfg)
	c := dial(t, proxyAddr)
	socksGreet(t, c, nil)
	rep, bnd := socksRequest(t, c, cmdUDPAssociate, ipDst("0.0.0.0", 0))
	assert.Equal(t, repCommandNotSupported, rep)
	assert.Equal(t, addr{ip: netip.IPv4Unspecified()}, bnd)
}
