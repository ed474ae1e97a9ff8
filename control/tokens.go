package control

import (
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// JoinToken admits nodes. A token with a zero Expires never expires.
type JoinToken struct {
	Value   string
	Expires time.Time
	// Tags are given to every node that registers with this token
	// (Peer.Tags): peers may treat tagged nodes apart, e.g. negotiate a
	// direct path with routers at once (node ICEConfig.AlwaysDirect).
	// Each is a valid node name; at most maxTokenTags.
	Tags []string
}

// maxTokenTags bounds a token's tags, and so every peer entry's.
const maxTokenTags = 8

// tokenSet checks join tokens in constant time: every configured token is
// compared in full, whichever matches, so timing tells nothing about how
// much of a guess was right or which token it was close to.
type tokenSet []JoinToken

// check admits given if it is a live token, and returns that token's tags.
func (ts tokenSet) check(given string, now time.Time) (tags []string, err error) {
	match, expired, which, live := 0, 0, 0, 0
	for i, t := range ts {
		eq := subtle.ConstantTimeCompare([]byte(t.Value), []byte(given))
		on := 1
		if !t.Expires.IsZero() && !now.Before(t.Expires) {
			on = 0
		}
		match |= eq & on
		expired |= eq & (1 - on)
		which = subtle.ConstantTimeSelect(eq&(1-on), i, which)
		live = subtle.ConstantTimeSelect(eq&on, i, live)
	}
	switch {
	case match == 1:
		return ts[live].Tags, nil
	case expired == 1:
		at := ts[which].Expires.UTC().Format(time.RFC3339)
		return nil, &controlapi.Error{Code: controlapi.CodeBadToken, Message: "join token expired at " + at}
	default:
		return nil, &controlapi.Error{Code: controlapi.CodeBadToken, Message: "join token not accepted"}
	}
}

func (ts tokenSet) validate() error {
	if len(ts) == 0 {
		return fmt.Errorf("control: no join tokens configured: nobody could join")
	}
	for i, t := range ts {
		if len(t.Value) < 16 {
			return fmt.Errorf("control: join token %d is %d characters; use at least 16", i+1, len(t.Value))
		}
		if len(t.Value) > controlapi.MaxTokenBytes {
			return fmt.Errorf("control: join token %d is longer than %d bytes", i+1, controlapi.MaxTokenBytes)
		}
		if len(t.Tags) > maxTokenTags {
			return fmt.Errorf("control: join token %d has %d tags, at most %d", i+1, len(t.Tags), maxTokenTags)
		}
		for _, tag := range t.Tags {
			if !controlapi.ValidName(tag) {
				return fmt.Errorf("control: join token %d: tag %q: use 1-63 lowercase letters, digits and inner hyphens", i+1, tag)
			}
		}
	}
	return nil
}
