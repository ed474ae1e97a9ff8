package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Token renewal. The relay checks a token only in HELLO, so a connection
// outlives its token; what must stay fresh is the token the next
// connection presents (after a relay restart, a lost NAT mapping, a
// replaced connection). The client renews it at two thirds of its life,
// which leaves a third for control to be unreachable meanwhile, and at
// once when the relay refuses it: a relay whose clock runs ahead calls a
// token expired that the client thinks good.

const (
	// minRenewRetry and maxRenewRetry bound the jittered, doubling delay
	// between failed renewals.
	minRenewRetry = time.Second
	maxRenewRetry = time.Minute
)

// SetToken replaces the relay token used from the next connection
// attempt on, e.g. when control issued a fresh one before expiry.
func (c *Client) SetToken(t Token) {
	c.mu.Lock()
	c.token, c.tokenAt = t, time.Now()
	c.mu.Unlock()
	select {
	case c.tokenSet <- struct{}{}:
	default:
	}
}

func (c *Client) currentToken() Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// renewalDue returns how long until the current token is due for renewal:
// two thirds of the life it had when it was set. ok is false when the
// token's expiry cannot be read (the relay will refuse it, and the refusal
// renews it).
func (c *Client) renewalDue() (wait time.Duration, ok bool) {
	c.mu.Lock()
	tok, at := c.token, c.tokenAt
	c.mu.Unlock()
	_, exp, err := InspectToken(tok)
	if err != nil {
		c.log.Warn("relay token has no readable expiry; renewing it when the relay refuses it", "err", err)
		return 0, false
	}
	life := exp.Sub(at)
	// Never sooner than minRenewRetry after the last change, so a token
	// that comes back expired (control's clock behind ours) is not
	// renewed in a busy loop.
	due := at.Add(life - life/3)
	if soonest := at.Add(minRenewRetry); due.Before(soonest) {
		due = soonest
	}
	return time.Until(due), true
}

// renewLoop renews the token when it is due until Close. SetToken
// reschedules it.
func (c *Client) renewLoop() {
	defer c.wg.Done()
	var retry time.Duration // after a failed renewal, the delay before the next
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait, ok := retry, true
		if retry == 0 {
			wait, ok = c.renewalDue()
		}
		var due <-chan time.Time
		if ok {
			t.Reset(max(wait, 0))
			due = t.C
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.tokenSet:
			retry = 0
			continue
		case <-due:
		}
		if err := c.renew(c.currentToken(), "two thirds of its life passed"); err != nil {
			retry = min(max(2*retry, minRenewRetry), maxRenewRetry)
			retry = retry/2 + rand.N(retry/2+1) // #nosec G404 -- jitter needs no cryptographic randomness
			continue
		}
		retry = 0
	}
}

// renew replaces stale, if it is still the current token, with a fresh one
// from RenewToken. It returns nil when the current token is no longer
// stale, and an error wrapping ErrTokenRenewal otherwise.
func (c *Client) renew(stale Token, why string) error {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	if c.currentToken() != stale {
		return nil // renewed (or set) since
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout)
	defer cancel()
	tok, err := c.cfg.RenewToken(ctx)
	if err == nil {
		err = c.checkRenewed(tok)
	}
	if err != nil {
		if c.ctx.Err() != nil {
			return ErrClosed
		}
		c.stats.renewFailures.Add(1)
		c.log.Warn("relay token renewal failed", "why", why, "err", err)
		return fmt.Errorf("%w (%s): %w", ErrTokenRenewal, why, err)
	}
	c.stats.renewals.Add(1)
	c.SetToken(tok)
	c.log.Debug("relay token renewed", "why", why)
	return nil
}

// checkRenewed refuses a token that cannot work: one that does not parse,
// is too long for HELLO, or was issued for another key.
func (c *Client) checkRenewed(tok Token) error {
	if len(tok) > MaxTokenSize {
		return fmt.Errorf("renewed token is %d bytes, more than %d", len(tok), MaxTokenSize)
	}
	pub, exp, err := InspectToken(tok)
	if err != nil {
		return fmt.Errorf("renewed token: %w", err)
	}
	if pub != c.cfg.Key {
		return fmt.Errorf("renewed token is for %s, not %s", pub.ShortString(), c.cfg.Key.ShortString())
	}
	if !time.Now().Before(exp) {
		// Our clock may be the wrong one; the relay decides.
		c.log.Warn("renewed relay token is already expired by this host's clock", "expiry", exp.UTC())
	}
	return nil
}

// refusedToken reports whether err carries the relay's refusal of a token.
func refusedToken(err error) bool {
	var ce *CloseError
	return errors.As(err, &ce) && ce.Remote && ce.Code.IsAuth()
}

// authFinal reports whether err is a refusal WaitConnected should return
// at once: one the client cannot fix by itself.
func (c *Client) authFinal(err error) bool {
	var ce *CloseError
	if !errors.As(err, &ce) || !ce.Code.IsAuth() {
		return false
	}
	return c.cfg.RenewToken == nil || errors.Is(err, ErrTokenRenewal)
}
