package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/proxy"
)

// Mode is an isolation mode.
type Mode string

// Isolation modes.
const (
	ModePod    Mode = "pod"
	ModeGVisor Mode = "gvisor"
)

// ParseMode checks a --mode value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModePod, ModeGVisor:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mode %q: want pod or gvisor", s)
}

// DriverConfig configures a sandbox. Name, ServerURL and Token are
// required; every other field's zero value works.
type DriverConfig struct {
	// Name is the sandbox's node name.
	Name string
	// ServerURL is control's NATS URL (nats://HOST:PORT or tls://...).
	// Sandboxes register over NATS only.
	ServerURL string
	// Token is the join token.
	Token string
	// StateDir keeps the credentials (credentials.json, 0600) so that a
	// restarted sandbox keeps its node ID, keys and overlay address, the
	// audit log and the control socket. "mem:" keeps nothing (an
	// ephemeral identity, no socket, no audit log unless AuditLog says).
	// If empty, "mem:".
	StateDir string
	// Network is the host network the node's sockets, control
	// connection and non-overlay egress use. If nil, netx.OS.
	Network netx.Network
	// ListenPort is the node's UDP port. If zero, any free port.
	ListenPort int
	// ListenAddr binds the node's UDP socket to one address (then its
	// only ICE host candidate). If zero, every address.
	ListenAddr netip.Addr
	// RelayTransport is the LRP transport: tcp, quic or race. If empty, tcp.
	RelayTransport string
	// ICE tunes the node's path selection.
	ICE node.ICEConfig

	// Isolation is how pod mode runs its agent (Run). If empty,
	// IsolationNamespace: Start then refuses, saying why and how to fix
	// it, where unprivileged user namespaces are unavailable (checked at
	// Start when Network is the host's, at Run otherwise).
	Isolation Isolation

	// SingleAgent says Run is called once (lattice sandbox run): in
	// namespace isolation the agent's init made ahead at Start is then
	// not replaced when Run takes it. If false, one is kept ready.
	SingleAgent bool

	// SOCKS5 and HTTPProxy are the proxies' listen addresses ("" for
	// none). Bind them to 127.0.0.1 unless the agent is elsewhere.
	SOCKS5, HTTPProxy string
	// ProxyCredentials protect both proxies. If nil, random ones are
	// made (ProxyCredentials() returns them). They cannot be turned off.
	ProxyCredentials *proxy.Credentials

	// EgressPolicy is a policy file, reloaded when it changes (Pro). If
	// empty, everything but policy.DefaultDenied (loopback, link-local,
	// metadata, ...) and the host's own addresses is allowed.
	EgressPolicy string
	// Forwards expose local services on overlay ports (Pro).
	Forwards []Forward

	// Runsc is the runsc binary (gvisor mode). If empty, found in $PATH.
	Runsc string
	// Platform is runsc's platform: systrap or ptrace. If empty, systrap.
	Platform string
	// Interface is the kernel interface in gvisor mode. If empty, wg0.
	Interface string

	// AuditLog is the audit log's path. If empty, StateDir/audit.jsonl,
	// or none with an ephemeral StateDir. Its checkpoint is
	// AuditLog+".head" (see audit.CheckpointPath).
	AuditLog string
	// AuditFailOpen carries on unaudited when the audit log cannot be
	// written. If false, a failed write denies every new flow (egress,
	// forwards, the agent's start) until a restart: fail-closed.
	AuditFailOpen bool

	Logger *slog.Logger
}

func (c *DriverConfig) validate() error {
	switch {
	case c.Name == "":
		return errors.New("sandbox: no name")
	case c.ServerURL == "":
		return errors.New("sandbox: no server URL")
	case c.Token == "":
		return errors.New("sandbox: no join token")
	}
	u := strings.ToLower(c.ServerURL)
	if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
		return fmt.Errorf("sandbox: server URL %q: sandboxes register over NATS only; want nats://HOST:PORT", c.ServerURL)
	}
	if err := checkForwards(c.Forwards); err != nil {
		return err
	}
	if c.StateDir == "" {
		c.StateDir = "mem:"
	}
	if c.Network == nil {
		c.Network = netx.OS
	}
	if c.ListenPort == 0 {
		c.ListenPort = -1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stdio is where a command run in the sandbox reads and writes.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// IsolationDriver runs an agent with a Lattice identity in one isolation
// mode.
type IsolationDriver interface {
	// Start registers the sandbox and brings its network up; when it
	// returns, the agent can connect. Start is called once.
	Start(ctx context.Context) error
	// Run runs argv as the agent until it exits or ctx ends, and returns
	// its exit code. The network stays up until Close.
	Run(ctx context.Context, argv []string, stdio Stdio) (int, error)
	// Status reports the identity, proxies and peers.
	Status() Status
	// Close tears everything down; it is idempotent.
	Close() error
}

// Status is what a running sandbox reports.
type Status struct {
	Name      string            `json:"name"`
	Mode      Mode              `json:"mode"`
	NodeID    string            `json:"node_id"`
	Address   netip.Prefix      `json:"address"`
	SOCKS5    string            `json:"socks5,omitempty"`
	HTTPProxy string            `json:"http_proxy,omitempty"`
	Policy    string            `json:"policy"`
	Isolation Isolation         `json:"isolation,omitempty"`
	AuditLog  string            `json:"audit_log,omitempty"`
	Forwards  []string          `json:"forwards,omitempty"`
	Started   time.Time         `json:"started"`
	Peers     []node.PeerStatus `json:"peers"`
}

// New returns the driver for mode.
func New(mode Mode, cfg DriverConfig) (IsolationDriver, error) {
	switch mode {
	case ModePod, "":
		return NewPod(cfg)
	case ModeGVisor:
		return NewRunsc(cfg)
	}
	return nil, fmt.Errorf("sandbox: unknown mode %q", mode)
}
