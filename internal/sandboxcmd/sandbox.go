// Package sandboxcmd is the `sandbox` command tree (start, run, agent,
// exec, audit): `lattice sandbox` and the lattice-sandbox binary, which
// is it alone, without the control plane, relay and STUN servers, so that
// a sandbox maps only what it runs.
package sandboxcmd

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/internal/atomicfile"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/internal/pagetrim"
	"github.com/latticelab/lattice/proxy"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/sandbox"
)

// NewCmd returns the sandbox command.
func NewCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Give an AI agent a Lattice identity inside an isolation mode",
		Long: `sandbox gives an agent a full Lattice network identity (NATS registration, ICE,
the LRP relay, WireGuard) inside an isolation mode:

  --mode pod     the overlay runs in an in-process network stack: no root, no
                 CAP_NET_ADMIN, no TUN device. The agent reaches peers through
                 the sandbox's SOCKS5 / HTTP proxies (user and password always
                 required), peers reach the agent through --forward (Pro).
  --mode gvisor  WireGuard on the pod's kernel, the agent in runsc (Pro).

Every egress decision, proxied connection and inbound forward is appended to a
hash-chained audit log ('lattice sandbox audit verify' checks it).

Edition: ` + edition.Name() + `.`,
	}
	cmd.AddCommand(newSandboxStartCmd(), newSandboxRunCmd(), newSandboxAgentCmd(), newSandboxExecCmd(), newSandboxAuditCmd())
	return cmd
}

// sandboxFlags are the flags start and run share.
type sandboxFlags struct {
	name, serverURL, token, tokenFile, mode, stateDir string
	isolation                                         string
	socks5, httpProxy, credsFile                      string
	forwards                                          []string
	egressPolicy, auditLog, relayTransport            string
	listenAddr, runscBin, platform, iface             string
	port                                              int
	trust                                             cli.TrustFlags
	auditFailOpen                                     bool
}

func (f *sandboxFlags) add(cmd *cobra.Command, proxies bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "sandbox (node) name: lowercase letters, digits, hyphens (required)")
	cli.ControlFlag(cmd, &f.serverURL, "control's NATS URL, tls://HOST:PORT (nats:// on loopback or with --insecure) (required; sandboxes register over NATS only)")
	f.trust.Add(cmd)
	cli.TokenFlags(cmd, &f.token, &f.tokenFile)
	fl.StringVar(&f.mode, "mode", "pod", "isolation mode: pod or gvisor")
	fl.StringVar(&f.isolation, "isolation", string(sandbox.IsolationNamespace), "pod mode: how the agent is kept apart: namespace (its own user, network, mount and PID namespaces behind a TUN device; no privileges needed) or proxy (the host's namespaces, proxy variables only)")
	fl.StringVar(&f.stateDir, "state-dir", "", `keeps identity, audit log and control socket (default: `+filepath.Join(cli.DefaultStateDir(), "sandbox", "NAME")+`; "mem:" for none)`)
	if proxies {
		fl.StringVar(&f.socks5, "socks5", "", "serve SOCKS5 on this address (PORT means 127.0.0.1:PORT)")
		fl.StringVar(&f.httpProxy, "http-proxy", "", "serve an HTTP/CONNECT proxy on this address (PORT means 127.0.0.1:PORT)")
		fl.StringVar(&f.credsFile, "proxy-credentials-file", "", "USER:PASSWORD for the proxies (default: generated, kept in the state dir)")
	}
	fl.StringArrayVar(&f.forwards, "forward", nil, "Pro: expose a local service on an overlay port, PORT=HOST:PORT (repeatable)")
	fl.StringVar(&f.egressPolicy, "egress-policy", "", "Pro: egress policy file (YAML), reloaded when it changes or on SIGHUP")
	fl.StringVar(&f.auditLog, "audit-log", "", "audit log path (default: STATE-DIR/audit.jsonl); its checkpoint is AUDIT-LOG.head")
	fl.BoolVar(&f.auditFailOpen, "audit-fail-open", false, "when the audit log cannot be written, carry on unaudited (default: deny every new flow until a restart)")
	fl.StringVar(&f.relayTransport, "relay-transport", "tcp", "relay transport: tcp, quic or race")
	fl.IntVar(&f.port, "port", 0, "UDP port for ICE and WireGuard (0: any)")
	fl.StringVar(&f.listenAddr, "listen-addr", "", "bind the UDP socket to this address only (its only ICE host candidate)")
	fl.StringVar(&f.runscBin, "runsc", "", "gvisor mode: the runsc binary (default: runsc in $PATH; make runsc builds it)")
	fl.StringVar(&f.platform, "platform", "systrap", "gvisor mode: runsc platform, systrap or ptrace")
	fl.StringVar(&f.iface, "interface", "wg0", "gvisor mode: the pod's WireGuard interface")
	cli.FlagValues(cmd, "mode", string(sandbox.ModePod), string(sandbox.ModeGVisor))
	cli.FlagValues(cmd, "isolation", string(sandbox.IsolationNamespace), string(sandbox.IsolationProxy))
	cli.FlagValues(cmd, "relay-transport", cli.RelayTransports...)
	cli.FlagValues(cmd, "platform", runsc.Platforms...)
	_ = cmd.MarkFlagDirname("state-dir")
}

