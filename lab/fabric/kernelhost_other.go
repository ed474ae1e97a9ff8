//go:build !linux

package fabric

import (
	"fmt"
	"net/netip"
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
