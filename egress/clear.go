package egress

import (
	"errors"
	"fmt"

	"github.com/latticelab/lattice/egress/iptables"
)

// Clear removes an egress filter a node left on iface when it died with
// FailClosed (or crashed with the iptables backend): the pinned eBPF link
// under pinRoot (DefaultPinRoot if empty) and the iptables chains. It
// reports what it removed; finding nothing is not an error.
func Clear(iface, pinRoot string) (removed []string, err error) {
	if pinRoot == "" {
		pinRoot = DefaultPinRoot
	}
	pinned, perr := unpin(pinRoot, iface)
	if pinned {
		removed = append(removed, "pinned eBPF filter")
	}
	found, ierr := iptables.Remove(iface, nil)
	if found {
		removed = append(removed, "iptables chains "+iptables.ChainName(iface)+"*")
	}
	if err := errors.Join(perr, ierr); err != nil {
		return removed, fmt.Errorf("egress: clear %s: %w", iface, err)
	}
	return removed, nil
}
