//go:build !linux

package egress

import "errors"

// DefaultPinRoot is where fail-closed filters are pinned (Linux).
const DefaultPinRoot = "/sys/fs/bpf/lattice"

func pinDir(root, iface string) (string, error) {
	return "", errors.New("pinned filters need Linux's bpffs")
}

func inNetns(string, func() error) error {
	return errors.New("network namespaces are Linux's")
}

func unpin(root, iface string) (bool, error) { return false, nil }
