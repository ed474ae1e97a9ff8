package sandbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/runsc"
)

// A prepared agent is gvisor mode's agent container made while phase 1
// runs: runsc boots the sandbox (most of the agent's start) from the
// moment control has assigned the identity its environment carries,
// while the node brings up wg0 and the egress rules go in; the agent
// itself is held until Run, which starts it once they are in place.

// agentPlan is the agent Prepare named.
type agentPlan struct {
	argv  []string
	path  string // argv[0], resolved
	stdio Stdio
}

// preparedAgent is the container being made for the plan.
type preparedAgent struct {
	ready chan struct{} // closed when c or err is set
	id    node.Identity // the identity in its environment
	c     *runsc.Container
	err   error
}

// Prepare names the agent Run will be given, before Start: Start then
// makes its container (runsc boots the sandbox) while it brings the
// network up, and a Run with the same argv and stdio only starts it.
// The agent is checked now, so a missing one fails before anything is
// set up.
func (d *RunscDriver) Prepare(argv []string, stdio Stdio) error {
	if len(argv) == 0 {
		return errors.New("sandbox: prepare: no command")
	}
	if d.Node() != nil {
		return errors.New("sandbox: prepare: after Start")
	}
	path, err := agentPath(argv[0])
	if err != nil {
		return err
	}
	d.agent = &agentPlan{argv: slices.Clone(argv), path: path, stdio: stdio}
	return nil
}

// prepare starts making the agent's container for id, once control has
// assigned it (identityHook).
func (d *RunscDriver) prepare(id node.Identity) {
	if id.NodeID == "" || !id.Address.IsValid() {
		return // a new identity saved before registration
	}
	d.prepMu.Lock()
	defer d.prepMu.Unlock()
	if d.closing || d.prepStarted {
		return // once: a later save (a re-registration) finds the agent started
	}
	d.prepStarted = true
	p := &preparedAgent{ready: make(chan struct{}), id: id}
	d.prepared = p
	plan := d.agent
	d.prepWG.Go(func() {
		defer close(p.ready)
		spec := d.agentSpec(plan.path, plan.argv, id)
		p.c, p.err = d.mgr.Prepare(spec, runsc.Stdio{Stdin: plan.stdio.Stdin, Stdout: plan.stdio.Stdout, Stderr: plan.stdio.Stderr})
		if d.bpf != nil {
			d.bpf.load() // wg0's eBPF filter, now that runsc is on its way
		}
	})
}

// takePrepared returns the container made for argv and stdio if it can
// run the agent as id, else nil (saying why in the log, and removing it).
func (d *RunscDriver) takePrepared(ctx context.Context, argv []string, stdio Stdio, id node.Identity) (*runsc.Container, error) {
	d.prepMu.Lock()
	p := d.prepared
	d.prepared = nil
	d.prepMu.Unlock()
	if p == nil {
		return nil, nil
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		d.prepMu.Lock()
		d.prepared = p // Close removes it
		d.prepMu.Unlock()
		return nil, fmt.Errorf("sandbox: run: %w", ctx.Err())
	}
	var reason string
	switch {
	case p.err != nil:
		reason = p.err.Error()
	case !slices.Equal(argv, d.agent.argv) || !sameStdio(stdio, d.agent.stdio):
		reason = "made for another command or stdio"
	case p.id.NodeID != id.NodeID || p.id.Address != id.Address:
		reason = "made for another identity"
	default:
		select {
		case <-p.c.Exited():
			reason = "runsc exited before the agent started"
		default:
			return p.c, nil
		}
	}
	if p.c != nil {
		_ = p.c.Close()
	}
	d.log.Warn("agent container: the one made ahead cannot be used; making one now", "reason", reason)
	return nil, nil
}

// closePrepared removes the container made ahead, made or in the making
// (Close).
func (d *RunscDriver) closePrepared() error {
	d.prepMu.Lock()
	d.closing = true
	d.prepMu.Unlock()
	d.prepWG.Wait()
	d.prepMu.Lock()
	p := d.prepared
	d.prepared = nil
	d.prepMu.Unlock()
	if p == nil || p.c == nil {
		return nil
	}
	return p.c.Close()
}

// sameStdio reports whether a and b are the same streams.
func sameStdio(a, b Stdio) bool {
	return same(a.Stdin, b.Stdin) && same(a.Stdout, b.Stdout) && same(a.Stderr, b.Stderr)
}

func same(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// identityHook is the node's credential store, telling saved each
// identity it stores: the node saves what control assigned as soon as it
// has registered, before it brings up the rest.
type identityHook struct {
	node.CredentialStore
	saved func(node.Identity)
}

func (h *identityHook) Save(id *node.Identity) error {
	if err := h.CredentialStore.Save(id); err != nil {
		return err
	}
	h.saved(*id)
	return nil
}