// config turns the flags into a driver config.
func (f *sandboxFlags) config(cmd *cobra.Command) (sandbox.Mode, sandbox.DriverConfig, error) {
	var cfg sandbox.DriverConfig
	mode, err := sandbox.ParseMode(f.mode)
	if err != nil {
		return "", cfg, cli.Usagef("--mode: %v", err)
	}
	isolation, err := sandbox.ParseIsolation(f.isolation)
	if err != nil {
		return "", cfg, cli.Usagef("--isolation: %v", err)
	}
	if f.name == "" || f.serverURL == "" {
		return "", cfg, cli.Usagef("--name and --control are required")
	}
	if err := cli.CheckNodeFlags(f.name, f.port, f.relayTransport); err != nil {
		return "", cfg, err
	}
	if !slices.Contains(runsc.Platforms, f.platform) {
		return "", cfg, cli.Usagef("--platform %q: want %s", f.platform, strings.Join(runsc.Platforms, " or "))
	}
	if err := cli.CheckInterfaceName(f.iface); err != nil {
		return "", cfg, err
	}
	for _, p := range []struct{ flag, addr string }{{"socks5", f.socks5}, {"http-proxy", f.httpProxy}} {
		if p.addr == "" {
			continue
		}
		if err := cli.CheckHostPort(localAddr(p.addr), true); err != nil {
			return "", cfg, cli.Usagef("--%s %q: %v (PORT or HOST:PORT)", p.flag, p.addr, err)
		}
	}
	serverURL, err := f.trust.Apply(f.serverURL)
	if err != nil {
		return "", cfg, err
	}
	token, err := cli.JoinToken(f.token, f.tokenFile)
	if err != nil {
		return "", cfg, err
	}
	stateDir := f.stateDir
	if stateDir == "" {
		stateDir = filepath.Join(cli.DefaultStateDir(), "sandbox", f.name)
	}
	cfg = sandbox.DriverConfig{
		Name: f.name, ServerURL: serverURL, Token: token, StateDir: stateDir,
		ListenPort: f.port, RelayTransport: f.relayTransport,
		EgressPolicy: f.egressPolicy, AuditLog: f.auditLog, AuditFailOpen: f.auditFailOpen, Isolation: isolation,
		Runsc: f.runscBin, Platform: f.platform, Interface: f.iface,
		SOCKS5: localAddr(f.socks5), HTTPProxy: localAddr(f.httpProxy),
	}
	if f.listenAddr != "" {
		a, err := netip.ParseAddr(f.listenAddr)
		if err != nil {
			return "", cfg, cli.Usagef("--listen-addr: %v", err)
		}
		cfg.ListenAddr = a
	}
	for _, s := range f.forwards {
		fw, err := sandbox.ParseForward(s)
		if err != nil {
			return "", cfg, cli.Usagef("--forward: %v", err)
		}
		cfg.Forwards = append(cfg.Forwards, fw)
	}
	if f.credsFile != "" {
		c, err := readCredentials(f.credsFile)
		if err != nil {
			return "", cfg, err
		}
		cfg.ProxyCredentials = &c
	} else if mode == sandbox.ModePod && (cfg.SOCKS5 != "" || cfg.HTTPProxy != "") && stateDir != "mem:" {
		// Only pod mode has proxies; gvisor mode refuses them later, and a
		// refused command must leave no state behind.
		c, err := stateCredentials(stateDir)
		if err != nil {
			return "", cfg, err
		}
		cfg.ProxyCredentials = &c
	}
	return mode, cfg, nil
}

