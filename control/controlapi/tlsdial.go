package controlapi

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

// ErrPlaintext refuses a plaintext control URL whose host is not loopback:
// the join token and the node's NATS password would cross the network in
// clear.
var ErrPlaintext = errors.New("plaintext control connection to a non-loopback address")

// Control URL parameters. A control URL says where control is and how to
// trust it, so one string carries both through every caller (CLI, node,
// sandbox drivers, lab):
//
//	tls://HOST:PORT?fingerprint=HEX      NATS over TLS, certificate pinned
//	https://HOST:PORT?fingerprint=HEX    HTTP registration over TLS, pinned
//	tls://HOST:PORT, https://HOST:PORT   certificate checked against the system roots
//	nats://HOST:PORT, http://HOST:PORT   plaintext: loopback only, unless insecure=1
//
// and on any of them key=HEX, control's register key (64 hex digits,
// RegisterResponse.ControlKey), so that even a node's first registration
// is one request (Join.ControlKey).
const (
	ParamFingerprint = "fingerprint"
	ParamInsecure    = "insecure"
	ParamControlKey  = "key"
)

// endpoint is a parsed control URL.
type endpoint struct {
	scheme string // nats, tls, http or https
	host   string // host:port as written
	path   string // HTTP base path, without a trailing slash
	pin    string // lowercase hex SHA-256 of the certificate's DER, or ""
	// insecure allows plaintext to a non-loopback host.
	insecure bool
	// controlKey is control's register key, zero if the URL has none.
	controlKey key.Public
}

// parseEndpoint parses a control URL and refuses what must not be dialed:
// unknown schemes and parameters, a pin on a plaintext scheme, plaintext to
// a non-loopback host without insecure=1.
func parseEndpoint(raw string) (*endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("control URL: %w", unquoted(err))
	}
	e := &endpoint{scheme: strings.ToLower(u.Scheme), host: u.Host, path: strings.TrimSuffix(u.Path, "/")}
	switch e.scheme {
	case "nats", "tls", "http", "https":
	default:
		return nil, fmt.Errorf("control URL %q: scheme %q: want tls://, https://, or nats:// and http:// on loopback", redactURL(u), u.Scheme)
	}
	if e.host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("control URL %q: no host", redactURL(u))
	}
	if u.User != nil {
		return nil, fmt.Errorf("control URL %q: user info does not belong in the URL; pass the join token with --token-file", redactURL(u))
	}
	if e.path != "" && !e.isHTTP() {
		return nil, fmt.Errorf("control URL %q: a NATS URL has no path", redactURL(u))
	}
	if err := e.parseQuery(u); err != nil {
		return nil, err
	}
	if !e.isTLS() && !e.insecure && !IsLoopbackHost(u.Hostname()) {
		secure := "tls"
		if e.isHTTP() {
			secure = "https"
		}
		return nil, fmt.Errorf("control URL %s: %w: the join token and node password would cross the network in clear; "+
			"use %s://%s (add ?%s=SHA256 for control's self-signed certificate, printed when control starts), "+
			"or pass --insecure (%s=1 in the URL) on a network you trust",
			e.plainURL(), ErrPlaintext, secure, e.host, ParamFingerprint, ParamInsecure)
	}
	return e, nil
}

func (e *endpoint) parseQuery(u *url.URL) error {
	for k, vs := range u.Query() {
		v := ""
		if len(vs) > 0 {
			v = vs[len(vs)-1]
		}
		switch k {
		case ParamFingerprint:
			pin, err := normalizeFingerprint(v)
			if err != nil {
				return fmt.Errorf("control URL %s: %w", e.plainURL(), err)
			}
			if !e.isTLS() {
				return fmt.Errorf("control URL %s: a %s needs tls:// or https://", e.plainURL(), ParamFingerprint)
			}
			e.pin = pin
		case ParamInsecure:
			switch strings.ToLower(v) {
			case "", "1", "true", "yes":
				e.insecure = true
			case "0", "false", "no":
			default:
				return fmt.Errorf("control URL %s: %s=%q: want 1 or 0", e.plainURL(), ParamInsecure, v)
			}
		case ParamControlKey:
			ck, err := key.ParsePublicHex(v)
			if err != nil || ck.IsZero() {
				return fmt.Errorf("control URL %s: %s: want control's register key, 64 hex digits", e.plainURL(), ParamControlKey)
			}
			e.controlKey = ck
		default:
			return fmt.Errorf("control URL %s: unknown parameter %q: want %s, %s or %s", e.plainURL(), k, ParamFingerprint, ParamInsecure, ParamControlKey)
		}
	}
	return nil
}

// unquoted drops the URL a *url.Error quotes in full, user info and all
// (where a careless user might have put the join token).
func unquoted(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redactURL prints u without its user info and query (where a careless
// user might have put a secret).
func redactURL(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.Fragment = nil, "", ""
	return c.String()
}

func (e *endpoint) isTLS() bool  { return e.scheme == "tls" || e.scheme == "https" }
func (e *endpoint) isHTTP() bool { return e.scheme == "http" || e.scheme == "https" }

// plainURL is the URL without parameters, as nats.go and net/http want it.
func (e *endpoint) plainURL() string { return e.scheme + "://" + e.host + e.path }

// IsLoopbackHost reports whether host (an IP literal or "localhost", as in
// a URL, without the port) names this machine's loopback. Names other
// than localhost are not resolved: what a name resolves to can change
// between the check and the dial.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err == nil && a.Unmap().IsLoopback()
}

// normalizeFingerprint accepts relay.CertFingerprint's form, upper or
// lower case, with or without colons, and returns it in that form.
func normalizeFingerprint(s string) (string, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("%s %q: want %d hex bytes (SHA-256 of the certificate, as control prints it)", ParamFingerprint, s, sha256.Size)
	}
	return hex.EncodeToString(b), nil
}

