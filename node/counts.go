package node

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
)

// SwitchKey is one series of path switches: the path switched to and
// why, as a bounded label (SwitchReason).
type SwitchKey struct {
	To     PathKind
	Reason string
}

// SwitchReason maps a PathEvent's reason, free text, to one of a few
// labels: ice_nominated, direct_answered, peer_offline, peer_registered,
// idle, relay_only, ice_timeout, direct_unanswered, direct_silent, other.
func SwitchReason(ev PathEvent) string {
	r := ev.Reason
	switch {
	case ev.To == PathDirect && strings.HasPrefix(r, reasonAnsweredAgain):
		return "direct_answered"
	case ev.To == PathDirect:
		return "ice_nominated"
	case ev.To == PathOffline:
		return "peer_offline"
	case strings.HasPrefix(r, "peer registered"):
		return "peer_registered"
	case strings.HasPrefix(r, "idle"):
		return "idle"
	case strings.Contains(r, "RelayOnly"):
		return "relay_only"
	case strings.HasPrefix(r, "attempt timed out"):
		return "ice_timeout"
	case strings.HasPrefix(r, reasonUnanswered):
		return "direct_unanswered"
	case strings.Contains(r, "silent"):
		return "direct_silent"
	}
	return "other"
}

// switchCounts counts every path switch of a node's peers, by SwitchKey:
// exact, unlike a peer's history, which keeps the last 32.
type switchCounts struct {
	mu sync.Mutex // guards m
	m  map[SwitchKey]uint64
}

func (c *switchCounts) add(ev PathEvent) {
	k := SwitchKey{To: ev.To, Reason: SwitchReason(ev)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[SwitchKey]uint64{}
	}
	c.m[k]++
}

func (c *switchCounts) snapshot() map[SwitchKey]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// PathSwitches returns how many times the node's peers switched path
// since it started, by new path and reason, counted as they happen.
func (n *Node) PathSwitches() map[SwitchKey]uint64 { return n.switches.snapshot() }

// iceCounts counts a node's ICE attempts and how they ended.
type iceCounts struct {
	attempts, connected, failed atomic.Uint64
}

// ICECounts says how many ICE attempts the node's peers made since it
// started (each with an agent and a session), how many connected, and how
// many failed (timed out, unanswered, refused, or could not gather);
// attempts superseded by a newer one, or still running, are neither.
type ICECounts struct {
	Attempts, Connected, Failed uint64
}

// ICECounts returns the node's ICE attempt counts, counted as they happen.
func (n *Node) ICECounts() ICECounts {
	return ICECounts{Attempts: n.ice.attempts.Load(), Connected: n.ice.connected.Load(), Failed: n.ice.failed.Load()}
}
