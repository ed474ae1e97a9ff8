package bpf

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/latticelab/lattice/audit"
)

// Audit returns e as the audit log's "egress" event, in the same shape
// pod mode writes for a decision (Decision, Proto, Dst, Rule), with the
// source and the interface the kernel saw.
func (e Event) Audit() audit.Event {
	ev := audit.Event{
		Kind:     "egress",
		Decision: "deny",
		Proto:    e.Proto.String(),
		Src:      netip.AddrPortFrom(e.Src, e.SrcPort).String(),
		Dst:      netip.AddrPortFrom(e.Dst, e.DstPort).String(),
		Rule:     e.Rule,
		Detail:   fmt.Sprintf("kernel filter, interface %d", e.Interface),
	}
	if e.Allow {
		ev.Decision = "allow"
	}
	if e.Proto == 0 {
		ev.Proto = "other"
	}
	return ev
}

// AuditTo returns an OnEvent that writes each event to sink. The packet
// has been decided by the time its event arrives, so a failed write
// cannot stop it (pod mode refuses an unaudited flow; here it is only
// logged).
func AuditTo(sink audit.Sink, log *slog.Logger) func(Event) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(e Event) {
		if err := sink.Write(e.Audit()); err != nil {
			log.Error("egress event not audited", "event", e.String(), "err", err)
		}
	}
}
