package relay

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dirtyClose is a close message holding what a peer must not get into a
// log line or a terminal: a newline that starts a forged record, an escape
// sequence, invalid UTF-8, a right-to-left override and a tab. cleanClose
// is what is left of it.
const (
	dirtyClose = "bye\nlevel=ERROR msg=\"relay hijacked\"\x1b[2J\xff\xfe\u202eevil\t"
	cleanClose = "bye?level=ERROR msg=\"relay hijacked\"?[2J??evil?"
)

// TestClientCloseMessageCleaned: a client's close message after WELCOME
// reaches the relay's log bounded, valid UTF-8 and free of control
// characters, whichever way it closes.
func TestClientCloseMessageCleaned(t *testing.T) {
	logs := &logCapture{}
	s := startServer(t, ServerConfig{Logger: logs.logger()})
	closeFrame := func(msg string) func(t *testing.T, r *rawConn) {
		return func(t *testing.T, r *rawConn) {
			r.write(frame{typ: frameClose, reason: uint8(CloseNormal), data: []byte(msg)})
		}
	}
	connClose := func(code quic.ApplicationErrorCode, msg string) func(t *testing.T, r *rawConn) {
		return func(t *testing.T, r *rawConn) {
			require.NoError(t, r.cc.w.qc.CloseWithError(code, msg))
		}
	}
	long := strings.Repeat("a", MaxCloseMessage-1) + "é" + strings.Repeat("b", 500)
	longWant := strings.Repeat("a", MaxCloseMessage-1) + "?" // é cut in half

	tests := []struct {
		name      string
		transport string
		close     func(t *testing.T, r *rawConn)
		want      string
	}{
		{"tcp CLOSE frame", transportTCP, closeFrame(dirtyClose), cleanClose},
		{"quic CONNECTION_CLOSE", transportQUIC, connClose(0, dirtyClose), cleanClose},
		{"quic CONNECTION_CLOSE too long", transportQUIC, connClose(0, long), longWant},
		// A code beyond LRP's 8 bits is no close code: the read fails with
		// quic-go's error, which quotes the reason phrase.
		{"quic CONNECTION_CLOSE with a code beyond LRP's", transportQUIC, connClose(0x1234, dirtyClose), cleanClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKey(t)
			r, err := dialRaw(t, s, tt.transport, k, IssueToken(testSecret, k, time.Now().Add(time.Hour)))
			require.NoError(t, err)
			tt.close(t, r)

			want := map[string]string{"key": k.ShortString(), "transport": tt.transport}
			eventually(t, 5*time.Second, func() bool { return len(logs.find("client disconnected", want)) > 0 },
				"the relay logged no disconnect of %s", k.ShortString())
			got := logs.find("client disconnected", want)[0].attrs["err"]
			assert.True(t, strings.HasSuffix(got, ": "+tt.want), "logged err %q, want it to end in %q", got, tt.want)
			if !strings.Contains(tt.name, "beyond LRP's") { // an LRP close: the client closed, not the relay
				assert.True(t, strings.HasPrefix(got, "relay: closed by client: "), "logged err %q", got)
			}
		})
	}
}

// TestRelayCloseMessageCleaned: the client cleans a relay's close message
// after WELCOME the same way, before logging and returning it.
func TestRelayCloseMessageCleaned(t *testing.T) {
	cert, err := SelfSigned(time.Now())
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// A relay that welcomes its one client and closes it at once.
	served := make(chan struct{})
	go func() {
		defer close(served)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		tc := tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{ALPN}, MinVersion: tls.VersionTLS13})
		br := bufio.NewReader(tc)
		if f, err := readFrame(br); err != nil || f.typ != frameHello {
			return
		}
		b, _ := appendFrame(nil, &frame{typ: frameWelcome, version: ProtocolVersion, keepalive: 20_000})
		b, _ = appendFrame(b, &frame{typ: frameClose, reason: uint8(CloseNormal), data: []byte(dirtyClose)})
		if _, err := tc.Write(b); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, br) // until the client hangs up
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-served
	})

	got := lostConnection(t, l.Addr().String(), cert, transportTCP)
	assert.Equal(t, "relay: closed by relay: normal: "+cleanClose, got)
}

// lostConnection connects a client over transport to the one-client
// relay at addr, presenting cert, and returns the error it logged when
// that relay ended the connection.
func lostConnection(t *testing.T, addr string, cert tls.Certificate, transport string) any {
	t.Helper()
	logs := &logCapture{}
	k := newKey(t)
	c, err := NewClient(ClientConfig{
		Server:      addr,
		Fingerprint: CertFingerprint(cert.Certificate[0]),
		Key:         k,
		Token:       IssueToken(testSecret, k, time.Now().Add(time.Hour)),
		Transport:   transport,
		Logger:      logs.logger(),
		MinBackoff:  time.Minute, // no second connection to a relay that serves one
		MaxBackoff:  time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	eventually(t, 5*time.Second, func() bool { return len(logs.find("relay connection lost", nil)) > 0 },
		"the client logged no lost connection")
	return logs.find("relay connection lost", nil)[0].attrs["err"]
}

func TestCloseMessage(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "token expired", "token expired"},
		{"empty", "", ""},
		{"unicode kept", "relais fermé, 再见", "relais fermé, 再见"},
		{"dirty", dirtyClose, cleanClose},
		{"too long", strings.Repeat("x", MaxCloseMessage+10), strings.Repeat("x", MaxCloseMessage)},
		{"cut inside a rune", strings.Repeat("x", MaxCloseMessage-1) + "é", strings.Repeat("x", MaxCloseMessage-1) + "?"},
		{"invalid bytes at the end", strings.Repeat("x", MaxCloseMessage-3) + "\xff\xff\xff\xff", strings.Repeat("x", MaxCloseMessage-3) + "?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, closeMessage(tt.in))
		})
	}
}

// TestCleanPeerError: a QUIC peer's reason phrase is printed cleaned in
// whatever error carries it, which still unwraps to quic-go's error.
func TestCleanPeerError(t *testing.T) {
	transportClose := &quic.TransportError{Remote: true, ErrorCode: quic.ProtocolViolation, ErrorMessage: dirtyClose}
	appClose := &quic.ApplicationError{Remote: true, ErrorCode: 0x1234, ErrorMessage: dirtyClose}
	localClose := &quic.ApplicationError{ErrorCode: 0x1234, ErrorMessage: "ours\n"}

	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"transport close", fmt.Errorf("relay: read quic: %w", transportClose), "relay: read quic: PROTOCOL_VIOLATION (remote): " + cleanClose},
		{"application close", fmt.Errorf("relay: dial quic x: waiting for welcome: %w", appClose), "relay: dial quic x: waiting for welcome: Application error 0x1234 (remote): " + cleanClose},
		{"local close unchanged", localClose, "Application error 0x1234 (local): ours\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cleanPeerError(tt.err)
			assert.EqualError(t, got, tt.wantErr)
			assert.ErrorIs(t, got, tt.err)
		})
	}
	var te *quic.TransportError
	require.ErrorAs(t, cleanPeerError(transportClose), &te)
	assert.Equal(t, dirtyClose, te.ErrorMessage, "quic-go's error itself is left alone")
}
