package policy

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error Parse and Load return for a bad file wraps
// ErrInvalid and one *PosError per problem found; errors from reading the
// file wrap the os error.
var (
	// ErrInvalid is wrapped by every error that reports problems in a
	// policy file's contents.
	ErrInvalid = errors.New("policy: invalid policy file")
	// ErrTooLarge means the file is larger than MaxSize.
	ErrTooLarge = errors.New("policy: file too large")
	// ErrInvalidConfig is wrapped by every error NewWatcher returns for a
	// bad WatcherConfig.
	ErrInvalidConfig = errors.New("policy: invalid watcher config")
	// ErrClosed is returned by Reload on a closed Watcher.
	ErrClosed = errors.New("policy: watcher closed")

	// errIsDir is why a policy path naming a directory is refused.
	errIsDir = errors.New("is a directory, not a policy file")
)

// PosError is one problem in a policy file, at a position an editor can
// jump to. Find them with errors.As, or iterate the errors Parse joined.
type PosError struct {
	// File is the name given to Parse, or the path given to Load.
	File string
	// Line and Col are 1-based; zero when the position is unknown.
	Line, Col int
	// Msg names the offending entry ("rule 3: ports: ...") and what was
	// expected.
	Msg string
}

func (e *PosError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}
