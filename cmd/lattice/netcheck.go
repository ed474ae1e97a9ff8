package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
	"github.com/latticelab/lattice/stun"
)

// netcheckReport is `lattice netcheck --json`'s shape.
type netcheckReport struct {
	STUN   stun.Report   `json:"stun"`
	NAT    string        `json:"nat_type"`
	Relays []relayReport `json:"relays"`
}

// relayReport is one relay's handshake times; an error leaves its
// transport's figure out.
type relayReport struct {
	Addr      string   `json:"addr"`
	QUICMs    *float64 `json:"quic_ms"`
	TCPMs     *float64 `json:"tcp_ms"`
	QUICError string   `json:"quic_error,omitempty"`
	TCPError  string   `json:"tcp_error,omitempty"`
}

func newNetcheckCmd() *cobra.Command {
	var stuns, relays []string
	var asJSON bool
	var controlURL, token, tokenFile string
	var opt stun.Options
	cmd := &cobra.Command{
		Use:   "netcheck",
		Short: "Report this host's NAT, public address and relay latency (no node needed)",
		Long: `netcheck asks STUN servers how this host's NAT behaves: the public address and
whether the port is kept, whether the NAT hairpins (peers behind the same NAT
reach each other at their public addresses), its mapping and filtering in
RFC 4787 terms (from RFC 5780 tests against the first server with two
addresses, 'lattice stun --alternate'), or that UDP is blocked. It then times
a QUIC and a TCP+TLS handshake with each relay (no token needed; pin a
self-signed relay with ADDR,FINGERPRINT as control's --relay takes it).

The mapping decides whether ICE finds direct paths: endpoint-independent
mapping ("cone") lets peers punch through; address- or port-dependent
mapping ("symmetric") on both sides leaves the relay. netcheck needs no
running node: given --stun (and --relay) it checks those; given --control
and a join token (--token-file, $LATTICE_TOKEN or --token), it asks control
for the servers it announces, registering nothing; given neither, it checks
the servers control announced to the node running with --state-dir, read
from its status socket.`,
		Example: `  lattice netcheck --stun stun.example.net:3478 --relay relay.example.net:443
  lattice netcheck --control tls://control.example.net:4222 --token-file token
  lattice netcheck --stun 203.0.113.10:3478 --relay 203.0.113.20:443,3f2a… --json`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringArrayVar(&stuns, "stun", nil, "STUN server HOST:PORT (repeatable; at least one)")
	f.StringArrayVar(&relays, "relay", nil, "relay HOST:PORT or HOST:PORT,FINGERPRINT (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cli.ControlFlag(cmd, &controlURL, "without --stun and --relay: ask this control (as lattice up's --control) for the servers it announces; needs a join token")
	cli.TokenFlags(cmd, &token, &tokenFile)
	stateDir := f.String("state-dir", cli.DefaultStateDir(), "without --stun, --relay and --control: the running node's --state-dir, whose control-announced servers are checked")
	f.DurationVar(&opt.Wait, "wait", 500*time.Millisecond, "how long to wait for each STUN answer before sending again")
	f.IntVar(&opt.Tries, "tries", 3, "how many times each STUN request is sent")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if opt.Wait <= 0 {
			return usagef("--wait %v: must be positive", opt.Wait)
		}
		if opt.Tries <= 0 {
			return usagef("--tries %d: must be positive", opt.Tries)
		}
		switch {
		case controlURL != "" && (len(stuns) > 0 || len(relays) > 0):
			return usagef("give --control or --stun/--relay, not both")
		case controlURL != "":
			tok, err := cli.JoinToken(token, tokenFile)
			if err != nil {
				return err
			}
			if stuns, relays, err = controlServers(cmd.Context(), controlURL, tok); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "netcheck: the servers control at %s announces\n", controlURL)
			if len(stuns) == 0 {
				return fmt.Errorf("control at %s announces no STUN servers (lattice control --stun); give --stun HOST:PORT", controlURL)
			}
		case len(stuns) == 0 && len(relays) == 0:
			var err error
			if stuns, relays, err = announcedServers(cmd.Context(), *stateDir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "netcheck: the servers control announced to the node in %s\n", *stateDir)
		}
		if len(stuns) == 0 {
			return usagef("give at least one --stun HOST:PORT")
		}
		servers, err := resolveSTUN(cmd.Context(), stuns)
		if err != nil {
			return err
		}
		rep, err := runNetcheck(cmd.Context(), servers, relays, opt)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		printNetcheck(cmd.OutOrStdout(), rep)
		return nil
	}
	return cmd
}

// controlServers are the STUN servers and relays (ADDR,FINGERPRINT) the
// control at url announces, asked for with the join token alone.
func controlServers(ctx context.Context, url, token string) (stuns, relays []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := controlapi.Servers(ctx, netx.OS, url, token)
	if err != nil {
		var ce *controlapi.Error
		if errors.As(err, &ce) && ce.Code == controlapi.CodeBadToken {
			return nil, nil, fmt.Errorf("control at %s refused the join token: %s", url, ce.Message)
		}
		return nil, nil, fmt.Errorf("ask control at %s for its servers: %w", url, err)
	}
	return resp.STUN, relayArgs(resp.Relays), nil
}

// relayArgs are relays as --relay takes them: ADDR or ADDR,FINGERPRINT.
func relayArgs(rs []controlapi.Relay) []string {
	var out []string
	for _, r := range rs {
		if r.Fingerprint != "" {
			out = append(out, r.Addr+","+r.Fingerprint)
		} else {
			out = append(out, r.Addr)
		}
	}
	return out
}

// announcedServers are the STUN servers and relays (ADDR,FINGERPRINT)
// control announced to the node running with stateDir.
func announcedServers(ctx context.Context, stateDir string) (stuns, relays []string, err error) {
	socket, err := nodeSocket(stateDir)
	if err != nil {
		return nil, nil, err
	}
	st, _, err := fetchStatus(ctx, socket)
	if err != nil {
		return nil, nil, usagef("give --stun HOST:PORT (and --relay), or run where 'lattice up' runs: %v", err)
	}
	relays = relayArgs(st.Relays)
	if len(st.STUN) == 0 {
		return nil, nil, usagef("control announced no STUN servers to the node in %s (lattice control --stun); give --stun HOST:PORT", stateDir)
	}
	return st.STUN, relays, nil
}

// resolveSTUN turns HOST:PORT arguments into addresses.
func resolveSTUN(ctx context.Context, args []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, a := range args {
		if ap, err := netip.ParseAddrPort(a); err == nil {
			out = append(out, ap)
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, usagef("--stun %q: %v", a, err)
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("--stun %q: resolve %s: %w", a, host, err)
		}
		ap, err := netip.ParseAddrPort(net.JoinHostPort(ips[0].Unmap().String(), port))
		if err != nil {
			return nil, usagef("--stun %q: %v", a, err)
		}
		out = append(out, ap)
	}
	return out, nil
}

func runNetcheck(ctx context.Context, servers []netip.AddrPort, relays []string, opt stun.Options) (netcheckReport, error) {
	var rep netcheckReport
	var err error
	if rep.STUN, err = stun.Netcheck(ctx, netx.OS, servers, opt); err != nil {
		return rep, err
	}
	rep.NAT = natType(rep.STUN)
	rep.Relays = []relayReport{}
	for _, r := range relays {
		addr, fp, _ := strings.Cut(r, ",")
		rr := relayReport{Addr: addr}
		res, err := relay.Probe(ctx, relay.ProbeConfig{Network: netx.OS, Server: addr, Fingerprint: fp})
		if err != nil {
			return rep, usagef("--relay %q: %v", r, err)
		}
		for _, p := range res {
			ms, msg := float64(p.Latency)/float64(time.Millisecond), ""
			if p.Err != nil {
				msg = p.Err.Error()
			}
			if p.Transport == "quic" {
				rr.QUICError = msg
				if msg == "" {
					rr.QUICMs = &ms
				}
			} else {
				rr.TCPError = msg
				if msg == "" {
					rr.TCPMs = &ms
				}
			}
		}
		rep.Relays = append(rep.Relays, rr)
	}
	return rep, nil
}

// natType names the NAT in the classic words operators search for.
func natType(r stun.Report) string {
	switch {
	case !r.UDP:
		return "udp-blocked"
	case !r.NATed:
		return "none"
	case r.Mapping == nil:
		if r.MappingVaries {
			return "symmetric"
		}
		return "unknown"
	case *r.Mapping != stun.EndpointIndependent:
		return "symmetric"
	case *r.Filtering == stun.EndpointIndependent:
		return "full-cone"
	case *r.Filtering == stun.AddressDependent:
		return "restricted-cone"
	}
	return "port-restricted-cone"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printNetcheck(w io.Writer, rep netcheckReport) {
	s := rep.STUN
	fmt.Fprintf(w, "UDP:            %s\n", yesNo(s.UDP))
	if s.UDP {
		fmt.Fprintf(w, "Public address: %v\n", s.Public)
		fmt.Fprintf(w, "NAT:            %s\n", rep.NAT)
		fmt.Fprintf(w, "Port preserved: %s\n", yesNo(s.PortPreserved))
		if s.NATed {
			fmt.Fprintf(w, "Hairpin:        %s\n", yesNo(s.Hairpin))
		}
		if s.Mapping != nil {
			fmt.Fprintf(w, "Mapping:        %s\nFiltering:      %s (RFC 5780 via %v)\n", s.Mapping, s.Filtering, s.BehaviorServer)
		} else {
			fmt.Fprintf(w, "Mapping:        unknown (%s)\n", s.BehaviorError)
		}
	}
	for _, sr := range s.Servers {
		if sr.Err != "" {
			fmt.Fprintf(w, "STUN %v: %s\n", sr.Addr, sr.Err)
			continue
		}
		fmt.Fprintf(w, "STUN %v: %v in %v\n", sr.Addr, sr.Mapped, sr.RTT.Round(10*time.Microsecond))
	}
	for _, r := range rep.Relays {
		fmt.Fprintf(w, "Relay %s: quic %s, tcp %s\n", r.Addr, latency(r.QUICMs, r.QUICError), latency(r.TCPMs, r.TCPError))
	}
}

func latency(ms *float64, err string) string {
	if ms == nil {
		return "failed (" + err + ")"
	}
	return fmt.Sprintf("%.1fms", *ms)
}
