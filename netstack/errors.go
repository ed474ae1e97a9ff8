package netstack

import "errors"

var (
	// ErrClosed reports an operation on a Stack after Close.
	ErrClosed = errors.New("netstack: stack closed")

	// ErrNoAddress reports a Config without an overlay Address.
	ErrNoAddress = errors.New("netstack: Config.Address is required")
)
