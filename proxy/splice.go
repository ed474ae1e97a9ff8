package proxy

import (
	"net"

	"github.com/latticelab/lattice/internal/splice"
)

// Splice copies a to b and b to a until both directions are done, then
// closes both (see internal/splice, which netstack shares without
// importing the proxies).
func Splice(a, b net.Conn) { splice.Splice(a, b) }

// closeWriter is a connection that can half-close.
type closeWriter interface {
	CloseWrite() error
}
