package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
)

// Start reaches control twice before it returns: to register, and to open
// the control session. Either can fail for a moment (control is
// restarting, the machine is loaded and a connect times out, a NAT on the
// way has just rebooted), and a node that gave up at the first timeout
// left its caller to start it again. So start (registerIdentity, join)
// tries each again, backing off, while the failure is one of getting
// there; a refusal (a control *Error: a bad token, a bad proof, a name
// taken) or a NATS authorization failure is the answer and is returned at
// once, as is the caller's context ending. reregister, which calls the
// same two steps later, has a backoff loop of its own.

// controlAttempts bounds how often start tries control for one step.
const controlAttempts = 6

// controlBackoff is the first wait between tries; it doubles up to
// controlBackoffMax.
const (
	controlBackoff    = 250 * time.Millisecond
	controlBackoffMax = 4 * time.Second
)

// retryControl runs f until it succeeds, fails for good, or has run
// controlAttempts times, waiting between tries. what names the step for
// the log and the error.
func retryControl(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) error {
	wait := controlBackoff
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil || !transientControl(err) {
			return err
		}
		if attempt == controlAttempts {
			return fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		log.Warn(what+" failed; trying again", "attempt", attempt, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (stopped trying again: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, controlBackoffMax)
	}
}

// permanent marks an error another try cannot mend (a bad control URL).
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// transientControl reports whether err is a failure to reach control,
// worth another try, rather than control's answer or a mistake of ours.
func transientControl(err error) bool {
	var (
		refusal *controlapi.Error
		ours    permanent
	)
	switch {
	case errors.As(err, &refusal), errors.As(err, &ours):
		return false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false // the caller's context: nats.go wraps it
	case strings.Contains(strings.ToLower(err.Error()), "authorization"):
		return false // NATS refused the node's credentials
	}
	return true
}
