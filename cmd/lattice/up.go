package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/latticelab/lattice/internal/unixhttp"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/node"
)

// statusReply is what `lattice up` serves on its socket.
type statusReply struct {
	Name    string            `json:"name"`
	NodeID  string            `json:"node_id"`
	Address string            `json:"address"`
	Mux     node.MuxStats     `json:"mux"`
	Peers   []node.PeerStatus `json:"peers"`
}

func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/lattice"
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "lattice")
	}
	return ".lattice"
}

func newUpCmd() *cobra.Command {
	var name, controlURL, tokenFile, stateDir, ifname, listenAddr, relayTransport string
	var port int
	var userspace, noFirewall bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a Lattice node: register, reach every peer, upgrade to direct paths",
		Long: `up registers this machine with control (or reuses the identity in --state-dir),
brings up the overlay interface, and keeps a WireGuard path to every peer: through
the relay at once, then direct whenever ICE finds a way through the NATs, back to
the relay when the direct path dies. 'lattice status' shows each peer's path and
why it is relayed.

The interface is a kernel TUN device (root, or CAP_NET_ADMIN) unless --userspace
is given, in which case the node runs on an in-process network stack and needs no
privileges.`,
		Example: `  # A node on a server, joining with a token from control
  sudo lattice up --control nats://control.example.net:4222 --token-file /etc/lattice/token

  # Without root
  lattice up --userspace --control https://control.example.net --token-file token`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	host, _ := os.Hostname()
	f.StringVar(&name, "name", sanitizeName(host), "node name (lowercase letters, digits, hyphens)")
	f.StringVar(&controlURL, "control", "", "control URL: nats://HOST:PORT or http(s)://HOST:PORT (required)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the join token (required)")
	f.StringVar(&stateDir, "state-dir", defaultStateDir(), `directory for the identity and the status socket ("mem:" for an ephemeral identity)`)
	f.IntVar(&port, "port", 51820, "UDP port shared by ICE and WireGuard (0: any)")
	f.StringVar(&listenAddr, "listen-addr", "", "bind the UDP socket to this address only")
	f.StringVar(&ifname, "interface", "lattice0", "kernel interface name")
	f.BoolVar(&userspace, "userspace", false, "in-process network stack, no privileges")
	f.BoolVar(&noFirewall, "no-firewall", false, "do not add the iptables rule accepting overlay traffic")
	f.StringVar(&relayTransport, "relay-transport", "tcp", "relay transport: tcp, quic or race")
	logger := logFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if controlURL == "" || tokenFile == "" {
			return usagef("--control and --token-file are required")
		}
		tok, err := readSecretFile(tokenFile)
		if err != nil {
			return err
		}
		log := logger()
		cfg := node.Config{
			Name: name, Network: netx.OS, Control: controlURL, Token: strings.TrimSpace(string(tok)),
			ListenPort: port, Logger: log, Relay: node.LRPRelay(netx.OS, log, relayTransport),
		}
		if port == 0 {
			cfg.ListenPort = -1
		}
		if listenAddr != "" {
			a, err := netip.ParseAddr(listenAddr)
			if err != nil {
				return usagef("--listen-addr: %v", err)
			}
			cfg.ListenAddr = a
		}
		socket := ""
		if stateDir == "mem:" {
			cfg.Credentials = node.OpenCredentials("mem:")
		} else {
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
			cfg.Credentials = node.OpenCredentials(filepath.Join(stateDir, "node.json"))
			socket = filepath.Join(stateDir, "lattice.sock")
		}
		if userspace {
			cfg.Provisioner = userspaceProvisioner()
		} else {
			cfg.Provisioner = &node.KernelProvisioner{Name: ifname, NoFirewall: noFirewall, Logger: log}
		}
		n, err := node.Start(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		defer n.Close()
		id := n.Identity()
		fmt.Fprintf(cmd.OutOrStdout(), "up: %s (%s) at %v\n", id.Name, id.NodeID, id.Address)
		if socket != "" {
			stop, err := serveStatus(socket, n)
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "up: status on %s (lattice status --state-dir %s)\n", socket, stateDir)
		}
		<-cmd.Context().Done()
		fmt.Fprintln(cmd.OutOrStdout(), "up: stopped")
		return nil
	}
	return cmd
}

