package controlapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

// A NATS cluster is reached through any of its servers: control and nodes
// are given every server's URL (comma-separated where one string is
// wanted), connect to one and move to another when it goes away. Each URL
// carries its own trust (a pin, insecure=1), checked as for one server.

// SplitURLs splits a comma-separated URL list, dropping empty items.
func SplitURLs(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// natsServers is a parsed URL list for nats.go: the plain URLs and one
// TLS configuration that trusts each server as its own URL says.
type natsServers struct {
	eps   []*endpoint
	plain []string
	tls   *tls.Config // nil: plaintext
}

// parseServers parses raws (at least one) with parseEndpoint's checks;
// all must be TLS or all plaintext, since nats.go uses one setting.
func parseServers(raws []string) (*natsServers, error) {
	if len(raws) == 0 {
		return nil, errors.New("control URL: none given")
	}
	ns := &natsServers{}
	for _, raw := range raws {
		ep, err := parseEndpoint(raw)
		if err != nil {
			return nil, err
		}
		if ep.isHTTP() {
			return nil, fmt.Errorf("control URL %s: want tls:// or nats:// for NATS", ep.plainURL())
		}
		if len(ns.eps) > 0 && ep.isTLS() != ns.eps[0].isTLS() {
			return nil, fmt.Errorf("control URLs %s and %s: mix TLS and plaintext; use one for every server", ns.eps[0].plainURL(), ep.plainURL())
		}
		ns.eps = append(ns.eps, ep)
		ns.plain = append(ns.plain, ep.plainURL())
	}
	if !ns.eps[0].isTLS() {
		return ns, nil
	}
	if len(ns.eps) == 1 {
		ns.tls = ns.eps[0].tlsConfig()
		return ns, nil
	}
	ns.tls = clusterTLS(ns.eps)
	return ns, nil
}

// clusterTLS trusts a server whose certificate one of eps pins, or,
// for a server whose URL has no pin, one that chains to the system roots
// for the name dialed (nats.go sets ServerName to each server's host).
func clusterTLS(eps []*endpoint) *tls.Config {
	pins := map[string]bool{}
	unpinned := map[string]bool{}
	for _, ep := range eps {
		if ep.pin != "" {
			pins[ep.pin] = true
		} else {
			unpinned[strings.ToLower(urlHostname(ep.host))] = true
		}
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // #nosec G402 -- VerifyConnection checks the pin or the chain
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("control: server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			if pins[relay.CertFingerprint(leaf.Raw)] {
				return nil
			}
			if !unpinned[strings.ToLower(cs.ServerName)] {
				return fmt.Errorf("control: certificate of %s matches no pinned %s", cs.ServerName, ParamFingerprint)
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: cs.ServerName, Intermediates: inter})
			return err
		},
	}
}

func urlHostname(hostport string) string {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		hostport = hostport[:i]
	}
	return strings.Trim(hostport, "[]")
}

// CheckServers reports whether raws are NATS URLs a node can dial (as
// DialServers parses them), without dialing.
func CheckServers(raws []string) error {
	_, err := parseServers(raws)
	return err
}

// DialServers connects to any of raws on n. handshakeFirst: TLS before
// NATS's INFO (control's own listener); a stock nats-server wants it after.
// Servers a server announces are not added: only the URLs given, with
// the trust they carry, are dialed. urls are the plain URLs dialed, nil
// when raws did not parse.
func DialServers(n netx.Network, raws []string, handshakeFirst bool, opts ...nats.Option) (nc *nats.Conn, urls []string, err error) {
	ns, err := parseServers(raws)
	if err != nil {
		return nil, nil, err
	}
	base := []nats.Option{nats.SetCustomDialer(Dialer(n)), nats.IgnoreDiscoveredServers()}
	if ns.tls != nil {
		base = append(base, nats.Secure(ns.tls))
		if handshakeFirst {
			base = append(base, nats.TLSHandshakeFirst())
		}
	}
	nc, err = nats.Connect(strings.Join(ns.plain, ","), append(base, opts...)...)
	return nc, ns.plain, err
}
