package control

import (
	"crypto/subtle"
	"fmt"
	"time"
)

// JoinToken admits nodes. A token with a zero Expires never expires.
type JoinToken struct {
	Value   string
	Expires time.Time
}

// tokenSet checks join tokens in constant time: every configured token is
// compared in full, whichever matches, so timing tells nothing about how
// much of a guess was right or which token it was close to.
type tokenSet []JoinToken

func (ts tokenSet) check(given string, now time.Time) error {
	match, expired, which := 0, 0, 0
	for i, t := range ts {
		eq := subtle.ConstantTimeCompare([]byte(t.Value), []byte(given))
		live := 1
		if !t.Expires.IsZero() && !now.Before(t.Expires) {
			live = 0
		}
		match |= eq & live
		expired |= eq & (1 - live)
		which = subtle.ConstantTimeSelect(eq&(1-live), i, which)
	}
	switch {
	case match == 1:
		return nil
	case expired == 1:
		at := ts[which].Expires.UTC().Format(time.RFC3339)
		return &Error{Code: CodeBadToken, Message: "join token expired at " + at}
	default:
		return &Error{Code: CodeBadToken, Message: "join token not accepted"}
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
		if len(t.Value) > MaxTokenBytes {
			return fmt.Errorf("control: join token %d is longer than %d bytes", i+1, MaxTokenBytes)
		}
	}
	return nil
}
