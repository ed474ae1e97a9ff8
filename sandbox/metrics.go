package sandbox

import "github.com/latticelab/lattice/audit"

// EgressDecision is one label pair of the egress decision counts: the
// decision ("allow" or "deny") and the rule that made it.
type EgressDecision = audit.Decision

// RuleOther is the rule egress decisions count under once
// audit.MaxCountedRules distinct rules have been seen.
const RuleOther = audit.RuleOther

// EgressDecisions returns how many egress decisions the sandbox made, by
// decision and rule: every one it audited or tried to audit.
func (b *base) EgressDecisions() map[EgressDecision]uint64 { return b.egressN.Counts() }
