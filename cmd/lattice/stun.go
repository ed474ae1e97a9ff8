package main

import (
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/stun"
)

func newSTUNCmd() *cobra.Command {
	var listen, alternate string
	cmd := &cobra.Command{
		Use:   "stun",
		Short: "Run a STUN server (RFC 8489; RFC 5780 with --alternate)",
		Long: `stun answers STUN binding requests with the address they came from, which
is how a node behind a NAT learns its public address. Given a second address
and port with --alternate it also serves RFC 5780 (OTHER-ADDRESS,
RESPONSE-ORIGIN, CHANGE-REQUEST), so clients can discover how their NAT maps
and filters.`,
		Example: `  # Plain STUN on every address, the standard port
  lattice stun --listen 0.0.0.0:3478

  # RFC 5780 behaviour discovery: two public addresses, two ports
  lattice stun --listen 203.0.113.10:3478 --alternate 203.0.113.11:3479`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:3478", "address:port to serve on")
	cmd.Flags().StringVar(&alternate, "alternate", "", "second address:port for RFC 5780 (another address and another port)")
	logger := logFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		primary, err := netip.ParseAddrPort(listen)
		if err != nil {
			return usagef("--listen %q: %v", listen, err)
		}
		cfg := stun.Config{Network: netx.OS, Logger: logger(), Primary: primary}
		if alternate != "" {
			if cfg.Alternate, err = netip.ParseAddrPort(alternate); err != nil {
				return usagef("--alternate %q: %v", alternate, err)
			}
		}
		srv, err := stun.NewServer(cfg)
		if err != nil {
			return usageError{Err: err}
		}
		if err := srv.Start(cmd.Context()); err != nil {
			return fmt.Errorf("start STUN server: %w", err)
		}
		defer srv.Close()
		fmt.Fprintf(cmd.OutOrStdout(), "stun: serving on %v", srv.Addr())
		if o := srv.OtherAddr(); o.IsValid() {
			fmt.Fprintf(cmd.OutOrStdout(), " (RFC 5780, other address %v)", o)
		}
		fmt.Fprintln(cmd.OutOrStdout())
		<-cmd.Context().Done()
		st := srv.Stats()
		fmt.Fprintf(cmd.OutOrStdout(), "stun: stopped after %d requests, %d dropped\n", st.Requests, st.Dropped.Total())
		return nil
	}
	return cmd
}
