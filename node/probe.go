package node

import (
	"context"
	"sync"
	"time"
)

// A direct path going silent may mean our network changed under us (a
// NAT on the way rebooted and forgot every mapping). Relay and control
// connections through it are then dead too, but TCP only finds out when a
// keepalive times out, after a minute or more. So the node probes both
// (see relay.Client.Probe, control.Session.Probe), at most every
// probeEvery, and each reconnects at once if it does not answer within
// probeTimeout.
const (
	probeEvery   = 10 * time.Second
	probeTimeout = 2 * time.Second
)

// relayProber is a RelayClient that can check its connection.
type relayProber interface {
	Probe(ctx context.Context, timeout time.Duration) error
}

// kickProbes asks probeLoop to check the uplinks; it never blocks.
func (n *Node) kickProbes() {
	select {
	case n.probeKick <- struct{}{}:
	default:
	}
}

// probeLoop runs the probes kickProbes asks for until ctx ends.
func (n *Node) probeLoop(ctx context.Context) {
	defer close(n.probesDone)
	var last time.Time
	// A kick that comes less than probeEvery after the last probe is
	// deferred to probeEvery after it, not dropped: one path going silent
	// moments after another (a NAT reboot cuts them one by one) must
	// still get its probe. Dropped, a reboot 10 s after a first silence
	// left a dead relay connection to NATS' own ping timeout (a relayed
	// stream stalled 102 s in about half the runs instead of 12.6 s).
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	deferred := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.probeKick:
		case <-later.C:
			deferred = false
		}
		if wait := probeEvery - time.Since(last); !last.IsZero() && wait > 0 {
			if !deferred {
				deferred = true
				later.Reset(wait)
			}
			continue
		}
		if deferred {
			later.Stop()
			deferred = false
		}
		last = time.Now()
		var wg sync.WaitGroup
		if rp, ok := n.relay.(relayProber); ok {
			wg.Go(func() {
				if err := rp.Probe(ctx, probeTimeout); err != nil && ctx.Err() == nil {
					n.log.Info("a direct path went silent and the relay did not answer a probe: reconnecting", "err", err)
				}
			})
		}
		if s := n.session.Load(); s != nil {
			wg.Go(func() {
				if err := s.Probe(ctx, probeTimeout); err != nil && ctx.Err() == nil {
					n.log.Info("a direct path went silent and control did not answer a probe: reconnecting", "err", err)
				}
			})
		}
		wg.Wait()
		n.networkChanged()
	}
}

// networkChanged tells every peer that the node's network may have
// changed (a direct path went silent, an uplink was probed): a peer whose
// attempts found no pair while nothing changed tries again at once
// (nopair.go). It runs at most once per probeEvery, after the probes.
func (n *Node) networkChanged() { n.tellPeers(peerEvent{changed: true}) }

// tellPeers posts ev to every peer.
func (n *Node) tellPeers(ev peerEvent) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.peers {
		p.post(ev)
	}
}
