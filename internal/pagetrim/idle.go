package pagetrim

import (
	"context"
	"log/slog"
	"runtime"
	"time"
)

// Config says when Idle gives pages back.
type Config struct {
	// Settle is how long after Idle is called it makes its first
	// release. If zero, 5s.
	Settle time.Duration
	// Quiet is how long a collection must follow the one before it to
	// count as an idle process's: the runtime forces one every 2 minutes
	// when the heap does not grow enough to start one sooner, and a busy
	// process collects far more often. If zero, 1m.
	Quiet time.Duration
	// Logger receives a debug line for each release and a warning for
	// each failure. If nil, nothing is logged.
	Logger *slog.Logger
}

// Idle releases (Release) what the process needed only to start, once
// it has settled, and again after each collection of a process that has
// stayed idle: a collection reads the function tables of every function
// on every goroutine's stack, runs code the idle process does not, and
// the kernel maps a window (fault-around, 64 KiB) around each page read,
// so each one would leave a few MiB mapped that only the next one,
// minutes later, reads again. It runs on the caller's goroutine until
// ctx ends.
func Idle(ctx context.Context, cfg Config) {
	idle(ctx, cfg, Release, time.Now)
}

func idle(ctx context.Context, cfg Config, release func() (Stats, error), now func() time.Time) {
	if cfg.Settle == 0 {
		cfg.Settle = 5 * time.Second
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	settle := time.NewTimer(cfg.Settle)
	defer settle.Stop()
	select {
	case <-ctx.Done():
		return
	case <-settle.C:
	}
	report(log, "start-up", release)

	// A collection is noticed by the cleanup of an object nothing refers
	// to: the runtime runs it, on its cleanup goroutine, after the cycle
	// that found the object unreachable. The cleanup only signals; the
	// release (which collects again) is made here, and a new object
	// armed after it.
	cycles := make(chan struct{}, 1)
	arm := func() {
		runtime.AddCleanup(&gcSentinel{}, func(ch chan struct{}) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}, cycles)
	}
	arm()
	last := now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cycles:
		}
		t := now()
		if t.Sub(last) >= cfg.Quiet {
			report(log, "after an idle collection", release)
		}
		last = t
		arm()
	}
}

// gcSentinel is allocated only to be collected. It holds a pointer so
// that it never shares a tiny-allocator block, whose objects' cleanups
// wait for the whole block.
type gcSentinel struct{ _ *byte }

func report(log *slog.Logger, when string, release func() (Stats, error)) {
	st, err := release()
	if err != nil {
		log.Warn("releasing pages", "when", when, "err", err)
		return
	}
	log.Debug("pages released", "when", when, "unmapped_bytes", st.Unmapped, "skipped_mappings", st.Skipped)
}
