package inet

import "errors"

// Why FragmentIPv4 refused a packet; its errors wrap one of these.
var (
	// ErrMalformedIPv4 is a packet too short for its header, a header
	// length or total length that does not fit the packet, or options that
	// run past the header.
	ErrMalformedIPv4 = errors.New("malformed ipv4 packet")
	// ErrFragmentMTU is an MTU that leaves no room for 8 bytes of data
	// after the header.
	ErrFragmentMTU = errors.New("mtu leaves no room for 8 bytes of data")
	// ErrPastDatagramLimit is data ending past the 65535-byte datagram
	// limit: its fragments' offsets would not fit their 13 bits.
	ErrPastDatagramLimit = errors.New("ends past the 65535-byte datagram limit")
)