// localAddr reads a bare port as 127.0.0.1:PORT.
func localAddr(s string) string {
	if s != "" && !strings.Contains(s, ":") {
		return "127.0.0.1:" + s
	}
	return s
}

// readCredentials reads USER:PASSWORD from a private file.
func readCredentials(path string) (proxy.Credentials, error) {
	b, err := cli.ReadSecretFile(path)
	if err != nil {
		return proxy.Credentials{}, err
	}
	user, pass, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if !ok || user == "" || pass == "" || len(user) > 255 || len(pass) > 255 {
		return proxy.Credentials{}, fmt.Errorf("proxy credentials %s: want one line USER:PASSWORD, each 1-255 bytes", path)
	}
	return proxy.Credentials{Username: user, Password: pass}, nil
}

// stateCredentials returns the proxy credentials kept in the state dir,
// making them the first time.
func stateCredentials(stateDir string) (proxy.Credentials, error) {
	path := filepath.Join(stateDir, "proxy-credentials")
	if _, err := os.Stat(path); err == nil {
		return readCredentials(path)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return proxy.Credentials{}, fmt.Errorf("state dir: %w", err)
	}
	c := sandbox.RandomCredentials()
	if err := atomicfile.WriteFile(path, []byte(c.Username+":"+c.Password+"\n"), 0o600); err != nil {
		return proxy.Credentials{}, fmt.Errorf("proxy credentials: %w", err)
	}
	return c, nil
}

