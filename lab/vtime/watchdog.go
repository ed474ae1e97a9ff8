package vtime

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// WatchdogConfig configures a Watchdog.
type WatchdogConfig struct {
	// Name says whose bubble it is in the error (a test's name).
	Name string
	// Timeout is how much wall time may pass without the bubble's clock
	// moving, with every goroutine of the bubble that is not durably
	// blocked waiting (none runnable), before it counts as stopped. If
	// zero, 60s.
	Timeout time.Duration
	// BusyTimeout is how much wall time may pass without the bubble's
	// clock moving while some of its goroutines are runnable or running:
	// a loaded machine (the race detector, other tests) can take minutes
	// over one instant's work, so this is only for a goroutine that spins
	// at one instant and so never lets time move. If zero, 10m.
	BusyTimeout time.Duration
	// Beat is how often, in the bubble's time, the watchdog's goroutine in
	// the bubble notes the time. If zero, 1s.
	Beat time.Duration
	// Horizon is how much bubble time the beat covers. Past it the beat
	// stops, so a bubble deadlocked on its own channels is left to
	// synctest's deadlock panic instead of being kept ticking forever. If
	// zero, 24h.
	Horizon time.Duration
	// OnStop receives the error when the clock stopped; it runs outside
	// the bubble, once. If nil, the watchdog panics with the error: a
	// bubble that cannot advance can be woken only from outside, by what
	// it waits on, and a panic ends the run loudly instead of letting it
	// hang until the test's -timeout.
	OnStop func(error)
}

// Watchdog notices a testing/synctest bubble whose clock stopped while its
// work was not done: some goroutine in it waits on something outside the
// bubble (a real socket, a syscall, a mutex or channel from outside), so
// the bubble never becomes durably blocked and its time never moves. It
// has two halves: Watch starts the wall-clock half outside the bubble, and
// Pulse, called inside, starts the goroutine whose beats prove that the
// bubble's clock moves.
type Watchdog struct {
	cfg  WatchdogConfig
	quit chan struct{} // closed by Stop; made outside the bubble
	done chan struct{} // closed when the wall-clock goroutine exits

	beats  atomic.Int64 // beats so far
	at     atomic.Int64 // the bubble's clock at the last beat, unix ns
	bubble atomic.Int64 // the bubble's id, once Pulse has run
	ended  atomic.Bool  // the bubble's work is done (Pulse's stop ran)

	stopOnce sync.Once
	mu       sync.Mutex // guards err
	err      error
}

// Watch starts a watchdog. Call it outside the bubble, before
// synctest.Test, and Stop it after.
func Watch(cfg WatchdogConfig) *Watchdog {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = 10 * time.Minute
	}
	cfg.BusyTimeout = max(cfg.BusyTimeout, cfg.Timeout)
	if cfg.Beat <= 0 {
		cfg.Beat = time.Second
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = 24 * time.Hour
	}
	w := &Watchdog{cfg: cfg, quit: make(chan struct{}), done: make(chan struct{})}
	go w.watch()
	return w
}

// watch checks on the wall clock that the beats keep coming.
func (w *Watchdog) watch() {
	defer close(w.done)
	poll := max(w.cfg.Timeout/10, time.Millisecond)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	last, since := w.beats.Load(), time.Now()
	// spun holds the last sample of this still stretch that found the
	// bubble busy: a goroutine spinning at one instant through syscalls
	// (a write per round) is caught in one now and then, and is still
	// spinning, not waiting outside.
	var spun []Goroutine
	for {
		select {
		case <-w.quit:
			return
		case now := <-tick.C:
			b := w.beats.Load()
			if b != last || w.ended.Load() {
				last, since, spun = b, now, nil
				continue
			}
			idle := now.Sub(since)
			if idle < w.cfg.Timeout {
				continue
			}
			stuck := w.sample(spun != nil)
			if busy(stuck) {
				spun = stuck
			}
			if len(stuck) == 0 || spun != nil && idle < w.cfg.BusyTimeout {
				// Nothing waits outside (the bubble is between two
				// states, or finishing), or it works, just slowly.
				continue
			}
			if spun != nil {
				stuck = spun
			}
			err := w.stopped(idle, stuck)
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			if w.cfg.OnStop == nil {
				panic(err)
			}
			w.cfg.OnStop(err)
			return
		}
	}
}

// sample returns the bubble's goroutines that are not durably blocked.
// Unless the bubble was already seen busy, a sample with none runnable is
// taken again a few times, a millisecond apart, before it is believed: a
// goroutine spinning through a syscall per round shows up inside the
// syscall in most single samples.
func (w *Watchdog) sample(seenBusy bool) []Goroutine {
	id := int(w.bubble.Load())
	stuck := Stuck(AllStacks(), id)
	for range 20 {
		if seenBusy || len(stuck) == 0 || busy(stuck) {
			break
		}
		time.Sleep(time.Millisecond)
		stuck = Stuck(AllStacks(), id)
	}
	return stuck
}

// Pulse starts the watchdog's goroutine in the bubble; call it inside,
// first thing. The returned stop ends it; call it inside, once the
// bubble's work is done, before the bubble's function returns.
func (w *Watchdog) Pulse() (stop func()) {
	w.bubble.Store(int64(OwnBubble()))
	end := make(chan struct{}) // the bubble's own, so the beat waits durably
	exited := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(exited)
		t := time.NewTimer(w.cfg.Beat)
		defer t.Stop()
		for {
			w.at.Store(time.Now().UnixNano())
			w.beats.Add(1)
			if time.Since(start) >= w.cfg.Horizon {
				return
			}
			select {
			case <-end:
				return
			case <-t.C:
				t.Reset(w.cfg.Beat)
			}
		}
	}()
	return func() {
		w.ended.Store(true)
		close(end)
		<-exited
	}
}

