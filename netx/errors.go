package netx

import "errors"

// ErrNoResolver reports a host name handed to a Network that only takes IP
// literals (see Resolver). Lab hosts have no DNS, so a name there is a
// configuration mistake, not a lookup failure worth retrying.
var ErrNoResolver = errors.New("host is not an IP literal and the network has no resolver")

// errMissingAddress mirrors package net's error for a write on an
// unconnected datagram socket without a destination.
var errMissingAddress = errors.New("missing address")
