package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/latticelab/lattice/netx"
)

// ProbeConfig says which relay Probe measures and how it checks it.
type ProbeConfig struct {
	// Network is where the probe dials. If nil, netx.OS.
	Network netx.Network
	// Server is the relay's host:port. Required.
	Server string
	// ServerName, Fingerprint and RootCAs verify the certificate, as in
	// ClientConfig.
	ServerName, Fingerprint string
	RootCAs                 *x509.CertPool
	// Timeout bounds each transport's handshake. If zero, 5s.
	Timeout time.Duration
}

// ProbeResult is one transport's measurement of a relay.
type ProbeResult struct {
	Transport string // "quic" or "tcp"
	// Latency is the handshake's duration: QUIC's (one round trip), or
	// TCP's connect plus TLS 1.3 (two round trips) for tcp. Zero on error.
	Latency time.Duration
	Err     error
}

// Probe measures how long a relay takes to complete a QUIC and a TCP+TLS
// handshake, verifying its certificate as a client would, and closes
// both connections without authenticating (the relay counts them under
// lattice_relay_auth_failures_total{reason="abandoned"}). It needs no
// token, so a netcheck can run without a node.
func Probe(ctx context.Context, cfg ProbeConfig) ([2]ProbeResult, error) {
	if cfg.Network == nil {
		cfg.Network = netx.OS
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	host, _, err := net.SplitHostPort(cfg.Server)
	if err != nil {
		return [2]ProbeResult{}, fmt.Errorf("relay: probe: server %q: %w", cfg.Server, err)
	}
	cc := ClientConfig{Network: cfg.Network, Server: cfg.Server, ServerName: cfg.ServerName, Fingerprint: cfg.Fingerprint, RootCAs: cfg.RootCAs, DialTimeout: cfg.Timeout}
	tc, err := clientTLS(&cc, host)
	if err != nil {
		return [2]ProbeResult{}, fmt.Errorf("relay: probe: %w", err)
	}
	c := &Client{cfg: cc, tls: tc}
	out := [2]ProbeResult{{Transport: transportQUIC}, {Transport: transportTCP}}
	for i := range out {
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		start := time.Now()
		if out[i].Transport == transportQUIC {
			err = c.probeQUIC(pctx)
		} else {
			err = c.probeTCP(pctx)
		}
		cancel()
		if err != nil {
			out[i].Err = fmt.Errorf("relay: probe %s %s: %w", out[i].Transport, cfg.Server, cleanPeerError(err))
		} else {
			out[i].Latency = time.Since(start)
		}
	}
	return out, nil
}

func (c *Client) probeTCP(ctx context.Context) error {
	nc, err := c.cfg.Network.Dial(ctx, "tcp", c.cfg.Server)
	if err != nil {
		return err
	}
	defer nc.Close()
	tc := tls.Client(nc, c.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	return nil
}

func (c *Client) probeQUIC(ctx context.Context) error {
	raddr, err := c.resolve(ctx)
	if err != nil {
		return err
	}
	network := "udp4"
	if raddr.Addr().Is6() {
		network = "udp6"
	}
	pc, err := c.cfg.Network.ListenPacket(ctx, network, ":0")
	if err != nil {
		return err
	}
	tr := &quic.Transport{Conn: pc}
	defer func() {
		_ = tr.Close()
		_ = pc.Close()
	}()
	qc, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(raddr), c.tls, c.quicConfig())
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no QUIC answer (UDP blocked?): %w", err)
		}
		return err
	}
	return qc.CloseWithError(quic.ApplicationErrorCode(CloseNormal), "probe")
}
