package audit

import (
	"errors"
	"fmt"
)

// Sentinel errors for FileWriter.
var (
	// ErrClosed is returned by Write and Sync after Close.
	ErrClosed = errors.New("audit: log closed")
	// ErrNoKind is returned by Write for an event without a Kind.
	ErrNoKind = errors.New("audit: event has no kind")
	// ErrPermissions is wrapped by Open's error for a log file that group
	// or other may access; the message says the chmod that fixes it.
	ErrPermissions = errors.New("audit: log file is accessible by group or other")
	// ErrLocked is wrapped by Open's error when another FileWriter, in this
	// process or another, has the log open: two writers would fork the
	// chain.
	ErrLocked = errors.New("audit: log is open by another writer")
	// ErrCorrupt is wrapped by Open's error when the log's last complete
	// line is not a valid entry; the error also wraps the *LineError
	// saying why. Open cuts nothing but a torn last line (see Open).
	ErrCorrupt = errors.New("audit: log is corrupt")
	// ErrTruncated is wrapped by VerifyFile's error when the log is shorter
	// than its checkpoint says it was.
	ErrTruncated = errors.New("log was truncated")
	// ErrRewritten is wrapped by VerifyFile's error when the log's line at
	// its checkpoint has another hash than the checkpoint records.
	ErrRewritten = errors.New("log was rewritten")
)

// Problems Verify finds, wrapped in a *LineError. They read as the end of a
// sentence starting "line N: ".
var (
	// ErrEdited means the line's bytes do not hash to its "hash" field.
	ErrEdited = errors.New("hash mismatch: the line was edited")
	// ErrChain means the line's "prev" is not the previous line's "hash".
	ErrChain = errors.New("a line was removed, reordered or duplicated")
	// ErrSeq means "seq" does not count lines from 1.
	ErrSeq = errors.New("seq out of order")
	// ErrMalformed means the line is not an audit entry at all.
	ErrMalformed = errors.New("malformed line")
	// ErrIncomplete means the file ends in the middle of a line: a write
	// was cut short (crash, full disk) or the file was truncated.
	ErrIncomplete = errors.New("incomplete line (no trailing newline)")
	// ErrTooLong means a line exceeds MaxLineLen.
	ErrTooLong = errors.New("line too long")
)

var errTooLong = fmt.Errorf("%w: more than %d bytes", ErrTooLong, MaxLineLen)

// LineError is a problem at one line of a log. Verify and Open return it
// wrapped; find it with errors.As.
type LineError struct {
	// Line is 1-based.
	Line int
	// Err wraps one of ErrEdited, ErrChain, ErrSeq, ErrMalformed,
	// ErrIncomplete or ErrTooLong.
	Err error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }
