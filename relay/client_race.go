package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A client without a configured transport races QUIC and TCP and keeps
// the one that measures better. Both handshakes start at once; once the
// first is done the other gets RaceWait to finish, and then the two
// handshake times are compared: QUIC's against TCP's and TLS's, from the
// first packet to a connection ready to authenticate. Both include one
// TLS key exchange and certificate check, so they compare paths, not
// crypto (a round-trip sample alone does not: quic-go's first one
// includes the server's signature, TCP's SYN/SYN-ACK nothing).
//
// TCP is kept unless QUIC's path measures clearly better. TCP and TLS
// take one round trip more than QUIC by design, and QUIC's own handshake
// bounds a round trip from above, so on a path that treats both alike
// TCP's handshake is at most twice QUIC's; QUIC wins when TCP's is longer
// than that by more than quicSlack (a shaped or lossy TCP path, a SYN
// retransmitted). On a healthy path TCP carries more: the relay's TCP
// forwards 2.4-6x QUIC's packets at a third of the CPU, and the node over
// it 1.8x, without QUIC's losses when quic-go's datagram queue overflows
// (docs/PERFORMANCE.md, 2026-12-07). A transport that fails or does not
// finish within RaceWait loses. The loser is closed before it
// authenticates, so the relay never sees two connections for one key (a
// second would replace the first).
//
// While connected, the client measures both again every Remeasure (fresh
// handshakes, closed unauthenticated) and moves to the other transport
// when it wins: a path whose TCP became slow or blocked goes to QUIC, and
// back when TCP recovers; UDP blocked or slow stays on TCP.

// quicSlack is how much longer than twice QUIC's handshake TCP's may be,
// at least, before QUIC wins the race: more than a busy machine's
// scheduling noise, less than a retransmitted SYN (a second) or a shaped
// TCP path's queueing.
const quicSlack = 20 * time.Millisecond

// pick chooses between the measured round trips (zero: that transport
// did not connect) and says why, in words for status.
func pick(quic, tcp time.Duration, wait time.Duration) (string, string) {
	switch {
	case quic > 0 && tcp <= 0:
		return transportQUIC, fmt.Sprintf("QUIC handshake %v; TCP did not connect within %v of it", round(quic), wait)
	case tcp > 0 && quic <= 0:
		return transportTCP, fmt.Sprintf("TCP+TLS handshake %v; QUIC did not connect within %v of it", round(tcp), wait)
	case tcp-quic > quic+quicSlack:
		return transportQUIC, fmt.Sprintf("measured: QUIC handshake %v against TCP+TLS's %v", round(quic), round(tcp))
	}
	return transportTCP, fmt.Sprintf("measured: TCP+TLS handshake %v against QUIC's %v (TCP kept unless QUIC's is shorter by its own length and %v)",
		round(tcp), round(quic), quicSlack)
}

func round(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

type raceResult struct {
	a   *attempt
	err error
}

// race connects over both transports and returns the better connection,
// not yet authenticated, and why it won; the other is closed, or
// cancelled while still connecting (its goroutine, counted in c.wg,
// closes what it gets too late).
func (c *Client) race(ctx context.Context) (*attempt, string, error) {
	results := make(chan raceResult, 2)
	var (
		mu       sync.Mutex // guards finished and sends on results
		finished bool
		cancels  = map[string]context.CancelFunc{}
	)
	for _, t := range []string{transportQUIC, transportTCP} {
		actx, cancel := context.WithCancel(ctx)
		cancels[t] = cancel
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			a, err := c.connect(actx, t)
			if a != nil {
				inner := a.cancel
				a.cancel = func() { inner(); cancel() }
			} else {
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if finished {
				if a != nil {
					a.close()
				}
				return
			}
			results <- raceResult{a, err}
		}()
	}
	got := map[string]*attempt{}
	defer func() {
		mu.Lock()
		finished = true
		mu.Unlock()
		for {
			select {
			case r := <-results:
				if r.a != nil {
					r.a.close()
				}
			default:
				return
			}
		}
	}()
	var (
		errs    []error
		running = 2
		wait    <-chan time.Time
	)
collect:
	for running > 0 {
		select {
		case r := <-results:
			running--
			if r.err != nil {
				errs = append(errs, r.err)
				continue
			}
			got[r.a.transport] = r.a
			if wait == nil {
				t := time.NewTimer(c.cfg.RaceWait)
				defer t.Stop()
				wait = t.C
			}
		case <-wait:
			break collect
		case <-ctx.Done():
			for _, a := range got {
				a.close()
			}
			return nil, "", ctx.Err()
		}
	}
	if len(got) == 0 {
		return nil, "", errors.Join(errs...)
	}
	var q, t time.Duration
	if a := got[transportQUIC]; a != nil {
		q = max(a.handshake, time.Nanosecond)
	}
	if a := got[transportTCP]; a != nil {
		t = max(a.handshake, time.Nanosecond)
	}
	winner, why := pick(q, t, c.cfg.RaceWait)
	if len(errs) > 0 {
		why += fmt.Sprintf(" (%v)", errors.Join(errs...))
	}
	for tr, cancel := range cancels {
		if a := got[tr]; a != nil && tr != winner {
			a.close()
		} else if a == nil {
			cancel() // still connecting: give up
		}
	}
	return got[winner], why, nil
}

// measure races fresh handshakes over both transports, closes them, and
// says which transport wins now and why.
func (c *Client) measure(ctx context.Context) (string, string, error) {
	a, why, err := c.race(ctx)
	if err != nil {
		return "", "", err
	}
	a.close()
	return a.transport, why, nil
}

// measureFor measures while cc lasts: its end cancels the measurement.
func (c *Client) measureFor(cc *cconn) (string, string, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-cc.w.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	defer func() {
		cancel()
		<-watched
	}()
	return c.measure(ctx)
}

// remeasure runs while cc serves a racing client: every Remeasure it
// measures both transports again and, when the other one wins, ends cc
// so that run reconnects at once (c.switching) over the winner.
func (c *Client) remeasure(cc *cconn) {
	t := time.NewTicker(c.cfg.Remeasure)
	defer t.Stop()
	for {
		select {
		case <-cc.w.done:
			return
		case <-t.C:
		}
		winner, why, err := c.measureFor(cc)
		if err != nil || winner == cc.w.transport {
			continue
		}
		c.log.Info("relay transport switching", "from", cc.w.transport, "to", winner, "why", why)
		c.switching.Store(true)
		cc.w.fail(CloseNormal, "switching to "+winner, nil, false)
		return
	}
}
