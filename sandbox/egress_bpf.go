package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"github.com/latticelab/lattice/egress/bpf"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/netns"
	"github.com/latticelab/lattice/policy"
)

// bpfAhead is wg0's eBPF filter made ahead of the rest of the egress
// set-up. Most of bpf.New's time is the kernel waiting for RCU grace
// periods (the first table's swap into the filter, the TCX attach), not
// CPU, so gvisor mode's Start loads the filter while the node brings wg0
// up (maps and programs belong to no interface or namespace), and
// attaches it while the iptables chains go in. The filter is complete
// before Start returns, so the agent never runs without it.
type bpfAhead struct {
	cfg      bpf.Config
	loaded   chan struct{} // closed when Load has returned
	attached chan struct{} // closed when the attach has returned
	wg       sync.WaitGroup

	mu            sync.Mutex // guards the following fields
	f             *bpf.Filter
	err           error // Load's, then the attach's
	loadStarted   bool
	attachStarted bool
	taken         bool // result handed f on, or closed: Close is not ours
	closed        bool // close has run: nothing starts
}

// newBPF is the filter for cfg, to be loaded by load (or attach).
func newBPF(cfg bpf.Config) *bpfAhead {
	return &bpfAhead{cfg: cfg, loaded: make(chan struct{}), attached: make(chan struct{})}
}

// loadBPF starts loading the filter for cfg (bpf.Load).
func loadBPF(cfg bpf.Config) *bpfAhead {
	a := newBPF(cfg)
	a.load()
	return a
}

// load starts loading the filter, unless it has started or close has
// run.
func (a *bpfAhead) load() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loadStarted || a.closed {
		return
	}
	a.loadStarted = true
	a.wg.Go(func() {
		defer close(a.loaded)
		f, err := bpf.Load(a.cfg)
		a.mu.Lock()
		a.f, a.err = f, err
		a.mu.Unlock()
	})
}

// attach starts filling the loaded filter with pol and peers and
// attaching it, in the network namespace of the calling thread (the
// caller may have joined the pod's on a locked thread). Only the first
// call does anything.
func (a *bpfAhead) attach(pol *policy.Policy, peers map[string][]netip.Addr) {
	a.load()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attachStarted {
		return
	}
	a.attachStarted = true
	if a.closed {
		close(a.attached) // result says so
		return
	}
	ns, nsErr := os.Open("/proc/thread-self/ns/net")
	a.wg.Go(func() {
		defer close(a.attached)
		<-a.loaded
		var err error
		if nsErr != nil {
			err = fmt.Errorf("sandbox: eBPF filter: this thread's network namespace: %w", nsErr)
		} else {
			defer ns.Close()
			// A fresh thread in the caller's namespace: the TCX attach
			// is made on the interface named there.
			err = netns.Do(fmt.Sprintf("/proc/self/fd/%d", ns.Fd()), func() error {
				a.mu.Lock()
				f, err := a.f, a.err
				a.mu.Unlock()
				if err != nil {
					return err
				}
				if err := f.Reload(pol, peers); err != nil {
					return err
				}
				return f.Attach()
			})
		}
		a.mu.Lock()
		if a.err == nil {
			a.err = err
		}
		a.mu.Unlock()
	})
}

// result waits for the attach attach started (which must have been
// called) and returns the filter, now the caller's to close, or the
// error that stopped it (the filter then closed).
func (a *bpfAhead) result() (*bpf.Filter, error) {
	<-a.attached
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return nil, errors.New("sandbox: eBPF filter: closed")
	case a.taken:
		return nil, errors.New("sandbox: eBPF filter: taken already")
	}
	a.taken = true
	if a.err != nil {
		if a.f != nil {
			_ = a.f.Close()
		}
		return nil, a.err
	}
	return a.f, nil
}

// done reports whether the attach has returned.
func (a *bpfAhead) done() bool {
	select {
	case <-a.attached:
		return true
	default:
		return false
	}
}

// close waits for what is under way and closes the filter unless result
// handed it on; nothing starts after it.
func (a *bpfAhead) close() {
	a.mu.Lock()
	taken := a.taken
	a.taken, a.closed = true, true
	a.mu.Unlock()
	a.wg.Wait()
	if taken {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		_ = a.f.Close()
	}
}

// fallBack reports whether err means gvisor mode goes on with iptables
// alone: the kernel cannot run the filter, or the edition has none.
func fallBack(err error) bool {
	return errors.Is(err, bpf.ErrUnavailable) || errors.Is(err, edition.ErrProFeature)
}
