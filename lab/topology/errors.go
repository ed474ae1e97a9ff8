package topology

import "errors"

// ErrNetnsUnavailable is returned when a topology asks for a host in a
// real network namespace, which the fabric cannot join yet.
var ErrNetnsUnavailable = errors.New("netns hosts are not available yet (the fabric has no TUN bridge to namespaces); use kind: inprocess")
