//go:build !linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/latticelab/lattice/netx"
)

// KernelHostConfig declares a real-kernel host; see kernelhost_linux.go.
type KernelHostConfig struct {
	Name      string
	Interface InterfaceConfig
	Gateway   netip.Addr
}

// KernelHost is a network namespace joined to the fabric (Linux only).
type KernelHost struct{}

// AddKernelHost fails: kernel hosts are Linux network namespaces.
func (f *Fabric) AddKernelHost(cfg KernelHostConfig) (*KernelHost, error) {
	return nil, fmt.Errorf("%w: kernel host %q: Linux only", ErrInvalid, cfg.Name)
}

func (k *KernelHost) close() error { return nil }

// ReapNamespaces has nothing to do off Linux.
func ReapNamespaces() ([]string, error) { return nil, nil }

var errLinuxOnly = errors.New("fabric: kernel hosts are Linux only")

// KernelHost returns nil: there are no kernel hosts off Linux.
func (f *Fabric) KernelHost(string) *KernelHost { return nil }

// NetnsPath is empty off Linux.
func (k *KernelHost) NetnsPath() string { return "" }

// Dial fails off Linux.
func (k *KernelHost) Dial(context.Context, string, string) (net.Conn, error) {
	return nil, errLinuxOnly
}

// Listen fails off Linux.
func (k *KernelHost) Listen(context.Context, string, string) (net.Listener, error) {
	return nil, errLinuxOnly
}

// ListenPacket fails off Linux.
func (k *KernelHost) ListenPacket(context.Context, string, string) (net.PacketConn, error) {
	return nil, errLinuxOnly
}

// Interfaces fails off Linux.
func (k *KernelHost) Interfaces() ([]netx.Interface, error) { return nil, errLinuxOnly }

// Name is empty off Linux.
func (k *KernelHost) Name() string { return "" }

// Interface is nil off Linux.
func (k *KernelHost) Interface() *Interface { return nil }

// Netns is empty off Linux.
func (k *KernelHost) Netns() string { return "" }
