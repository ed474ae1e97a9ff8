package relay

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestALPNRequired: a TLS client that does not offer LRP's ALPN is refused
// in the handshake on both transports, and counted as such; one that
// offers it among others gets through.
func TestALPNRequired(t *testing.T) {
	logs := &logCapture{}
	s := startServer(t, ServerConfig{Logger: logs.logger()})
	base := rawTLS(t, s)
	withProtos := func(protos ...string) *tls.Config {
		tc := base.Clone()
		tc.NextProtos = protos
		return tc
	}

	tests := []struct {
		name      string
		transport string
		protos    []string
		wantErr   string // "" when the handshake completes
	}{
		{"tcp none", transportTCP, nil, "tls: internal error"},
		{"tcp wrong", transportTCP, []string{"h2"}, "tls: no application protocol"},
		{"tcp http/1.1", transportTCP, []string{"http/1.1"}, "tls: no application protocol"},
		{"tcp lrp/2 only", transportTCP, []string{"lrp/2"}, "tls: no application protocol"},
		{"tcp lrp/1 among others", transportTCP, []string{"lrp/2", ALPN}, ""},
		{"quic wrong", transportQUIC, []string{"h3"}, "no application protocol"},
		{"quic lrp/1 among others", transportQUIC, []string{"lrp/2", ALPN}, ""},
	}
	refused := uint64(0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t, 5*time.Second)
			proto, err := handshake(ctx, tt.transport, s.Addr().String(), withProtos(tt.protos...))
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, ALPN, proto)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			refused++
			eventually(t, 5*time.Second, func() bool { return s.Stats().AuthFailures["alpn"] == refused },
				"auth failures %v, want alpn=%d", s.Stats().AuthFailures, refused)
		})
	}
	assert.Zero(t, s.Stats().AuthFailures["timeout"], "auth failures %v", s.Stats().AuthFailures)
	assert.NotEmpty(t, logs.find("tls handshake failed", map[string]string{"reason": "alpn"}), "refusals not logged with their reason")
}

// tcpHandshake runs a TLS handshake over TCP with tc and returns the
// protocol it negotiated.
func tcpHandshake(ctx context.Context, addr string, tc *tls.Config) (string, error) {
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	c := tls.Client(nc, tc)
	if err := c.HandshakeContext(ctx); err != nil {
		return "", err
	}
	return c.ConnectionState().NegotiatedProtocol, nil
}

// quicHandshake runs a QUIC handshake with tc and returns the protocol it
// negotiated.
func quicHandshake(ctx context.Context, addr string, tc *tls.Config) (string, error) {
	qc, err := quic.DialAddr(ctx, addr, tc, &quic.Config{})
	if err != nil {
		return "", err
	}
	defer qc.CloseWithError(0, "")
	return qc.ConnectionState().TLS.NegotiatedProtocol, nil
}

// TestGetConfigForClientKeepsLRPTLS: a TLS config whose GetConfigForClient
// picks the config per handshake (here one that names other protocols and
// allows TLS 1.2, as a config shared with a web server might) gets LRP's
// ALPN and TLS 1.3 like a static one, on both transports.
func TestGetConfigForClientKeepsLRPTLS(t *testing.T) {
	cert, err := SelfSigned(time.Now())
	require.NoError(t, err)
	operator := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "h3", ALPN}, MinVersion: tls.VersionTLS12}, nil
	}}
	s := startServer(t, ServerConfig{TLS: operator})
	cfg := ClientConfig{Server: s.Addr().String(), Fingerprint: CertFingerprint(cert.Certificate[0]), Key: newKey(t), Token: "x"}
	require.NoError(t, cfg.setDefaults())
	base, err := clientTLS(&cfg, "127.0.0.1")
	require.NoError(t, err)
	client := func(maxVersion uint16, protos ...string) *tls.Config {
		tc := base.Clone()
		tc.NextProtos = protos
		if maxVersion != 0 {
			tc.MinVersion, tc.MaxVersion = tls.VersionTLS12, maxVersion
		}
		return tc
	}

	tests := []struct {
		name      string
		transport string
		tls       *tls.Config
		wantErr   string // "" when the handshake completes
		alpn      bool   // refused for its ALPN, and counted so
	}{
		{"tcp lrp/1", transportTCP, client(0, ALPN), "", false},
		{"tcp none", transportTCP, client(0), "tls: internal error", true},
		{"tcp the callback's protocol", transportTCP, client(0, "h2"), "tls: no application protocol", true},
		{"tcp TLS 1.2", transportTCP, client(tls.VersionTLS12, ALPN), "tls: protocol version not supported", false},
		{"quic lrp/1", transportQUIC, client(0, ALPN), "", false},
		{"quic the callback's protocol", transportQUIC, client(0, "h3"), "no application protocol", true},
	}
	refused := uint64(0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t, 5*time.Second)
			proto, err := handshake(ctx, tt.transport, s.Addr().String(), tt.tls)
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, ALPN, proto)
				return
			}
			require.Error(t, err, "handshake completed with ALPN %q", proto)
			assert.Contains(t, err.Error(), tt.wantErr)
			if tt.alpn {
				refused++
				eventually(t, 5*time.Second, func() bool { return s.Stats().AuthFailures["alpn"] == refused },
					"auth failures %v, want alpn=%d", s.Stats().AuthFailures, refused)
			}
		})
	}
}

// handshake completes a TLS handshake with addr over transport, with tc,
// and returns the protocol ALPN settled on.
func handshake(ctx context.Context, transport, addr string, tc *tls.Config) (string, error) {
	if transport == transportTCP {
		return tcpHandshake(ctx, addr, tc)
	}
	return quicHandshake(ctx, addr, tc)
}
