//go:build !linux

package bpf

import (
	"fmt"

	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/policy"
	"net/netip"
)

// Filter is the eBPF egress filter; it exists on Linux only.
type Filter struct{}

// New returns an error wrapping ErrUnavailable: eBPF is Linux's.
func New(cfg Config) (*Filter, error) {
	if err := edition.Require("eBPF egress filter"); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("bpf: %w: not Linux", ErrUnavailable)
}

// Reload returns ErrClosed.
func (f *Filter) Reload(p *policy.Policy, peers map[string][]netip.Addr) error { return ErrClosed }

// Close does nothing.
func (f *Filter) Close() error { return nil }

// Load returns an error wrapping ErrUnavailable: eBPF is Linux's.
func Load(cfg Config) (*Filter, error) { return New(cfg) }

// Attach returns ErrClosed.
func (f *Filter) Attach() error { return ErrClosed }
