package node

import (
	"context"
	"errors"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// Presence: control keeps a node online while its heartbeats come (every
// third of the TTL control gave at registration) and marks it offline
// when it leaves (Close) or the TTL passes without one (killed, network
// lost); see control/presence.go. An offline peer keeps its identity, but
// we stop reaching for it: no WireGuard peer, no ICE agent, no relay
// traffic, and packets for its address are answered with ICMP host
// unreachable (unreachableTUN), so connections fail at once.

// leaveTimeout bounds the goodbye in Close: a node whose control is
// unreachable still stops promptly, and peers then see it go after the
// TTL.
const leaveTimeout = 500 * time.Millisecond

// offlinePeer is a registered peer that is not running.
type offlinePeer struct {
	info    controlapi.Peer
	history []PathEvent
	// The byte counters the peer had when it went offline: status keeps
	// showing them, and they carry over when it comes back, so a peer's
	// counters are totals since this node started.
	byteCounters
}

// byteCounters are a peer's bytes each way on each path.
type byteCounters struct{ txDirect, txRelay, rxDirect, rxRelay uint64 }

// countersOf reads path's byte counters.
func countersOf(path *Path) byteCounters {
	return byteCounters{path.TxDirect.Load(), path.TxRelay.Load(), path.RxDirect.Load(), path.RxRelay.Load()}
}

// PresenceTTL is how long after its last heartbeat control shows a node
// offline when it stops without leaving (killed, network lost): the
// liveness timeout. Zero if control tracks no presence.
func (n *Node) PresenceTTL() time.Duration {
	if n.resp == nil {
		return 0
	}
	return time.Duration(n.resp.PresenceTTLMillis) * time.Millisecond
}

// peerOffline stops reaching for a peer that control says is not running.
func (n *Node) peerOffline(info controlapi.Peer) {
	info.Offline = false // the stored identity; presence is where it is kept
	n.mu.Lock()
	if n.closed || info.NodeID == n.id.NodeID {
		n.mu.Unlock()
		return
	}
	if off := n.offline[info.NodeID]; off != nil && off.info.Equal(info) {
		n.mu.Unlock()
		return
	}
	p := n.peers[info.NodeID]
	delete(n.peers, info.NodeID)
	off := &offlinePeer{info: info}
	if old := n.offline[info.NodeID]; old != nil {
		off.history = old.history
		off.byteCounters = old.byteCounters
		n.tun.setOffline(old.info.Address.Addr(), false)
	}
	if p != nil {
		// Its counters as they stand, so that status never shows the
		// offline peer with none while the actor stops (taken again,
		// final, below).
		off.byteCounters = countersOf(p.path)
	}
	n.offline[info.NodeID] = off
	n.tun.setOffline(info.Address.Addr(), true)
	n.tun.setPath(info.Address.Addr(), nil)
	n.mu.Unlock()
	// off is published: Status reads it under n.mu, so what the stopped
	// peer leaves behind is gathered first and written under n.mu.
	var hist []PathEvent
	var final byteCounters // once the actor has stopped
	if p != nil {
		p.close()
		p.mu.Lock()
		hist = append(hist, p.history...)
		p.mu.Unlock()
		final = countersOf(p.path)
		n.forgetTrim(p)
		_ = n.dev.IpcSet("public_key=" + p.info.PublicKey.Hex() + "\nremove=true\n")
		n.bind.RemovePeer(p.info.PublicKey)
	}
	n.mu.Lock()
	if p != nil {
		off.byteCounters = final
	}
	off.history = append(off.history, hist...)
	off.history = append(off.history, PathEvent{Time: time.Now(), To: PathOffline, Reason: "control: the peer is not running"})
	if len(off.history) > maxHistory {
		off.history = off.history[len(off.history)-maxHistory:]
	}
	n.mu.Unlock()
	n.log.Info("peer offline", "peer", info.Name)
}

// startHeartbeat tells control, now and every third of the TTL, that the
// node is running.
func (n *Node) startHeartbeat() {
	ttl := n.PresenceTTL()
	if ttl <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.mu.Lock()
	n.stopHeartbeat, n.heartbeatDone = cancel, done
	n.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		var lost uint64 // the registration control last said it has no record of
		for {
			hctx, hcancel := context.WithTimeout(ctx, ttl/3)
			epoch := n.epoch.Load()
			err := n.session.Load().Presence(hctx, true, epoch)
			hcancel()
			var e *controlapi.Error
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.As(err, &e) && e.Code == controlapi.CodeNotFound && epoch != lost:
				// The registry lost this node's record while its session
				// stayed up (emptied, or made again): no peer hears of it,
				// and it hears only of peers that list it. It registers
				// again, as when control refuses its session; once per
				// registration, the next heartbeats meanwhile aside.
				lost = epoch
				n.log.Warn("control has no record of this node (its registry was emptied or made again); registering again", "epoch", epoch)
				go n.reregister()
			default:
				n.log.Debug("presence heartbeat", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// leave stops the heartbeat and tells control the node is going offline.
func (n *Node) leave() {
	n.mu.Lock()
	stop, done := n.stopHeartbeat, n.heartbeatDone
	n.mu.Unlock()
	stop()
	if done == nil {
		return
	}
	<-done
	s := n.session.Load()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := s.Presence(ctx, false, n.epoch.Load()); err != nil {
		n.log.Warn("could not tell control we are leaving; peers see us offline after the liveness timeout", "timeout", n.PresenceTTL(), "err", err)
		return
	}
	n.log.Info("left: peers see us offline")
}