func sanitizeName(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 63 {
		out = out[:63]
	}
	if out == "" {
		out = "node"
	}
	return out
}

// serveStatus answers GET /status on a unix socket only the owner can use.
func serveStatus(path string, n *node.Node) (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		id := n.Identity()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(statusReply{Name: id.Name, NodeID: id.NodeID, Address: id.Address.String(), Mux: n.MuxStats(), Peers: n.Status()})
	})
	return unixhttp.Serve(path, mux)
}

func newStatusCmd() *cobra.Command {
	var stateDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each peer's path, endpoint, RTT, traffic and why it is relayed",
		Example: `  lattice status
  lattice status --json | jq '.peers[] | {name: .Peer.name, path: .Path}'`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultStateDir(), "the running node's --state-dir")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		st, raw, err := fetchStatus(cmd.Context(), filepath.Join(stateDir, "lattice.sock"))
		if err != nil {
			return err
		}
		if asJSON {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		printStatus(cmd.OutOrStdout(), st)
		return nil
	}
	return cmd
}

func fetchStatus(ctx context.Context, socket string) (*statusReply, []byte, error) {
	client := unixhttp.Client(socket)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lattice/status", nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "no such file") || strings.Contains(err.Error(), "connection refused") {
			return nil, nil, fmt.Errorf("no running node at %s: is 'lattice up' running with this --state-dir?", socket)
		}
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	var st statusReply
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	return &st, raw, nil
}

func printStatus(w io.Writer, st *statusReply) {
	fmt.Fprintf(w, "%s (%s) %s\n\n", st.Name, st.NodeID, st.Address)
	printPeers(w, st.Peers)
}

// printPeers prints a table of peers and why each relayed one is.
func printPeers(w io.Writer, peers []node.PeerStatus) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tADDRESS\tPATH\tENDPOINT\tRTT\tTX\tRX\tHANDSHAKE")
	sort.Slice(peers, func(i, j int) bool { return peers[i].Peer.Name < peers[j].Peer.Name })
	for _, p := range peers {
		rtt, hs := "-", "never"
		if p.RTT > 0 {
			rtt = p.RTT.Round(10 * time.Microsecond).String()
		}
		if !p.LastHandshake.IsZero() {
			hs = time.Since(p.LastHandshake).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Peer.Name, p.Peer.Address.Addr(), p.Path, p.Endpoint, rtt,
			bytesStr(p.TxDirect+p.TxRelay), bytesStr(p.RxDirect+p.RxRelay), hs)
	}
	tw.Flush()
	for _, p := range peers {
		if p.Path != node.PathRelay {
			continue
		}
		fmt.Fprintf(w, "\n%s is relayed:\n", p.Peer.Name)
		if n := len(p.History); n > 0 {
			fmt.Fprintf(w, "  last change: %s\n", p.History[n-1].Reason)
		}
		fmt.Fprintf(w, "  ICE: %s", orDash(p.ICE.State))
		if p.ICE.Err != "" {
			fmt.Fprintf(w, " (%s)", p.ICE.Err)
		}
		fmt.Fprintf(w, "\n  our candidates: %s\n  their candidates: %s\n", list(p.ICE.LocalCandidates), list(p.ICE.RemoteCandidates))
		if len(p.ICE.SelfCandidates) > 0 {
			fmt.Fprintf(w, "  not tried (our own address): %s\n", list(p.ICE.SelfCandidates))
		}
		for _, pair := range p.ICE.Pairs {
			fmt.Fprintf(w, "  pair %s\n", pair)
		}
	}
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesStr(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
