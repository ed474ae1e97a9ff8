//go:build !linux

package iptables

// InNetns returns a RunFunc running the real tools; namespaces are
// Linux's, so path must be empty.
func InNetns(path string) RunFunc { return runTool }