func newSandboxStartCmd() *cobra.Command {
	var f sandboxFlags
	var metricsF cli.MetricsFlags
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a sandbox and keep it up until interrupted",
		Long: `start registers the sandbox over NATS (or reuses the identity in --state-dir, so a
restarted sandbox keeps its node ID, keys and overlay address), brings the overlay
up in the chosen isolation mode and serves the agent's proxies until Ctrl-C or
SIGTERM. SIGHUP reloads --egress-policy.

With --mode gvisor (Pro; root in the pod), start runs the agent given after --
as PID 1 in a runsc container over the pod's wg0, and exits with its code, as
'sandbox run' does. Given no agent, it keeps phase 1 (wg0, the egress rules) up
and serves the control socket: 'lattice sandbox exec' runs agents in runsc, one
at a time.

The proxies always require a user and password: --proxy-credentials-file, or
generated into STATE-DIR/proxy-credentials; start prints the file's path. Peers
are reachable by IP or by name (web-1 or web-1.lattice).

STATE-DIR (--state-dir) defaults to /var/lib/lattice/sandbox/NAME for root and
to lattice/sandbox/NAME under the user's config directory ($XDG_CONFIG_HOME,
else ~/.config) for anyone else. The join token comes from --token-file,
$LATTICE_TOKEN or --token.`,
		Example: `  # An agent's network identity, no privileges needed
  lattice sandbox start --name agent-1 --control tls://control:4222 \
      --token-file token --socks5 1080
  # it prints: sandbox: SOCKS5 on 127.0.0.1:1080 (credentials in STATE-DIR/proxy-credentials),
  # STATE-DIR being ~/.config/lattice/sandbox/agent-1 (as root: /var/lib/lattice/sandbox/agent-1)
  curl --socks5-hostname "$(cat ~/.config/lattice/sandbox/agent-1/proxy-credentials)@127.0.0.1:1080" http://web-1:8080/

  # Pro, gvisor mode: the agent in runsc, its traffic through the pod's wg0
  sudo lattice sandbox start --mode gvisor --name agent-1 --control tls://control:4222 \
      --token-file token --egress-policy policy.yaml -- /opt/agent/bin/agent --task 42

  # Pro: policy, audit and an inbound forward to the agent's dev server
  lattice sandbox start --name agent-1 --control tls://control:4222 --token-file token \
      --socks5 1080 --egress-policy policy.yaml --forward 8080=127.0.0.1:3000`,
	}
	f.add(cmd, true)
	metricsF.Add(cmd)
	metricsF.AddPeer(cmd)
	logger := cli.LogFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		mode, cfg, err := f.config(cmd)
		if err != nil {
			return err
		}
		if err := metricsF.Check(); err != nil {
			return err
		}
		cfg.Logger = logger()
		if mode == sandbox.ModeGVisor && len(args) > 0 {
			return runAgent(cmd, mode, cfg, args, &metricsF)
		}
		if mode == sandbox.ModeGVisor && cfg.StateDir == "mem:" {
			return cli.Usagef("gvisor mode without an agent serves agents on its control socket, which needs a --state-dir; or run one: lattice sandbox start --mode gvisor [flags] -- AGENT")
		}
		if len(args) > 0 {
			return cli.Usagef("pod mode takes no command (the agent uses the proxies); to run one: lattice sandbox run -- CMD")
		}
		out := cmd.OutOrStdout()
		dm, err := sandbox.StartDaemon(cmd.Context(), mode, cfg)
		if err != nil {
			return err
		}
		defer dm.Close()
		d := dm.Driver()
		st := d.Status()
		fmt.Fprintf(out, "sandbox: %s (%s) at %v, mode %s, policy %s\n", st.Name, st.NodeID, st.Address, st.Mode, st.Policy)
		if st.Isolation != "" {
			fmt.Fprintf(out, "sandbox: isolation %s: %s\n", st.Isolation, isolationNote(st.Isolation))
		}
		printProxies(out, d, cfg, f.credsFile)
		for _, fw := range st.Forwards {
			fmt.Fprintf(out, "sandbox: forwarding overlay %s\n", fw)
		}
		if st.AuditLog != "" {
			fmt.Fprintf(out, "sandbox: audit log %s\n", st.AuditLog)
		}
		if sock := dm.Socket(); sock != "" {
			fmt.Fprintf(out, "sandbox: control socket %s\n", sock)
		}
		stopMetrics, err := metricsF.Start(cmd.Context(), out, "sandbox", cfg.Logger, sandboxCollectors(d, &metricsF)...)
		if err != nil {
			return err
		}
		defer stopMetrics()
		reloadOnHUP(cmd.Context(), d)
		// Idle: start-up's pages are given back once the sandbox has
		// settled, and what each collection reads after it.
		pagetrim.Idle(cmd.Context(), pagetrim.Config{Settle: settleTime, Logger: cfg.Logger})
		fmt.Fprintln(out, "sandbox: stopped")
		return nil
	}
	return cmd
}

// settleTime is how long a started sandbox waits before it gives back
// what it needed only to start: its peers' first ICE checks and
// WireGuard handshakes take place within it.
const settleTime = 5 * time.Second

// isolationNote says what an isolation means for agents run with exec.
func isolationNote(i sandbox.Isolation) string {
	if i == sandbox.IsolationProxy {
		return "agents run with `sandbox exec` share the host's namespaces and get proxy variables"
	}
	return "agents run with `sandbox exec` get their own user, network, mount and PID namespaces; their only interface is a TUN device to this sandbox"
}

