package iptables

import (
	"log/slog"
	"net/netip"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/policy"
)

// Audit returns e as the audit log's "egress" event, in the shape pod
// mode and the eBPF filter write (Decision, Proto, Src, Dst, Rule).
func (e Event) Audit(iface string) audit.Event {
	ev := audit.Event{
		Kind: "egress", Decision: "deny", Proto: e.Proto.String(), Rule: e.Rule,
		Src:    netip.AddrPortFrom(e.Src, e.SrcPort).String(),
		Dst:    netip.AddrPortFrom(e.Dst, e.DstPort).String(),
		Detail: "kernel filter (iptables), interface " + iface,
	}
	if e.Allow {
		ev.Decision = "allow"
	}
	if e.Proto == policy.ProtoAny {
		ev.Proto = "other"
	}
	return ev
}

// AuditTo returns an OnEvent writing each event to sink. The packet was
// decided by the time its event arrives, so a failed write is only
// logged.
func AuditTo(sink audit.Sink, iface string, log *slog.Logger) func(Event) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(e Event) {
		if err := sink.Write(e.Audit(iface)); err != nil {
			log.Error("egress event not audited", "event", e.String(), "err", err)
		}
	}
}
