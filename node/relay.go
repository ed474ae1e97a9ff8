package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

// RelayClient is a connection to an LRP relay.
type RelayClient interface {
	RelaySender
	Close() error
}

// RelayAuth is what a node authenticates to a relay with.
type RelayAuth struct {
	// Self is the node's public key.
	Self key.Public
	// Token is the relay token control issued for Self.
	Token string
	// Renew asks control for a fresh token; the relay client calls it
	// before Token expires and when the relay refuses it. If nil, Token is
	// used until it expires.
	Renew func(ctx context.Context) (string, error)
}

// RelayDialer connects to a relay as auth.Self; deliver receives the
// packets peers send through the relay.
type RelayDialer func(ctx context.Context, relay controlapi.Relay, auth RelayAuth, deliver func(src key.Public, pkt []byte)) (RelayClient, error)

// relayTransports are the transports LRPRelay knows (Config.RelayTransport).
var relayTransports = []string{"tcp", "quic", "race"}

// LRPRelay returns a RelayDialer for LRP relays on network n over
// transport: "tcp" (the default when empty), "quic", or "race" (race both
// and keep the one that measures better, TCP unless QUIC's path is
// clearly the faster; measured again every few minutes).
//
// TCP is the default because it carries more: over QUIC the node holds
// relayed peers' packets to QUICRelayMTU so they fit datagrams, and even
// so BenchmarkPath measured the relay path over QUIC at about half of
// TCP's (0.42-0.66x, 2026-12-07), with losses where quic-go's datagram
// queue overflows.
func LRPRelay(n netx.Network, log *slog.Logger, transport string) RelayDialer {
	switch transport {
	case "":
		transport = "tcp"
	case "race":
		transport = ""
	}
	return func(_ context.Context, r controlapi.Relay, auth RelayAuth, deliver func(key.Public, []byte)) (RelayClient, error) {
		cfg := relay.ClientConfig{
			Network:     n,
			Server:      r.Addr,
			Fingerprint: r.Fingerprint,
			Key:         auth.Self,
			Token:       relay.Token(auth.Token),
			Logger:      log,
			Transport:   transport,
		}
		if renew := auth.Renew; renew != nil {
			cfg.RenewToken = func(ctx context.Context) (relay.Token, error) {
				tok, err := renew(ctx)
				return relay.Token(tok), err
			}
		}
		c, err := relay.NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("relay %s: %w", r.Addr, err)
		}
		lc := &lrpClient{c: c}
		var ctx context.Context
		ctx, lc.cancel = context.WithCancel(context.Background())
		lc.wg.Add(1)
		go lc.recvLoop(ctx, deliver)
		return lc, nil
	}
}

// lrpClient adapts a relay.Client to RelayClient: it sends by peer key and
// feeds what arrives to the Bind.
type lrpClient struct {
	c      *relay.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (l *lrpClient) Send(dst key.Public, pkt []byte) error {
	err := l.c.Send(dst, pkt)
	if errors.Is(err, relay.ErrNotConnected) {
		return nil // between attempts, or its queue full: the packet is lost, as on a lossy link
	}
	return err
}

func (l *lrpClient) recvLoop(ctx context.Context, deliver func(key.Public, []byte)) {
	defer l.wg.Done()
	for {
		src, pkt, err := l.c.Recv(ctx)
		if err != nil {
			return
		}
		deliver(src, pkt)
	}
}

// Probe checks the relay connection answers (see relay.Client.Probe).
func (l *lrpClient) Probe(ctx context.Context, timeout time.Duration) error {
	return l.c.Probe(ctx, timeout)
}

// Transport is "quic", "tcp" or "" while disconnected.
func (l *lrpClient) Transport() string { return l.c.Transport() }

// TransportReason says why (see relay.Client.TransportReason).
func (l *lrpClient) TransportReason() string { return l.c.TransportReason() }

// WaitConnected returns once the relay connection is up (see
// relay.Client.WaitConnected).
func (l *lrpClient) WaitConnected(ctx context.Context) error { return l.c.WaitConnected(ctx) }

func (l *lrpClient) Close() error {
	l.cancel()
	err := l.c.Close()
	l.wg.Wait()
	return err
}

// renewRelayToken asks control for a fresh relay token over the node's
// session; the relay client calls it before its token expires and when
// the relay refuses it.
func (n *Node) renewRelayToken(ctx context.Context) (string, error) {
	s := n.session.Load()
	if s == nil {
		return "", errors.New("node: renew relay token: no control session yet")
	}
	tok, err := s.RelayToken(ctx)
	if err != nil {
		return "", fmt.Errorf("node: renew relay token: %w", err)
	}
	return tok, nil
}

// RelayStats is what the node's relay client counted, and whether it is
// connected now.
type RelayStats struct {
	relay.ClientStats
	// Transport is "quic" or "tcp" while connected, "" while not, and
	// TransportReason why: "configured", or what `race` measured.
	Transport       string
	TransportReason string
}

// RelayStats returns the relay client's counters (for metrics), and
// false when there are none: control named no relay, or Config.Relay
// dials something other than an LRP relay client.
func (n *Node) RelayStats() (RelayStats, bool) {
	l, ok := n.relay.(*lrpClient) // set in Start, before the node is returned
	if !ok {
		return RelayStats{}, false
	}
	return RelayStats{ClientStats: l.c.Stats(), Transport: l.c.Transport(), TransportReason: l.c.TransportReason()}, true
}

// Servers returns the STUN servers and relays control announced in the
// node's registration answer: what `lattice netcheck` checks when given
// none (through the status socket, which only the node's owner reads).
func (n *Node) Servers() (stun []string, relays []controlapi.Relay) {
	if n.resp == nil { // set in Start, before the node is returned
		return nil, nil
	}
	return slices.Clone(n.resp.STUN), slices.Clone(n.resp.Relays)
}