// printProxies says where each proxy listens and where its credentials
// are: credsFile (--proxy-credentials-file) when given, else the state
// dir's generated file, or the credentials themselves when none is kept.
func printProxies(out io.Writer, d sandbox.IsolationDriver, cfg sandbox.DriverConfig, credsFile string) {
	st := d.Status()
	where := "in " + filepath.Join(cfg.StateDir, "proxy-credentials")
	if credsFile != "" {
		where = "in " + credsFile
	} else if cfg.ProxyCredentials == nil {
		if pd, ok := d.(*sandbox.PodDriver); ok {
			c := pd.ProxyCredentials()
			where = c.Username + ":" + c.Password
		}
	}
	if st.SOCKS5 != "" {
		fmt.Fprintf(out, "sandbox: SOCKS5 on %s (credentials %s)\n", st.SOCKS5, where)
	}
	if st.HTTPProxy != "" {
		fmt.Fprintf(out, "sandbox: HTTP proxy on %s (credentials %s)\n", st.HTTPProxy, where)
	}
}

// reloadOnHUP reloads the egress policy on SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, d sandbox.IsolationDriver) {
	r, ok := d.(interface{ ReloadPolicy() error })
	if !ok {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = r.ReloadPolicy()
			}
		}
	}()
}

func newSandboxRunCmd() *cobra.Command {
	var f sandboxFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Pro: run CMD as the sandbox's agent and exit with its code",
		Long: `run starts a sandbox, runs CMD as its agent and stops the sandbox when CMD exits,
exiting with CMD's exit code (128+N if a signal N ended it).

In gvisor mode (root in the pod) CMD runs as PID 1 in a runsc container with
--network=host: its sockets are the pod kernel's, so its traffic follows the pod's
routes into wg0; WireGuard keys and CAP_NET_ADMIN stay outside. After it exits,
wg0, its routes, the iptables rules and the container are gone.

In pod mode (--isolation namespace, the default) CMD runs in user, network,
mount and PID namespaces of its own, made without privileges. Its only network
interface, lattice0, is a TUN device whose other end is the sandbox: it has the
sandbox's overlay address, and every TCP connection, UDP flow and ping goes
through the egress policy and the audit log; peers resolve by name through the
sandbox's DNS. No proxy variables are needed. The state dir (credentials,
audit log, control socket) is hidden, and the sandbox process cannot be signalled
or traced. Where unprivileged user namespaces are unavailable, run refuses and
says why. With --isolation proxy, CMD runs in the host's namespaces with
ALL_PROXY (socks5h://) and HTTP_PROXY / HTTPS_PROXY pointing at the sandbox's
proxies on 127.0.0.1, credentials made for this run. Either way it gets
LATTICE_ADDRESS and LATTICE_NODE_ID.`,
		Example: `  lattice sandbox run --name agent-1 --control tls://control:4222 --token-file token \
      -- curl -s http://web-1:8080/`,
		Args: cobra.MinimumNArgs(1),
	}
	f.add(cmd, false)
	logger := cli.LogFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := edition.Require("sandbox run"); err != nil {
			return err
		}
		if cmd.ArgsLenAtDash() < 0 {
			return cli.Usagef("put the command after --: lattice sandbox run [flags] -- CMD")
		}
		mode, cfg, err := f.config(cmd)
		if err != nil {
			return err
		}
		cfg.Logger = logger()
		if mode == sandbox.ModePod && cfg.Isolation == sandbox.IsolationProxy {
			cfg.SOCKS5, cfg.HTTPProxy = "127.0.0.1:0", "127.0.0.1:0"
			cfg.ProxyCredentials = nil // fresh ones for this run
		}
		return runAgent(cmd, mode, cfg, args, nil)
	}
	return cmd
}

