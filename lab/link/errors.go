package link

import "errors"

var (
	// ErrNoDeliver is returned by New when Config.Deliver is nil.
	ErrNoDeliver = errors.New("link: config: Deliver is required")

	// ErrClosed is returned by Set after Close.
	ErrClosed = errors.New("link: pipe closed")
)
