package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/latticelab/lattice/node"
)

// PrintPeers prints a table of peers and why each relayed one is.
func PrintPeers(w io.Writer, peers []node.PeerStatus) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tADDRESS\tSTATE\tPATH\tENDPOINT\tRTT\tMTU\tTX\tRX\tHANDSHAKE")
	sort.Slice(peers, func(i, j int) bool { return peers[i].Peer.Name < peers[j].Peer.Name })
	for _, p := range peers {
		rtt, hs := "-", "never"
		if p.RTT > 0 {
			rtt = p.RTT.Round(10 * time.Microsecond).String()
		}
		if !p.LastHandshake.IsZero() {
			hs = time.Since(p.LastHandshake).Round(time.Second).String() + " ago"
		}
		state := "online"
		if !p.Online {
			state = "offline"
		}
		mtu := "-"
		if p.MTU > 0 {
			mtu = strconv.Itoa(p.MTU)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Peer.Name, p.Peer.Address.Addr(), state, p.Path, orDash(p.Endpoint), rtt, mtu,
			bytesStr(p.TxDirect+p.TxRelay), bytesStr(p.RxDirect+p.RxRelay), hs)
	}
	tw.Flush()
	for _, p := range peers {
		if p.Path != node.PathRelay {
			continue
		}
		fmt.Fprintf(w, "\n%s is relayed:\n", p.Peer.Name)
		if p.Why != "" {
			fmt.Fprintf(w, "  why: %s\n", p.Why)
		}
		if p.MTU > 0 {
			fmt.Fprintf(w, "  mtu: %d: %s\n", p.MTU, p.MTUReason)
		}
		if n := len(p.History); n > 0 {
			fmt.Fprintf(w, "  last change: %s\n", p.History[n-1].Reason)
		}
		fmt.Fprintf(w, "  ICE: %s", orDash(p.ICE.State))
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
