package sandbox

import (
	"sync"

	"github.com/latticelab/lattice/audit"
)

// EgressDecision is one label pair of the egress decision counts: the
// decision ("allow" or "deny") and the rule that made it.
type EgressDecision struct{ Decision, Rule string }

// maxEgressRules bounds the distinct rules counted; decisions by rules
// beyond it count under RuleOther. A policy's rules are few, but reloads
// can bring new ones for as long as the sandbox runs.
const maxEgressRules = 64

// RuleOther is the rule egress decisions count under once maxEgressRules
// distinct rules have been seen.
const RuleOther = "other"

// egressCounts counts the egress decisions the sandbox audits.
type egressCounts struct {
	mu sync.Mutex // guards m
	m  map[EgressDecision]uint64
}

func (c *egressCounts) observe(ev audit.Event) {
	if ev.Kind != "egress" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[EgressDecision]uint64{}
	}
	k := EgressDecision{Decision: ev.Decision, Rule: ev.Rule}
	if _, ok := c.m[k]; !ok && len(c.m) >= maxEgressRules {
		k.Rule = RuleOther
	}
	c.m[k]++
}

// EgressDecisions returns how many egress decisions the sandbox made, by
// decision and rule: every one it audited or tried to audit.
func (b *base) EgressDecisions() map[EgressDecision]uint64 {
	b.egressN.mu.Lock()
	defer b.egressN.mu.Unlock()
	out := make(map[EgressDecision]uint64, len(b.egressN.m))
	for k, v := range b.egressN.m {
		out[k] = v
	}
	return out
}
