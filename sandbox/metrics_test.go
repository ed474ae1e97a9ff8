package sandbox

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/latticelab/lattice/audit"
)

// TestEgressDecisionCounts: egress events count by decision and rule,
// other kinds not at all, and rules past the cap under RuleOther.
func TestEgressDecisionCounts(t *testing.T) {
	var b base
	b.egressN.observe(audit.Event{Kind: "egress", Decision: "allow", Rule: "web"})
	b.egressN.observe(audit.Event{Kind: "egress", Decision: "allow", Rule: "web"})
	b.egressN.observe(audit.Event{Kind: "egress", Decision: "deny", Rule: "default deny"})
	b.egressN.observe(audit.Event{Kind: "login", Decision: "deny"})
	assert.Equal(t, map[EgressDecision]uint64{{"allow", "web"}: 2, {"deny", "default deny"}: 1}, b.EgressDecisions())
	for i := range 2 * maxEgressRules {
		b.egressN.observe(audit.Event{Kind: "egress", Decision: "allow", Rule: fmt.Sprint("r", i)})
	}
	got := b.EgressDecisions()
	assert.Len(t, got, maxEgressRules+1)
	assert.Equal(t, uint64(2*maxEgressRules-(maxEgressRules-2)), got[EgressDecision{"allow", RuleOther}])
	assert.Equal(t, uint64(2), got[EgressDecision{"allow", "web"}], "a rule seen before the cap keeps its own count")
}
