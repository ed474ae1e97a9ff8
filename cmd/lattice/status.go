package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/unixhttp"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/node"
)

// statusReply is what `lattice up` serves on its socket and `lattice
// status --json` prints; statusLong documents it.
type statusReply struct {
	Name    string `json:"name"`
	NodeID  string `json:"node_id"`
	Address string `json:"address"`
	// LivenessTimeoutMillis: a peer that stops without leaving (killed,
	// network lost) is shown offline this long after its last heartbeat.
	LivenessTimeoutMillis int64             `json:"liveness_timeout_ms"`
	Mux                   node.MuxStats     `json:"mux"`
	Peers                 []node.PeerStatus `json:"peers"`
	// Userspace: the overlay is the node's in-process netstack, which no
	// other program reaches; `lattice ping` asks the node to ping
	// (POST /ping) instead of sending through the host.
	Userspace bool `json:"userspace,omitempty"`
	// STUN and Relays are the servers control announced to the node, for
	// `lattice netcheck` without --stun/--relay.
	STUN   []string           `json:"stun,omitempty"`
	Relays []controlapi.Relay `json:"relays,omitempty"`
	// RelayTransport is how the node reaches its relay now ("quic",
	// "tcp"; empty while disconnected or without one), and
	// RelayTransportReason why ("configured", or what race measured).
	RelayTransport       string `json:"relay_transport,omitempty"`
	RelayTransportReason string `json:"relay_transport_reason,omitempty"`
}

const statusLong = `status asks the running 'lattice up' (through the socket in --state-dir) for each
peer's state and path. A peer that stops cleanly is shown offline at once; one that
stops without a word (killed, network lost) after the liveness timeout, printed
under the node's own line. Connections to an offline peer fail at once (host unreachable).

--json prints one object:
  name, node_id, address, liveness_timeout_ms, userspace (true with --userspace),
  stun: [HOST:PORT], relays: [{addr, fingerprint}] (the servers control announced),
  relay_transport ("quic" | "tcp", absent while disconnected), relay_transport_reason
  ("configured", or what --relay-transport race measured),
  mux: {stun_datagrams, wireguard_datagrams, other_datagrams, stun_dropped, wireguard_dropped},
  peers: [{name, node_id, address, public_key,
           online (bool), state ("online" | "offline"),
           path ("direct" | "relay" | "offline"), endpoint, rtt_ms,
           last_handshake (RFC 3339, null before the first),
           tx_bytes, rx_bytes, tx_direct_bytes, tx_relay_bytes, rx_direct_bytes, rx_relay_bytes,
           history: [{time, to, addr, reason}],
           ice: {session, state, local_candidates, remote_candidates, self_candidates, pairs, error},
           mtu, mtu_reason (the overlay MTU toward the peer and why: 1376 while it is
           relayed over QUIC datagrams)}]`

// serveStatus answers GET /status on a unix socket only the owner can use;
// with ping (a --userspace node's netstack), POST /ping too (ping.go).
func serveStatus(path string, n *node.Node, ping overlayPing) (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(newStatusReply(n, ping != nil))
	})
	if ping != nil {
		mux.Handle("POST /ping", pingHandler(n, ping))
	}
	return unixhttp.Serve(path, mux)
}

func newStatusReply(n *node.Node, userspace bool) statusReply {
	id := n.Identity()
	stuns, relays := n.Servers()
	st := statusReply{Name: id.Name, NodeID: id.NodeID, Address: id.Address.String(),
		LivenessTimeoutMillis: n.PresenceTTL().Milliseconds(), Mux: n.MuxStats(), Peers: n.Status(), Userspace: userspace,
		STUN: stuns, Relays: relays}
	if rs, ok := n.RelayStats(); ok {
		st.RelayTransport, st.RelayTransportReason = rs.Transport, rs.TransportReason
	}
	return st
}

func newStatusCmd() *cobra.Command {
	var stateDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each peer's state, path, endpoint, RTT, traffic and why it is relayed",
		Long:  statusLong,
		Example: `  lattice status
  lattice status --json | jq -r '.peers[] | "\(.name) \(.state) \(.path) \(.rtt_ms)ms"'
  lattice status --json | jq '[.peers[] | select(.online | not) | .name]'`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", cli.DefaultStateDir(), "the running node's --state-dir")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		socket, err := nodeSocket(stateDir)
		if err != nil {
			return err
		}
		st, raw, err := fetchStatus(cmd.Context(), socket)
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

// nodeSocket is the status socket of the node running with stateDir.
func nodeSocket(stateDir string) (string, error) {
	switch stateDir {
	case "":
		return "", usagef("--state-dir is empty: give the running node's --state-dir")
	case "mem:":
		return "", usagef("--state-dir mem: keeps no status socket: a node started with it cannot be asked")
	}
	return filepath.Join(stateDir, "lattice.sock"), nil
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
		return nil, nil, fmt.Errorf("status from %s: %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(raw[:min(len(raw), 200)]))
		return nil, nil, fmt.Errorf("status from %s: %s: %s", socket, resp.Status, msg)
	}
	var st statusReply
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, nil, fmt.Errorf("status from %s: not a node's status reply: %w", socket, err)
	}
	return &st, raw, nil
}

func printStatus(w io.Writer, st *statusReply) {
	fmt.Fprintf(w, "%s (%s) %s\n", st.Name, st.NodeID, st.Address)
	if st.LivenessTimeoutMillis > 0 {
		fmt.Fprintf(w, "peers that stop without leaving are shown offline %v after their last heartbeat\n",
			time.Duration(st.LivenessTimeoutMillis)*time.Millisecond)
	}
	if st.RelayTransport != "" {
		fmt.Fprintf(w, "relay over %s: %s\n", st.RelayTransport, st.RelayTransportReason)
	}
	fmt.Fprintln(w)
	cli.PrintPeers(w, st.Peers)
}
