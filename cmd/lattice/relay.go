package main

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

func newRelayCmd() *cobra.Command {
	var listen, secretFile, certFile, keyFile string
	var metricsF cli.MetricsFlags
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run an LRP relay (QUIC datagrams and TLS over TCP on one port)",
		Long: `relay forwards WireGuard packets between nodes that have no direct path. Nodes
authenticate with a relay token that control issues; relay and control share
the secret in --secret-file (32 bytes or more, file mode 0600).

The relay serves QUIC (unreliable datagrams, ALPN lrp/1) and TLS over TCP on
the same port number. Nodes use TCP unless told otherwise (--relay-transport);
racing, they keep TCP unless QUIC's handshake is clearly the faster, so a
network that blocks UDP still reaches the relay over TCP, and one whose TCP is
slow or blocked over QUIC. Without --cert/--key the relay
makes a self-signed certificate and prints its fingerprint: give it to control
as --relay ADDR,FINGERPRINT so nodes can pin it. The wire format is in
docs/LRP.md.

A port below 1024 (--listen 0.0.0.0:443) needs root or CAP_NET_BIND_SERVICE:
  sudo setcap cap_net_bind_service=+ep "$(command -v lattice)"
(or AmbientCapabilities=CAP_NET_BIND_SERVICE in a systemd unit).`,
		Example: `  # A secret for relay and control
  head -c 32 /dev/urandom | base64 > relay.secret && chmod 600 relay.secret

  # Public relay on 443 with metrics for Prometheus on loopback
  lattice relay --listen 0.0.0.0:443 --secret-file relay.secret --metrics-listen 127.0.0.1:9090`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:4443", "address:port for QUIC (UDP) and TCP")
	f.StringVar(&secretFile, "secret-file", "", "relay token secret shared with control (required)")
	f.StringVar(&certFile, "cert", "", "TLS certificate (PEM); self-signed if empty")
	f.StringVar(&keyFile, "key", "", "TLS key (PEM)")
	metricsF.Add(cmd)
	logger := logFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if secretFile == "" {
			return usagef("--secret-file is required: relay tokens are checked against it")
		}
		if (certFile == "") != (keyFile == "") {
			return usagef("--cert and --key go together")
		}
		if err := metricsF.Check(); err != nil {
			return err
		}
		secret, err := readRelaySecret(secretFile)
		if err != nil {
			return err
		}
		log := logger()
		reg := metricsF.Registry()
		srv, err := relay.NewServer(relay.ServerConfig{
			Network: netx.OS, Addr: listen, CertFile: certFile, KeyFile: keyFile,
			Secret: secret, Logger: log, Registerer: reg,
		})
		if err != nil {
			return bindError(listen, err)
		}
		defer srv.Close()
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "relay: serving QUIC and TCP on %s\n", srv.Addr())
		if certFile == "" {
			fmt.Fprintf(out, "relay: self-signed certificate, fingerprint %s\n", srv.Fingerprint())
		}
		stopMetrics, err := metricsF.Serve(cmd.Context(), reg, out, "relay", log)
		if err != nil {
			return err
		}
		defer stopMetrics()
		<-cmd.Context().Done()
		fmt.Fprintln(out, "relay: stopped")
		return nil
	}
	return cmd
}

// bindError explains the usual reason a relay cannot take its port: ports
// below net.ipv4.ip_unprivileged_port_start (1024 by default) are reserved
// for root and CAP_NET_BIND_SERVICE.
func bindError(addr string, err error) error {
	if !errors.Is(err, syscall.EACCES) {
		return err
	}
	return fmt.Errorf("%w\n(--listen %s: a port below 1024 needs root or CAP_NET_BIND_SERVICE: "+
		"sudo setcap cap_net_bind_service=+ep \"$(command -v lattice)\", or use a port from 1024 up)", err, addr)
}