// startSandbox makes the mode's driver and starts it; on error nothing is
// left running. agent, if not nil, is the agent Run will be given, for a
// driver that makes ready for it while it starts (gvisor mode).
func startSandbox(cmd *cobra.Command, mode sandbox.Mode, cfg sandbox.DriverConfig, agent []string, stdio sandbox.Stdio) (sandbox.IsolationDriver, error) {
	d, err := sandbox.New(mode, cfg)
	if err != nil {
		return nil, err
	}
	if p, ok := d.(agentPreparer); ok && agent != nil {
		if err := p.Prepare(agent, stdio); err != nil {
			_ = d.Close()
			return nil, err
		}
	}
	if err := d.Start(cmd.Context()); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// agentPreparer is a driver that makes ready for its agent while it
// starts (sandbox.RunscDriver.Prepare).
type agentPreparer interface {
	Prepare(argv []string, stdio sandbox.Stdio) error
}

var _ agentPreparer = (*sandbox.RunscDriver)(nil)

// runAgent starts a sandbox, runs args as its agent, tears the sandbox
// down and passes the agent's exit code on.
// metricsF, if not nil, serves the sandbox's /metrics while the agent
// runs (`sandbox start --mode gvisor -- AGENT`); its address goes to
// stderr, since stdout is the agent's.
func runAgent(cmd *cobra.Command, mode sandbox.Mode, cfg sandbox.DriverConfig, args []string, metricsF *cli.MetricsFlags) error {
	// A missing agent is found before anything is set up.
	if _, err := exec.LookPath(args[0]); err != nil {
		return fmt.Errorf("agent %q: %w", args[0], err)
	}
	cfg.SingleAgent = true // no init made ahead for a second agent
	stdio := sandbox.Stdio{Stdin: cmd.InOrStdin(), Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	d, err := startSandbox(cmd, mode, cfg, args, stdio)
	if err != nil {
		return err
	}
	defer d.Close()
	st := d.Status()
	fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %s (%s) at %v, mode %s; running %s\n", st.Name, st.NodeID, st.Address, st.Mode, strings.Join(args, " "))
	if metricsF != nil {
		stopMetrics, err := metricsF.Start(cmd.Context(), cmd.ErrOrStderr(), "sandbox", cfg.Logger, sandboxCollectors(d, metricsF)...)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	code, err := d.Run(cmd.Context(), args, stdio)
	if err != nil {
		return err
	}
	if err := d.Close(); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: teardown: %v\n", err)
	}
	if code != 0 {
		return cli.ExitCode{Code: code}
	}
	return nil
}

func newSandboxAgentCmd() *cobra.Command {
	var stateDir, name string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Pro: look into a running sandbox: status, dial, resolve",
		Long: `agent talks to a running sandbox through the control socket in its state
directory, for manual debugging:

  lattice sandbox agent status            identity, proxies, policy, peers and paths
  lattice sandbox agent resolve NAME      what NAME means inside the sandbox
  lattice sandbox agent dial HOST:PORT    connect as the agent would (policy and
                                          audit apply), report the outcome`,
	}
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", "", "the sandbox's state dir")
	cmd.PersistentFlags().StringVar(&name, "name", "", "the sandbox's name (finds the default state dir)")
	client := func() (*sandbox.Client, error) {
		if err := edition.Require("sandbox agent"); err != nil {
			return nil, err
		}
		dir, err := runningDir(stateDir, name)
		if err != nil {
			return nil, err
		}
		return sandbox.NewClient(filepath.Join(dir, sandbox.SocketName)), nil
	}
	_ = cmd.RegisterFlagCompletionFunc("name", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return sandboxNames(filepath.Join(cli.DefaultStateDir(), "sandbox")), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.MarkPersistentFlagDirname("state-dir")
	// peerNames completes a peer's name, followed by suffix, from the
	// running sandbox's status.
	peerNames := func(suffix string, directive cobra.ShellCompDirective) cobra.CompletionFunc {
		return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			directive |= cobra.ShellCompDirectiveNoFileComp
			if len(args) > 0 {
				return nil, directive
			}
			c, err := client()
			if err != nil {
				return nil, directive
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return nil, directive
			}
			var names []string
			for _, p := range st.Peers {
				names = append(names, p.Peer.Name+suffix)
			}
			return names, directive
		}
	}
	cmd.AddCommand(&cobra.Command{
		Use: "status", Short: "Show the sandbox's identity, proxies, policy and peers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s (%s) at %v, mode %s, up since %s\n", st.Name, st.NodeID, st.Address, st.Mode, st.Started.Format("2006-01-02 15:04:05"))
			fmt.Fprintf(out, "policy: %s\n", st.Policy)
			if st.SOCKS5 != "" {
				fmt.Fprintf(out, "socks5: %s\n", st.SOCKS5)
			}
			if st.HTTPProxy != "" {
				fmt.Fprintf(out, "http proxy: %s\n", st.HTTPProxy)
			}
			for _, fw := range st.Forwards {
				fmt.Fprintf(out, "forward: %s\n", fw)
			}
			cli.PrintPeers(out, st.Peers)
			return nil
		},
	}, &cobra.Command{
		Use: "resolve NAME", Short: "Show what NAME resolves to inside the sandbox", Args: cobra.ExactArgs(1),
		ValidArgsFunction: peerNames("", cobra.ShellCompDirectiveDefault),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			r, err := c.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			where := "host network"
			if r.Overlay {
				where = "overlay"
				if r.Peer != "" {
					where += ", peer " + r.Peer
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %v (%s)\n", args[0], r.Addr, where)
			return nil
		},
	}, &cobra.Command{
		Use: "dial HOST:PORT", Short: "Connect as the agent would and report the outcome", Args: cobra.ExactArgs(1),
		ValidArgsFunction: peerNames(":", cobra.ShellCompDirectiveNoSpace),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			r, err := c.Dial(cmd.Context(), "tcp", args[0])
			if err != nil {
				return err
			}
			if r.Error != "" {
				return fmt.Errorf("dial %s: %s (after %v)", args[0], r.Error, r.Time.Round(100_000))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "connected to %s (%s) in %v\n", args[0], r.Remote, r.Time.Round(100_000))
			return nil
		},
	})
	return cmd
}

