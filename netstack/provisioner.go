package netstack

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"

	"golang.zx2c4.com/wireguard/tun"
)

// SandboxProvisioner gives a node its overlay interface in user space: a
// Stack whose TUNAdapter WireGuard drives. It needs no privileges, no TUN
// device and no iptables. It satisfies node.Provisioner; the node owns the
// device, and closing it (WireGuard does) closes the Stack.
type SandboxProvisioner struct {
	Logger *slog.Logger
	// Egress, if set, becomes the Stack's Config.Egress.
	Egress EgressFunc
	// Batch becomes the Stack's Config.Batch.
	Batch int

	mu    sync.Mutex
	stack *Stack
}

// Up implements node.Provisioner.
func (p *SandboxProvisioner) Up(_ context.Context, addr netip.Prefix, mtu int) (tun.Device, error) {
	s, err := New(Config{Address: addr, MTU: mtu, Logger: p.Logger, Egress: p.Egress, Batch: p.Batch})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stack != nil {
		s.Close()
		return nil, errors.New("netstack: SandboxProvisioner already up")
	}
	p.stack = s
	return &stackDevice{TUNAdapter: s.TUN(), stack: s}, nil
}

// Stack returns the overlay network once Up has run, nil before: agents
// and proxies dial and listen on it.
func (p *SandboxProvisioner) Stack() *Stack {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stack
}

// stackDevice closes the whole stack with the device.
type stackDevice struct {
	*TUNAdapter
	stack *Stack
	once  sync.Once
}

func (d *stackDevice) Close() error {
	var err error
	d.once.Do(func() { err = d.stack.Close() })
	return err
}
