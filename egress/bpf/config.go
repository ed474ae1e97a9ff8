package bpf

import (
	"log/slog"
	"net/netip"

	"github.com/latticelab/lattice/policy"
)

// Config configures a Filter. Only Interface is required.
type Config struct {
	// Interface is the name of the interface whose egress is filtered:
	// the overlay interface for `lattice up`, the pod's wg0 or veth in
	// gvisor mode. New (or Attach, after a Load anywhere) must run in
	// that interface's network namespace (internal/netns.Do). Ethernet links (with a hardware address) and
	// TUN devices (without) are both understood.
	Interface string
	// Policy is enforced from the first packet. If nil, everything is
	// denied ("no policy"), as Policy.Decide does.
	Policy *policy.Policy
	// Peers maps overlay node names (compared case-insensitively) to
	// their overlay addresses, for peer:NAME rules. The kernel sees
	// addresses only, so names are resolved here.
	Peers map[string][]netip.Addr
	// HostAddrs are the host's own addresses (policy.Dest.Host): denied
	// unless a rule names them.
	HostAddrs []netip.Addr
	// ReportAllowed reports allowed new connections as events too: TCP
	// SYNs (a SYN whose 5-tuple was reported in the last 30 s is a
	// retransmission and not reported again), and the first datagram of a
	// UDP flow (by 5-tuple, among the last 65,536 flows). Drops are
	// always reported.
	ReportAllowed bool
	// OnEvent receives the kernel's decisions, in order, on one goroutine
	// the Filter owns; it must not block for long (a full ring buffer
	// loses events, never verdicts). If nil, events are not read.
	OnEvent func(Event)
	// PinDir, if set, is a directory on a bpffs where the attachment is
	// pinned as "link": the filter then outlives the process (fail
	// closed). A link pinned there by an earlier run is replaced without
	// a gap. If empty, the filter goes when the process does.
	PinDir string
	// KeepPinned leaves the pinned link in place on Close.
	KeepPinned bool
	// MaxEntries bounds the LPM trie. If zero, 16384 prefixes; at least
	// 4, at most 2^32-1.
	MaxEntries int
	// Logger; nil discards.
	Logger *slog.Logger
}