// tlsConfig is the client configuration for a TLS endpoint: the pinned
// certificate when there is a pin, else the system roots and the name.
func (e *endpoint) tlsConfig() *tls.Config {
	host, _, err := net.SplitHostPort(e.host)
	if err != nil {
		host = e.host
	}
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if e.pin == "" {
		return tc
	}
	pin := e.pin
	// The pin replaces chain and name verification; VerifyConnection runs
	// even when they are skipped (as relay's client does it).
	tc.InsecureSkipVerify = true // #nosec G402 -- replaced by the fingerprint pin
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("control: server sent no certificate")
		}
		if got := relay.CertFingerprint(cs.PeerCertificates[0].Raw); got != pin {
			return fmt.Errorf("control: server certificate %s does not match the pinned %s %s "+
				"(control has a new certificate, or something else answers at %s)", got, ParamFingerprint, pin, e.host)
		}
		return nil
	}
	return tc
}

// natsOptions connect nats.go to the endpoint over n. A TLS endpoint does
// the handshake first, before NATS's INFO, so nothing of the protocol ever
// crosses the network in clear; control's listener expects exactly that.
func (e *endpoint) natsOptions(n netx.Network) []nats.Option {
	opts := []nats.Option{nats.SetCustomDialer(Dialer(n))}
	if e.isTLS() {
		opts = append(opts, nats.Secure(e.tlsConfig()), nats.TLSHandshakeFirst())
	}
	return opts
}

// httpClient is an HTTP client for the endpoint, dialing on n.
func (e *endpoint) httpClient(n netx.Network) *http.Client {
	tr := &http.Transport{DialContext: n.Dial}
	if e.isTLS() {
		tr.TLSClientConfig = e.tlsConfig()
	}
	return &http.Client{Transport: tr}
}

// inherit returns the NATS URL a registration reply advertised, with this
// endpoint's trust settings where it has none of its own: insecure=1 when
// the caller allowed plaintext, and the pin when the advertised host is
// the one registration pinned (control's HTTP and NATS listeners present
// the same certificate). The session then dials with what registration
// was trusted with, and a reply cannot downgrade it: a plaintext URL to a
// non-loopback host still needs the caller's insecure.
func (e *endpoint) inherit(advertised string) string {
	u, err := url.Parse(advertised)
	if err != nil || advertised == "" {
		return advertised // Connect reports it
	}
	q := u.Query()
	if e.insecure && !q.Has(ParamInsecure) {
		q.Set(ParamInsecure, "1")
	}
	if e.pin != "" && !q.Has(ParamFingerprint) && strings.EqualFold(u.Scheme, "tls") && sameHost(u.Hostname(), e.host) {
		q.Set(ParamFingerprint, e.pin)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func sameHost(a, hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	return strings.EqualFold(strings.Trim(a, "[]"), strings.Trim(h, "[]"))
}

// WithTrust returns the control URL raw with a pin and insecure added (as
// the CLI's --control-fingerprint and --insecure do), after checking it
// the way every client does: a bad URL fails here, before anything dials.
func WithTrust(raw, fingerprint string, insecure bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("control URL: %w", unquoted(err))
	}
	q := u.Query()
	if fingerprint != "" {
		q.Set(ParamFingerprint, fingerprint)
	}
	if insecure {
		q.Set(ParamInsecure, "1")
	}
	u.RawQuery = q.Encode()
	if _, err := parseEndpoint(u.String()); err != nil {
		return "", err
	}
	return u.String(), nil
}

// dialNATS connects to the control URL raw on n as the URL says (TLS
// first, with its pin), after parseEndpoint's checks; opts add to the
// connection's options.
func dialNATS(n netx.Network, raw string, opts ...nats.Option) (*nats.Conn, *endpoint, error) {
	ep, err := parseEndpoint(raw)
	if err != nil {
		return nil, nil, err
	}
	if ep.isHTTP() {
		return nil, nil, fmt.Errorf("control URL %s: want tls:// or nats:// for NATS", ep.plainURL())
	}
	nc, err := nats.Connect(ep.plainURL(), append(ep.natsOptions(n), opts...)...)
	return nc, ep, err
}

// httpEndpoint is an HTTP client for the control URL raw, after
// parseEndpoint's checks.
func httpEndpoint(n netx.Network, raw string) (*http.Client, *endpoint, error) {
	ep, err := parseEndpoint(raw)
	if err != nil {
		return nil, nil, err
	}
	if !ep.isHTTP() {
		return nil, nil, fmt.Errorf("control URL %s: want https:// or http:// for HTTP registration", ep.plainURL())
	}
	return ep.httpClient(n), ep, nil
}

// DialNATS connects to control's NATS at the control URL raw (tls:// or
// nats://) on n, trusting it as the URL says (TLS first, with its pin),
// after the URL's checks; opts add to the connection's options.
func DialNATS(n netx.Network, raw string, opts ...nats.Option) (*nats.Conn, error) {
	nc, _, err := dialNATS(n, raw, opts...)
	return nc, err
}

// HTTPClient is an HTTP client for the control URL raw (https:// or
// http://) on n, trusting it as the URL says, and the URL to put paths
// after (raw without its parameters).
func HTTPClient(n netx.Network, raw string) (*http.Client, string, error) {
	c, ep, err := httpEndpoint(n, raw)
	if err != nil {
		return nil, "", err
	}
	return c, ep.plainURL(), nil
}

// URLControlKey is the register key the control URL raw carries
// (ParamControlKey); zero if it has none or does not parse.
func URLControlKey(raw string) key.Public {
	ep, err := parseEndpoint(raw)
	if err != nil {
		return key.Public{}
	}
	return ep.controlKey
}
