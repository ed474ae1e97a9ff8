// Package podinit is the init of a pod sandbox's agent (sandbox's
// namespace isolation): the sandbox's own binary, re-executed as Arg0,
// becomes PID 1 of the agent's user, network, mount and PID namespaces,
// makes the agent's TUN device and mounts, hands the device back over FD,
// and runs the agent.
//
// It is a leaf package, importing only the standard library, x/sys and
// internal/pagetrim (which imports only those):
// Go initialises a package once its imports are, choosing among the ready
// ones by import path, so its init() runs before the binary's heavy
// packages (nats-server, runsc, gVisor, prometheus) and the init process
// skips their initialisation, most of an exec's CPU.
package podinit

// Arg0 is argv[0] of the sandbox's binary re-executed as the
// agent's init: PID 1 of the agent's PID namespace, root of its user
// namespace, which sets the namespaces up, passes the TUN device back and
// runs the agent. Any binary that links this package can serve as init,
// the lattice command and tests alike, so the check is in init().
const Arg0 = "lattice-pod-init"

// FD is the init's end of the socketpair to the sandbox: the first of
// exec.Cmd's ExtraFiles.
//
// The conversation on it: the sandbox sends a Config, the init sets its
// namespaces up and answers a Reply with the agent's link; then (unless
// Probe) the sandbox sends a Start with the agent's stdin, stdout and
// stderr, the init answers a Reply and runs the agent. The sandbox may
// start an init long before it has an agent for it (a spare); closing the
// socket instead of sending Start makes the init exit.
const FD = 3

// Interface is the name of the agent's TUN device.
const Interface = "lattice0"

// Config is what the sandbox tells its init.
type Config struct {
	// Probe: make the link and the mounts, answer and exit, to show
	// that namespace isolation works here (a masked /proc, as container
	// runtimes leave it, refuses the PID namespace's /proc).
	Probe bool `json:"probe,omitempty"`
	// Addr and Bits are the agent's (the node's) overlay address and
	// prefix length: bytes, not netip, whose package would initialise
	// late in the binary (see the package doc).
	Addr [4]byte `json:"addr"`
	Bits int     `json:"bits"`
	MTU  int     `json:"mtu"`
	// Hide are directories covered with an empty read-only tmpfs (the
	// state dir); HideFiles files covered with /dev/null (an audit log
	// kept elsewhere).
	Hide      []string `json:"hide,omitempty"`
	HideFiles []string `json:"hide_files,omitempty"`
	// ResolvConf is bound over /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf"`
}

// MaxStart bounds a Start message: below the kernel's default send
// buffer (net.core.wmem_default, 212992), which bounds one message on the
// socket.
const MaxStart = 192 << 10

// Start is the agent the init runs; its stdin, stdout and stderr travel
// with it (SCM_RIGHTS, in that order).
type Start struct {
	Argv []string `json:"argv"`
	// Env is the agent's whole environment.
	Env []string `json:"env"`
	// Dir is the agent's working directory, as the agent's mount
	// namespace shows it.
	Dir string `json:"dir"`
}

// Reply is the init's answer to a Config (the TUN device travels with
// it) and to a Start.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Kind is the agent's interface, "tun" or "veth"; Header the link
	// header of its packets as the sandbox reads and writes them.
	Kind   string `json:"kind,omitempty"`
	Header []byte `json:"header,omitempty"`
	// VnetHdr: a virtio_net_hdr comes before every packet on the link
	// (a TUN device made with IFF_VNET_HDR and TCP offloads).
	VnetHdr bool `json:"vnet_hdr,omitempty"`
	// Landlock is the kernel's Landlock ABI the agent will be confined
	// with (landlock_linux.go), 0 for none.
	Landlock int `json:"landlock,omitempty"`
}
