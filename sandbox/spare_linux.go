package sandbox

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"

	"github.com/latticelab/lattice/netstack"
)

// A spare is an agent's init made ahead of Run: its exec, its namespaces,
// link and mounts, and the agent's gateway are ready when Run comes, which
// only sends it the agent. Most of an agent's start is the init's exec of
// this (large) binary, so the spare takes it off Run's path. The driver
// keeps one spare in namespace isolation from Start on, and makes the next
// when Run takes it (unless DriverConfig.SingleAgent); Close stops it.

// spareSlot is an init being made ahead.
type spareSlot struct {
	ready chan struct{} // closed when p or err is set
	p     *agentInit
	err   error
}

// startSpare starts making a spare in the background, unless there is
// one or the driver is closing.
func (d *PodDriver) startSpare() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.spare != nil {
		return
	}
	s := &spareSlot{ready: make(chan struct{})}
	d.spare = s
	d.spareWG.Go(func() {
		defer close(s.ready)
		s.p, s.err = d.newInit(d.spareCtx, d.Node().Address())
	})
}

// newInit starts an init and has it make the agent's namespaces for addr.
func (d *PodDriver) newInit(ctx context.Context, addr netip.Prefix) (*agentInit, error) {
	p, err := d.spawnInit()
	if err != nil {
		return nil, err
	}
	gcfg := netstack.GatewayConfig{Agent: addr.Addr(), Dial: d.agentDial, Ping: d.agentPing, Logger: d.cfg.Logger}
	if s := d.Stack(); s != nil && s.Address().Addr() == addr.Addr() {
		// The agent's TCP to peers goes end to end through the
		// overlay's WireGuard path, decided and audited by the stack's
		// egress hook on its SYN.
		gcfg.Overlay = s
	}
	if err := p.prepare(ctx, d.initConfig(addr), gcfg); err != nil {
		return nil, err
	}
	return p, nil
}

// takeInit returns an init ready for an agent at addr: the spare if it is
// sound, else one made now (saying why in the log).
func (d *PodDriver) takeInit(ctx context.Context, addr netip.Prefix) (*agentInit, error) {
	d.mu.Lock()
	s := d.spare
	d.spare = nil
	d.mu.Unlock()
	if s == nil {
		p, err := d.coldInit(ctx, addr)
		if !d.cfg.SingleAgent {
			d.startSpare()
		}
		return p, err
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		d.returnSpare(s)
		return nil, fmt.Errorf("sandbox: run: %w", ctx.Err())
	}
	if !d.cfg.SingleAgent {
		d.startSpare()
	}
	var reason string
	switch {
	case s.err != nil:
		reason = s.err.Error()
	case !reflect.DeepEqual(s.p.cfg, d.initConfig(addr)):
		reason = "made for another address or state dir"
		s.p.close()
	default:
		select {
		case <-s.p.done:
			reason = fmt.Sprintf("%v (%v)", errInitGone, s.p.err)
			s.p.close()
		default:
			return s.p, nil
		}
	}
	d.log.Warn("agent init: the one made ahead cannot be used; starting one now", "reason", reason)
	return d.coldInit(ctx, addr)
}

// coldInit makes an init for Run on the spot.
func (d *PodDriver) coldInit(ctx context.Context, addr netip.Prefix) (*agentInit, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.spareCtx, cancel) // Close cuts it short too
	defer stop()
	return d.newInit(ctx, addr)
}

// returnSpare gives back a spare Run took but did not use, or stops it if
// another has taken its place or the driver is closing.
func (d *PodDriver) returnSpare(s *spareSlot) {
	d.mu.Lock()
	if d.spare == nil && !d.closed {
		d.spare, s = s, nil
	}
	d.mu.Unlock()
	if s != nil {
		<-s.ready
		if s.p != nil {
			s.p.close()
		}
	}
}

// closeSpare stops the spare, made or in the making (Close).
func (d *PodDriver) closeSpare() {
	d.spareCancel()
	d.spareWG.Wait()
	d.mu.Lock()
	s := d.spare
	d.spare = nil
	d.mu.Unlock()
	if s != nil && s.p != nil {
		s.p.close()
	}
}
