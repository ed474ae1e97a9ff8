package audit

import (
	"time"
	"unicode/utf8"
)

// Event is one audited fact. Only Kind is required.
type Event struct {
	// Time is when it happened. If zero, the time of Write.
	Time time.Time `json:"time"`
	// Kind says what happened: "start", "stop", "connect", "login", "egress",
	// "forward", "policy", ...
	Kind string `json:"kind"`
	// Decision is "allow" or "deny" for decisions.
	Decision string `json:"decision,omitempty"`
	// Proto is "tcp", "udp", "icmp", ...
	Proto string `json:"proto,omitempty"`
	// Src and Dst are endpoints, "addr:port".
	Src string `json:"src,omitempty"`
	Dst string `json:"dst,omitempty"`
	// Rule is what decided, e.g. a policy.Decision's Rule.
	Rule string `json:"rule,omitempty"`
	// Detail is free text.
	Detail string `json:"detail,omitempty"`
}

// Field limits, in bytes, so that one line stays far below MaxLineLen
// whatever the caller passes. Longer values are cut at a UTF-8 boundary
// and end in "…".
const (
	// MaxDetailLen bounds Detail and Rule.
	MaxDetailLen = 1024
	// MaxFieldLen bounds Kind, Decision, Proto, Src and Dst.
	MaxFieldLen = 256
)

// clipped returns ev with every field within its limit.
func (ev Event) clipped() Event {
	ev.Kind = clip(ev.Kind, MaxFieldLen)
	ev.Decision = clip(ev.Decision, MaxFieldLen)
	ev.Proto = clip(ev.Proto, MaxFieldLen)
	ev.Src = clip(ev.Src, MaxFieldLen)
	ev.Dst = clip(ev.Dst, MaxFieldLen)
	ev.Rule = clip(ev.Rule, MaxDetailLen)
	ev.Detail = clip(ev.Detail, MaxDetailLen)
	return ev
}

const ellipsis = "…"

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len(ellipsis)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ellipsis
}

// Sink receives audit events. The sandbox writes every egress decision,
// connection and inbound forward to one.
type Sink interface {
	// Write records ev. It is safe for concurrent use. An error means ev
	// was not recorded, and a FileWriter records nothing more after a
	// failed write: the caller decides whether to carry on unaudited.
	Write(ev Event) error
}

// Discard is a Sink that records nothing and never fails.
var Discard Sink = discard{}

type discard struct{}

func (discard) Write(Event) error { return nil }

var (
	_ Sink = (*FileWriter)(nil)
	_ Sink = discard{}
)