// sandboxNames lists the sandboxes under dir that have a control socket,
// for completing --name.
func sandboxNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), sandbox.SocketName)); err == nil {
			names = append(names, e.Name())
		}
	}
	return names
}

func newSandboxAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Check a sandbox's audit log"}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify FILE",
		Short: "Check that no line of an audit log was edited, removed, reordered or cut off",
		Long: `verify recomputes the hash chain of an audit log. It names the first line that
was edited, removed or moved. Against the log's checkpoint (FILE.head, sealed
by the sandbox after every fsync) it detects lines cut off the end and a log
replaced by another. Without a checkpoint it cannot; it says so. An attacker
who can write both files can rewrite both: keep a copy of the checkpoint, or of
the last hash the sandbox logged when it stopped, elsewhere.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := audit.VerifyFile(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d lines, %s to %s, last hash %s\n", args[0], rep.Lines,
				rep.First.Format("2006-01-02 15:04:05"), rep.Last.Format("2006-01-02 15:04:05"), rep.LastHash)
			if rep.Checkpoint == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: no checkpoint (%s): truncation cannot be detected\n", args[0], audit.CheckpointPath(args[0]))
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: checkpoint of %s at line %d agrees\n", args[0],
					rep.Checkpoint.Time.Format("2006-01-02 15:04:05"), rep.Checkpoint.Seq)
			}
			return nil
		},
	})
	return cmd
}

// runningDir is the state dir of the running sandbox --state-dir or
// --name names. A name is checked as start checks it, so that it cannot
// reach outside the sandboxes' directory (--name ../../etc).
func runningDir(stateDir, name string) (string, error) {
	switch {
	case stateDir != "":
		return stateDir, nil
	case name == "":
		return "", cli.Usagef("give --state-dir or --name")
	case cli.SanitizeName(name) != name:
		return "", cli.Usagef("--name %q: not a sandbox name (lowercase letters, digits and hyphens)", name)
	}
	return filepath.Join(cli.DefaultStateDir(), "sandbox", name), nil
}
