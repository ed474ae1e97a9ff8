package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/metrics"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
)

func newUpCmd() *cobra.Command {
	var name, controlURL, token, tokenFile, stateDir, ifname, listenAddr, relayTransport, wgMode string
	var port int
	var userspace, noFirewall bool
	var trust cli.TrustFlags
	var egressF egressFlags
	var lazyF lazyFlags
	var metricsF cli.MetricsFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a Lattice node: register, reach every peer, upgrade to direct paths",
		Long: `up registers this machine with control (or reuses the identity in --state-dir),
brings up the overlay interface, and keeps a WireGuard path to every peer: through
the relay at once, then direct whenever ICE finds a way through the NATs, back to
the relay when the direct path dies. 'lattice status' shows each peer's path and
why it is relayed.

The interface is kernel WireGuard (root, or CAP_NET_ADMIN) where the kernel has
it, else wireguard-go on a kernel TUN device (--wireguard auto, kernel or
userspace); either way 'wg show' and 'wg set' work on it. Kernel WireGuard owns
its UDP socket, so the node bridges it to ICE, the relay and the shared port
through one loopback socket per peer (wg show lists those as the endpoints).
With --userspace the node runs on an in-process network stack instead and needs
no privileges.

The join token comes from --token-file, $LATTICE_TOKEN or --token (in that
order of preference: arguments show in ps). --state-dir holds the identity
(node.json) and the status socket (lattice.sock); it defaults to
/var/lib/lattice for root and to lattice under the user's config directory
($XDG_CONFIG_HOME, else ~/.config) for anyone else. 'lattice status' reads the
default; a node with another --state-dir is shown by 'lattice status
--state-dir DIR', and up prints that command when it starts.

--egress-policy FILE (the sandboxes' policy format) filters what leaves the
overlay interface: with an eBPF program in the Pro edition (iptables where BPF
is unavailable, which the log says), with iptables in the community edition.
The file is reloaded when it changes and on SIGHUP; a bad edit keeps the policy
in force. Denied packets go to the hash-chained --audit-log.
--egress-fail-closed keeps the filter in the kernel if the node dies; 'lattice
egress clear' removes it.`,
		Example: `  # A node on a server, joining with a token from control (TLS, certificate
  # checked against the system roots)
  sudo lattice up --control tls://control.example.net:4222 --token-file /etc/lattice/token

  # Control with a self-signed certificate: pin the fingerprint it printed
  sudo lattice up --control tls://control.example.net:4222 --control-fingerprint 3f2a… \
      --token-file /etc/lattice/token

  # Without root, registering over HTTPS
  lattice up --userspace --control https://control.example.net:8443 --token-file token

  # A second node on the same machine: its own UDP port, identity and socket
  sudo lattice up --name web-2 --interface lattice1 --port 0 --state-dir /var/lib/lattice/web-2 \
      --control tls://control.example.net:4222 --token-file /etc/lattice/token
  sudo lattice status --state-dir /var/lib/lattice/web-2`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	host, _ := os.Hostname()
	f.StringVar(&name, "name", cli.SanitizeName(host), "node name (lowercase letters, digits, hyphens)")
	cli.ControlFlag(cmd, &controlURL, "control URL: tls://HOST:PORT or https://HOST:PORT (nats:// and http:// on loopback, or with --insecure) (required)")
	trust.Add(cmd)
	cli.TokenFlags(cmd, &token, &tokenFile)
	f.StringVar(&stateDir, "state-dir", cli.DefaultStateDir(), `directory for the identity and the status socket ("mem:" for an ephemeral identity)`)
	f.IntVar(&port, "port", 51820, "UDP port shared by ICE and WireGuard (0: any)")
	f.StringVar(&listenAddr, "listen-addr", "", "bind the UDP socket to this address only")
	f.StringVar(&ifname, "interface", "lattice0", "kernel interface name")
	f.BoolVar(&userspace, "userspace", false, "in-process network stack, no privileges")
	f.StringVar(&wgMode, "wireguard", "auto", "WireGuard: kernel, userspace (wireguard-go) or auto (kernel where it exists)")
	cli.FlagValues(cmd, "wireguard", wireguardModes...)
	f.BoolVar(&noFirewall, "no-firewall", false, "do not add the iptables rule accepting overlay traffic")
	f.StringVar(&relayTransport, "relay-transport", "tcp", "relay transport: tcp, quic, or race (both, keeping the one that measures better; status says why)")
	cli.FlagValues(cmd, "relay-transport", cli.RelayTransports...)
	egressF.add(cmd)
	lazyF.add(cmd)
	metricsF.Add(cmd)
	metricsF.AddPeer(cmd)
	_ = cmd.MarkFlagDirname("state-dir")
	logger := logFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if controlURL == "" {
			return usagef("--control is required: the URL of 'lattice control'")
		}
		if err := cli.CheckNodeFlags(name, port, relayTransport); err != nil {
			return err
		}
		if err := cli.CheckInterfaceName(ifname); err != nil && !userspace {
			return err
		}
		if stateDir == "" {
			return usagef(`--state-dir is empty: give a directory, or "mem:" for an ephemeral identity`)
		}
		if err := egressF.check(cmd, userspace, stateDir); err != nil {
			return err
		}
		if err := metricsF.Check(); err != nil {
			return err
		}
		ctrlURL, err := trust.Apply(controlURL)
		if err != nil {
			return err
		}
		tok, err := cli.JoinToken(token, tokenFile)
		if err != nil {
			return err
		}
		log := logger()
		cfg := node.Config{
			Name: name, Network: netx.OS, Control: ctrlURL, Token: tok,
			ListenPort: port, RelayTransport: relayTransport, Logger: log,
		}
		if port == 0 {
			cfg.ListenPort = -1
		}
		if err := lazyF.apply(cmd, &cfg); err != nil {
			return err
		}
		if listenAddr != "" {
			a, err := netip.ParseAddr(listenAddr)
			if err != nil {
				return usagef("--listen-addr: %v", err)
			}
			cfg.ListenAddr = a
		}
		socket := ""
		if stateDir != "mem:" {
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
			cfg.Credentials = node.OpenCredentials(filepath.Join(stateDir, "node.json"))
			socket = filepath.Join(stateDir, "lattice.sock")
		}
		wg := wgOptions{mode: wgMode, netstack: userspace, ifname: ifname, noFirewall: noFirewall}
		if err := wg.apply(cmd.Context(), &cfg, log); err != nil {
			return err
		}
		ping := netstackPing(cfg.Provisioner) // before egress wraps it
		eg := egressF.wrap(&cfg, ifname, log)
		defer func() { _ = eg.close() }() // after n.Close: the filter outlasts the interface's traffic
		n, err := node.Start(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		defer n.Close()
		id := n.Identity()
		fmt.Fprintf(cmd.OutOrStdout(), "up: %s (%s) at %v\n", id.Name, id.NodeID, id.Address)
		collectors := []prometheus.Collector{newNodeCollector(n, metricsF.PerPeer, metricsF.PeerLimit)}
		if eg != nil {
			collectors = append(collectors, metrics.UpEgress(eg))
		}
		stopMetrics, err := metricsF.Start(cmd.Context(), cmd.OutOrStdout(), "up", log, collectors...)
		if err != nil {
			return err
		}
		defer stopMetrics()
		if err := eg.started(cmd.Context(), n, cmd.OutOrStdout()); err != nil {
			return err
		}
		if socket != "" {
			stop, err := serveStatus(socket, n, ping)
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "up: status on %s (%s)\n", socket, statusCommand(stateDir))
		} else {
			fmt.Fprintln(cmd.OutOrStdout(), "up: no status socket with --state-dir mem: ('lattice status' cannot show this node)")
		}
		<-cmd.Context().Done()
		fmt.Fprintln(cmd.OutOrStdout(), "up: stopped")
		return nil
	}
	return cmd
}

// statusCommand is the command that shows the node using stateDir.
func statusCommand(stateDir string) string {
	if stateDir == cli.DefaultStateDir() {
		return "lattice status"
	}
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return "lattice status --state-dir " + stateDir
}