// Stop ends the wall-clock half and returns the error it reported, if the
// clock stopped. Call it outside the bubble, after synctest.Test.
// Idempotent.
func (w *Watchdog) Stop() error {
	w.stopOnce.Do(func() { close(w.quit) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// stopped describes the bubble's goroutines that keep its clock from
// moving.
func (w *Watchdog) stopped(idle time.Duration, stuck []Goroutine) error {
	id := int(w.bubble.Load())
	at := time.Unix(0, w.at.Load()).UTC()
	var b strings.Builder
	fmt.Fprintf(&b, "virtual time stopped")
	if w.cfg.Name != "" {
		fmt.Fprintf(&b, " in %s", w.cfg.Name)
	}
	fmt.Fprintf(&b, ": the bubble's clock stayed at %s for %v of wall time; ", at.Format("2006-01-02 15:04:05.000"), idle.Round(time.Millisecond))
	if busy(stuck) {
		fmt.Fprintf(&b, "goroutines kept running all that time at one instant (one spinning without letting time move?); ")
	}
	switch len(stuck) {
	case 0:
		fmt.Fprintf(&b, "no goroutine of bubble %d waits outside it (a goroutine computing for that long?)", id)
	case 1:
		fmt.Fprintf(&b, "1 goroutine waits outside the bubble: ")
	default:
		fmt.Fprintf(&b, "%d goroutines wait outside the bubble: ", len(stuck))
	}
	for i, g := range stuck {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "[%s] %s", g.State, g.Where)
	}
	for _, g := range stuck {
		b.WriteString("\n\n")
		b.Write(g.Stack)
	}
	return fmt.Errorf("%s", b.String())
}

// busy reports whether some goroutine of the bubble is runnable or
// running: the bubble has work, so a clock standing still may only mean
// the machine is slow.
func busy(gs []Goroutine) bool {
	for _, g := range gs {
		if g.State == "runnable" || g.State == "running" {
			return true
		}
	}
	return false
}

// Goroutine is one goroutine of a bubble that is not durably blocked.
type Goroutine struct {
	// State is its traceback's wait reason ("IO wait", "select",
	// "sync.Mutex.Lock", "running", ...).
	State string
	// Where is the first function of its stack outside the runtime and
	// the standard library's internals, the best guess of who waits.
	Where string
	// Stack is its traceback.
	Stack []byte
}

// Stuck returns the goroutines of bubble id in dump (a runtime.Stack of
// all goroutines) that are not durably blocked: the ones a stopped clock
// waits for. The runtime marks every durable wait "(durable)" in a
// goroutine's header.
func Stuck(dump []byte, id int) []Goroutine {
	tag := []byte(", synctest bubble " + strconv.Itoa(id))
	var out []Goroutine
	for g := range bytes.SplitSeq(dump, []byte("\n\n")) {
		header, body, _ := bytes.Cut(g, []byte("\n"))
		i := bytes.Index(header, tag)
		if i < 0 || !tagEnds(header[i+len(tag):]) {
			continue
		}
		state, ok := headerState(header)
		if !ok || strings.Contains(state, "(durable)") {
			continue
		}
		out = append(out, Goroutine{State: state, Where: where(body), Stack: bytes.Clone(g)})
	}
	return out
}

// tagEnds reports whether rest follows a whole bubble id ("bubble 1" is
// not "bubble 12").
func tagEnds(rest []byte) bool {
	return len(rest) == 0 || rest[0] < '0' || rest[0] > '9'
}

// headerState is the wait reason of a traceback header, without its
// duration: "goroutine 7 [IO wait, 2 minutes, synctest bubble 1]:" gives
// "IO wait".
func headerState(header []byte) (string, bool) {
	_, s, ok := bytes.Cut(header, []byte("["))
	if !ok {
		return "", false
	}
	s, _, _ = bytes.Cut(s, []byte("]"))
	s, _, _ = bytes.Cut(s, []byte(", "))
	return string(s), true
}

// where names who waits, from a traceback body: the first frame of a
// module (not the standard library), after the standard library function
// it called, if any ("net.(*conn).Read in example.com/x.read"); without a
// module frame, the first frame outside the runtime.
func where(body []byte) string {
	var frames []string
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		if len(line) == 0 || line[0] == '\t' || bytes.HasPrefix(line, []byte("created by ")) {
			continue
		}
		fn := string(line)
		if i := strings.LastIndex(fn, "("); i > 0 && strings.HasSuffix(fn, ")") {
			fn = fn[:i]
		}
		frames = append(frames, fn)
	}
	plumbing := func(fn string) bool { return strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/") }
	for i, fn := range frames {
		if std(fn) {
			continue
		}
		if i > 0 && !plumbing(frames[i-1]) {
			return frames[i-1] + " in " + fn
		}
		return fn
	}
	for _, fn := range frames {
		if !plumbing(fn) {
			return fn
		}
	}
	if len(frames) > 0 {
		return frames[0]
	}
	return "?"
}

// std reports whether a traceback's function is the standard library's:
// its import path has no domain ("net.(*conn).Read", "internal/poll.…",
// not "gvisor.dev/gvisor/pkg/sleep.…").
func std(fn string) bool {
	first, _, slash := strings.Cut(fn, "/")
	return !slash || !strings.Contains(first, ".")
}
