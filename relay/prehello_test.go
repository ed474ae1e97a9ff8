package relay

import (
	"bufio"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFrameBeforeHelloRefusedOnItsHeader: an unauthenticated client whose
// first frame is not a HELLO is refused on the frame's header. The relay
// neither buffers a body it would throw away (up to 64 KiB per pending
// connection, where a HELLO is at most 292 bytes) nor waits for it: the
// client below sends the header alone, and the relay answers at once.
func TestFrameBeforeHelloRefusedOnItsHeader(t *testing.T) {
	s := startServer(t, ServerConfig{HelloTimeout: 10 * time.Second, AuthTimeout: 10 * time.Second})
	tc := rawTLS(t, s)

	tests := []struct {
		name    string
		header  []byte
		wantMsg string
	}{
		{"largest SEND", []byte{byte(frameSend), 0xff, 0xff}, "SEND before HELLO"},
		{"largest unknown frame", []byte{0x42, 0xff, 0xff}, "frame-0x42 before HELLO"},
		{"FEATURES", []byte{byte(frameFeatures), 0x00, 0x01}, "FEATURES before HELLO"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := tls.Dial("tcp", s.Addr().String(), tc)
			require.NoError(t, err)
			t.Cleanup(func() { _ = nc.Close() })
			_, err = nc.Write(tt.header)
			require.NoError(t, err)

			start := time.Now()
			require.NoError(t, nc.SetReadDeadline(start.Add(5*time.Second)))
			f, err := readFrame(bufio.NewReader(nc))
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the relay waited for the body of a %x frame header sent before HELLO", tt.header)
			}
			require.NoError(t, err)
			require.Equal(t, frameClose, f.typ)
			assert.Equal(t, CloseProtocol, CloseCode(f.reason))
			assert.Contains(t, string(f.data), tt.wantMsg)
			assert.Less(t, time.Since(start), 2*time.Second)
			eventually(t, 5*time.Second, func() bool { return s.Stats().AuthFailures["malformed"] == uint64(i+1) },
				"refusals: %v", s.Stats().AuthFailures)
		})
	}
	assert.Zero(t, s.Stats().AuthFailures["timeout"])
}
