package bpf

import "errors"

// ErrUnavailable is wrapped by New's error when the kernel cannot run the
// filter here: not root (no CAP_BPF and CAP_NET_ADMIN), no TCX (Linux
// before 6.6), or not Linux. The caller falls back to iptables.
var ErrUnavailable = errors.New("eBPF egress filter unavailable")

// ErrClosed is returned by Reload after Close.
var ErrClosed = errors.New("bpf: filter closed")
