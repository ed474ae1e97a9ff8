package sandbox

import (
	"fmt"
	"net/netip"

	"github.com/latticelab/lattice/sandbox/podinit"
)

// Isolation is how pod mode keeps its agent apart from the host.
type Isolation string

// Isolations.
const (
	// IsolationNamespace runs the agent in user, network, mount and PID
	// namespaces of its own, made without privileges: its only network
	// interface is a TUN device whose far end is the sandbox's gateway
	// (netstack.Gateway), and the state directory is hidden from it.
	IsolationNamespace Isolation = "namespace"
	// IsolationProxy runs the agent as a plain child in the host's
	// namespaces with ALL_PROXY and HTTP_PROXY pointing at the sandbox's
	// proxies. Nothing stops it from ignoring them.
	IsolationProxy Isolation = "proxy"
)

// ParseIsolation checks an --isolation value; "" is IsolationNamespace.
func ParseIsolation(s string) (Isolation, error) {
	switch Isolation(s) {
	case "", IsolationNamespace:
		return IsolationNamespace, nil
	case IsolationProxy:
		return IsolationProxy, nil
	}
	return "", fmt.Errorf("isolation %q: want namespace or proxy", s)
}

// AgentDNS is the agent's name server in namespace isolation: the
// gateway answers it for peer names (and names the host resolves) itself.
// It is link-local, so that it can be nobody's overlay or internet
// address; every other link-local destination is denied by default.
var AgentDNS = netip.MustParseAddr("169.254.0.53")

// AgentInterface is the name of the agent's TUN device.
const AgentInterface = podinit.Interface
