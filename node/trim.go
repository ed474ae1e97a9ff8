package node

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/latticelab/lattice/control/controlapi"
)

// WireGuard state only for active peers (issue 22.2). wireguard-go keeps
// about 45 KiB per peer (its queues and two goroutines per peer), whether
// the peer is used or not, so a mesh of N lazy nodes still held N² of it:
// 1000 nodes would need about 45 GB. A lazy peer that is idle is taken out
// of wireguard-go's configuration (trimmed) and put back, synchronously,
// by the first packet either way, before wireguard-go sees it:
//   - a packet from the TUN device to the peer's overlay address
//     (unreachableTUN.Read), which wireguard-go would otherwise drop for
//     want of a peer with that allowed IP;
//   - a packet from the peer, through the relay or the direct socket (the
//     Bind), which it would drop as from an unknown key.
// The handshake that follows runs over the relay, as for any idle peer.
// Only a node running wireguard-go on our TUN wrapper trims (Config.Device
// devices keep every peer).

// wgState is a peer's place in wireguard-go's configuration.
type wgState struct {
	mu      sync.Mutex
	trimmed bool
}

// wgRestore is a Path's hook: set while the peer is trimmed, taken and
// called by the first packet from it.
type wgRestore struct {
	restore atomic.Pointer[func()]
}

// restoreWG puts a trimmed peer back before one of its packets goes on;
// it is a no-op for a peer in the configuration.
func (p *Path) restoreWG() {
	if f := p.restore.Load(); f != nil && p.restore.CompareAndSwap(f, nil) {
		(*f)()
	}
}

// canTrim reports whether this node trims idle peers.
func (n *Node) canTrim() bool { return n.tun != nil && n.cfg.Device == nil }

// wgPeerConfig is the UAPI text that adds (or updates) info as a peer.
func wgPeerConfig(info controlapi.Peer, keepalive int) string {
	return fmt.Sprintf("public_key=%s\nreplace_allowed_ips=true\nendpoint=%s\nallowed_ip=%s\npersistent_keepalive_interval=%d\n",
		info.PublicKey.Hex(), EndpointString(info.PublicKey), netip.PrefixFrom(info.Address.Addr(), 32), keepalive)
}

// trimWG takes an idle lazy peer out of WireGuard's configuration and arms
// the hooks that put it back, unless a handshake or data went either way
// since the peer was found idle (Unix ns): WireGuard may hold a packet
// behind that handshake, and removing the peer would drop it. It reports
// false then, and true otherwise.
//
// The check narrows the window to the moment between WireGuard reading a
// packet for the peer and sending the initiation it opens; closing it
// would take a lock on every packet the interface reads.
func (n *Node) trimWG(p *peer, since int64) bool {
	if !n.canTrim() {
		return true
	}
	p.wg.mu.Lock()
	defer p.wg.mu.Unlock()
	if p.wg.trimmed {
		return true
	}
	if p.path.initAt.Load() > since || p.path.lastData.Load() > since {
		n.log.Debug("peer not trimmed: traffic since it went idle", "peer", p.info.Name)
		return false
	}
	p.wg.trimmed = true
	restore := func() { n.restoreWG(p) }
	p.path.restore.Store(&restore)
	n.tun.noteTrimmed(true)
	if err := n.dev.IpcSet("public_key=" + p.info.PublicKey.Hex() + "\nremove=true\n"); err != nil {
		n.log.Debug("trim WireGuard peer", "peer", p.info.Name, "err", err)
	}
	return true
}

// restoreWG puts a trimmed peer back into WireGuard's configuration.
func (n *Node) restoreWG(p *peer) {
	p.wg.mu.Lock()
	defer p.wg.mu.Unlock()
	if !p.wg.trimmed {
		return
	}
	p.wg.trimmed = false
	p.path.restore.Store(nil)
	n.tun.noteTrimmed(false)
	// Pending while WireGuard adds the peer back (Path.pending): an
	// initiation that comes meanwhile, past the hook cleared above, may
	// be dropped by WireGuard, and its copies must pass.
	p.path.pending.Store(true)
	defer n.bind.Ready(p.path)
	if err := n.dev.IpcSet(wgPeerConfig(p.info, 0)); err != nil {
		n.log.Warn("restore WireGuard peer", "peer", p.info.Name, "err", err)
	}
}

// forgetTrim drops a removed peer's hooks (it is not in WireGuard's
// configuration any more either way).
func (n *Node) forgetTrim(p *peer) {
	p.wg.mu.Lock()
	defer p.wg.mu.Unlock()
	if p.wg.trimmed {
		n.tun.noteTrimmed(false)
	}
	p.wg.trimmed = false
	p.path.restore.Store(nil)
}

// markTrimmed records that a peer addPeer did not configure is out of
// WireGuard's configuration, with the hooks that put it in.
func (n *Node) markTrimmed(p *peer) {
	p.wg.mu.Lock()
	defer p.wg.mu.Unlock()
	if p.wg.trimmed {
		return
	}
	p.wg.trimmed = true
	restore := func() { n.restoreWG(p) }
	p.path.restore.Store(&restore)
	n.tun.noteTrimmed(true)
}

// noteTrimmed counts a peer taken out of WireGuard's configuration (on)
// or put back; the trimmed peers are the paths (setPath) whose restore
// hook is set. One map for the MTU's lookups and these: a second one,
// holding every lazy peer from the start, was a map entry per peer.
func (u *unreachableTUN) noteTrimmed(on bool) {
	if u == nil {
		return
	}
	if on {
		u.trimmed.Add(1)
	} else {
		u.trimmed.Add(-1)
	}
}

// restoreTrimmed puts back the trimmed peers the packets in bufs go to.
func (u *unreachableTUN) restoreTrimmed(bufs [][]byte, sizes []int, offset, n int) {
	if u.trimmed.Load() == 0 {
		return
	}
	var restore []*Path
	u.mu.RLock()
	for i := range min(n, len(bufs), len(sizes)) {
		_, dst, ok := ipAddrs(bufs[i][offset : offset+sizes[i]]) //nolint:gosec // i < len(sizes): the range above
		if !ok {
			continue
		}
		if p := u.paths[dst]; p != nil && p.restore.Load() != nil {
			restore = append(restore, p)
		}
	}
	u.mu.RUnlock()
	// restoreWG takes WireGuard's locks: not under u.mu.
	for _, p := range restore {
		p.restoreWG()
	}
}
