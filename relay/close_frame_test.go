package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayCloseFrameOnQUIC: CLOSE is a TCP frame. A relay that sends one
// on the QUIC control stream breaks the protocol, and the client closes
// the connection as such (code protocol) instead of taking the frame's
// code and message for the relay's.
func TestRelayCloseFrameOnQUIC(t *testing.T) {
	cert, err := SelfSigned(time.Now())
	require.NoError(t, err)
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{ALPN}, MinVersion: tls.VersionTLS13}
	l, err := quic.ListenAddr("127.0.0.1:0", tc, &quic.Config{EnableDatagrams: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	// A relay that welcomes its one client and then sends it a CLOSE
	// frame; closeErr is how the client ended the connection.
	closeErr := make(chan error, 1)
	go func() {
		defer close(closeErr)
		qc, err := l.Accept(ctx)
		if err != nil {
			return
		}
		defer qc.CloseWithError(0, "")
		qs, err := qc.AcceptStream(ctx)
		if err != nil {
			return
		}
		if f, err := readFrame(bufio.NewReader(qs)); err != nil || f.typ != frameHello {
			return
		}
		b, _ := appendFrame(nil, &frame{typ: frameWelcome, version: ProtocolVersion, keepalive: 20_000})
		b, _ = appendFrame(b, &frame{typ: frameClose, reason: uint8(CloseNormal), data: []byte("bye")})
		if _, err := qs.Write(b); err != nil {
			return
		}
		<-qc.Context().Done()
		closeErr <- context.Cause(qc.Context())
	}()
	t.Cleanup(func() {
		cancel()
		_ = l.Close()
		for range closeErr {
		}
	})

	got := lostConnection(t, l.Addr().String(), cert, transportQUIC)
	assert.Equal(t, "relay: protocol violation: CLOSE on QUIC", got)

	select {
	case err := <-closeErr:
		var ae *quic.ApplicationError
		require.True(t, errors.As(err, &ae), "connection ended with %v", err)
		assert.True(t, ae.Remote)
		assert.Equal(t, quic.ApplicationErrorCode(CloseProtocol), ae.ErrorCode)
		assert.Equal(t, "relay: protocol violation: CLOSE on QUIC", ae.ErrorMessage)
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not close the QUIC connection")
	}
}
