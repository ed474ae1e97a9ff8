package fabric

import "errors"

// Sentinel errors. Every error the fabric returns wraps one of these or names
// the element at fault.
var (
	// ErrClosed is returned by operations on a closed fabric or host.
	ErrClosed = errors.New("fabric: closed")
	// ErrInvalid marks a topology element that fails validation.
	ErrInvalid = errors.New("fabric: invalid topology")
	// ErrNotFound is returned when a named network, host or router is unknown.
	ErrNotFound = errors.New("fabric: not found")
)
