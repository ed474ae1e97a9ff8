package runner

import (
	"time"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/relay"
)

// defaultRelayTokenTTL is how long a relay token lasts when the topology
// sets no relay_token_ttl.
const defaultRelayTokenTTL = 24 * time.Hour

// joinTokens is control's join token, expiring token_ttl after the lab
// started (so a control restart does not extend it).
func (l *Lab) joinTokens() []control.JoinToken {
	t := control.JoinToken{Value: l.plan.Token}
	if l.plan.TokenTTL > 0 {
		t.Expires = l.start.Add(l.plan.TokenTTL)
	}
	return []control.JoinToken{t}
}

// issueRelayToken is control's RelayToken: a token for k valid for the
// topology's relay_token_ttl from now.
func (l *Lab) issueRelayToken(k key.Public, now time.Time) (string, error) {
	ttl := l.plan.RelayTokenTTL
	if ttl <= 0 {
		ttl = defaultRelayTokenTTL
	}
	return string(relay.IssueToken(l.shared.secret, k, now.Add(ttl))), nil
}
