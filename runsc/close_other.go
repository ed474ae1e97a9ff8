//go:build !linux

package runsc

// Close implements the Linux Manager.Close; runsc runs on Linux only.
func (m *Manager) Close() error { return nil }
