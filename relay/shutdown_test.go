package relay

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShutdownRefusalCounted: a HELLO that the relay refuses because it
// is shutting down is counted as refused for shutdown, not as a timeout.
func TestShutdownRefusalCounted(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var armed atomic.Pointer[Server]
			closed := make(chan error, 1)
			s := startServer(t, ServerConfig{Now: func() time.Time {
				// The clock is read to check HELLO's token, right before
				// the connection registers: close the relay there.
				if s := armed.Swap(nil); s != nil {
					go func() { closed <- s.Close() }()
					eventually(t, 5*time.Second, func() bool {
						s.mu.RLock()
						defer s.mu.RUnlock()
						return s.closed
					}, "Close did not begin")
				}
				return time.Now()
			}})
			armed.Store(s)

			k := newKey(t)
			_, err := dialRaw(t, s, tr, k, IssueToken(testSecret, k, time.Now().Add(time.Hour)))
			require.Error(t, err)
			require.NoError(t, <-closed)
			st := s.Stats()
			assert.Equal(t, uint64(1), st.AuthFailures["shutdown"], "auth failures %v", st.AuthFailures)
			assert.Zero(t, st.AuthFailures["timeout"], "auth failures %v", st.AuthFailures)
			assert.Zero(t, st.Connections[tr])
		})
	}
}

// TestShutdownDuringHandshakeCounted: connections that Close cuts short
// while they authenticate (in the TLS handshake, or before their HELLO)
// are counted as refused for shutdown, not as timeouts.
func TestShutdownDuringHandshakeCounted(t *testing.T) {
	tests := []struct {
		name      string
		transport string
		tls       bool // complete the TLS (or QUIC) handshake first
	}{
		{"tcp before ClientHello", transportTCP, false},
		{"tcp before HELLO", transportTCP, true},
		{"quic before HELLO", transportQUIC, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewServer(ServerConfig{Secret: testSecret, HelloTimeout: time.Minute, AuthTimeout: time.Minute})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			if tt.tls {
				cfg := ClientConfig{Server: s.Addr().String(), Fingerprint: s.Fingerprint(), Key: newKey(t), Token: "x", DialTimeout: 5 * time.Second}
				require.NoError(t, cfg.setDefaults())
				tc, err := clientTLS(&cfg, "127.0.0.1")
				require.NoError(t, err)
				a, err := (&Client{cfg: cfg, tls: tc}).connect(ctxT(t, 10*time.Second), tt.transport)
				require.NoError(t, err)
				t.Cleanup(a.close)
			} else {
				nc, err := net.Dial("tcp", s.Addr().String())
				require.NoError(t, err)
				t.Cleanup(func() { _ = nc.Close() })
			}
			eventually(t, 5*time.Second, func() bool { all, _ := s.pre.len(s.Addr().Addr()); return all == 1 },
				"the relay never took the connection")

			require.NoError(t, s.Close())
			st := s.Stats()
			assert.Equal(t, uint64(1), st.AuthFailures["shutdown"], "auth failures %v", st.AuthFailures)
			assert.Zero(t, st.AuthFailures["timeout"], "auth failures %v", st.AuthFailures)
		})
	}
}
