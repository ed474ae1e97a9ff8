//go:build !linux

package pagetrim

// Release does nothing here: it knows only Linux's /proc.
func Release() (Stats, error) { return Stats{}, nil }

// Unmap does nothing here: it knows only Linux's /proc.
func Unmap() (Stats, error) { return Stats{}, nil }
