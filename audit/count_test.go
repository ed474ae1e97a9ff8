package audit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

type failingSink struct{ n int }

func (f *failingSink) Write(Event) error {
	f.n++
	if f.n%2 == 0 {
		return errors.New("disk full")
	}
	return nil
}

// TestCounter: egress decisions count by decision and rule, other kinds
// not at all; a failed write still counts its decision and counts as a
// failure; past MaxCountedRules rules, new rules count under RuleOther
// while rules already seen keep their own series.
func TestCounter(t *testing.T) {
	c := NewCounter(&failingSink{})
	for range 3 {
		_ = c.Write(Event{Kind: "egress", Decision: "deny", Rule: "metadata"})
	}
	_ = c.Write(Event{Kind: "egress", Decision: "allow", Rule: "policy.yaml:3 allow peer:web"})
	_ = c.Write(Event{Kind: "start", Detail: "not a decision"})
	assert.Equal(t, map[Decision]uint64{{"deny", "metadata"}: 3, {"allow", "policy.yaml:3 allow peer:web"}: 1}, c.Decisions())
	assert.Equal(t, uint64(2), c.Failures(), "writes 2 and 4 failed")

	for i := range MaxCountedRules + 10 {
		_ = c.Write(Event{Kind: "egress", Decision: "allow", Rule: fmt.Sprintf("rule %d", i)})
	}
	_ = c.Write(Event{Kind: "egress", Decision: "deny", Rule: "metadata"})
	got := c.Decisions()
	assert.Len(t, got, MaxCountedRules+1, "the first 64 series and other")
	assert.Equal(t, uint64(4), got[Decision{"deny", "metadata"}], "a rule seen before keeps counting under its name")
	assert.Equal(t, uint64(12), got[Decision{"allow", RuleOther}], "rules 62..73 past the bound")
}

// TestCounterNilNext: a Counter with no log behind it only counts.
func TestCounterNilNext(t *testing.T) {
	c := NewCounter(nil)
	assert.NoError(t, c.Write(Event{Kind: "egress", Decision: "deny", Rule: "r"}))
	assert.Equal(t, map[Decision]uint64{{"deny", "r"}: 1}, c.Decisions())
	assert.Zero(t, c.Failures())
}
