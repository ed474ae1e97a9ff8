package pcapng

import "errors"

// Sentinel errors. Returned errors wrap one of these (or an I/O error) with
// the operation and position at fault, e.g.
// "pcapng: write packet: interface 3: unknown interface".
var (
	// ErrClosed is returned by Writer methods called after Close.
	ErrClosed = errors.New("writer closed")
	// ErrInvalid marks an Options, Interface or Packet field out of range.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnknownInterface marks a packet whose interface id was never
	// described in its section.
	ErrUnknownInterface = errors.New("unknown interface")
	// ErrNotPcapng is returned by NewReader when the input does not start
	// with a Section Header Block.
	ErrNotPcapng = errors.New("not a pcapng file")
	// ErrVersion is returned for a section whose major version is not 1.
	ErrVersion = errors.New("unsupported pcapng version")
	// ErrBlockTooLarge is returned for a block longer than MaxBlockLen.
	ErrBlockTooLarge = errors.New("block too large")
	// ErrCorrupt marks a block whose fields contradict its length or the
	// format's rules.
	ErrCorrupt = errors.New("corrupt block")
)
