package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// controlTLSFlags choose what control's listeners present.
type controlTLSFlags struct {
	cert, key  string
	selfSigned bool
	insecure   bool
}

func (t *controlTLSFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&t.cert, "tls-cert", "", "TLS certificate (PEM chain) for the HTTP and NATS listeners")
	f.StringVar(&t.key, "tls-key", "", "TLS key (PEM, mode 0600) for --tls-cert")
	f.BoolVar(&t.selfSigned, "tls-self-signed", false, "TLS with a self-signed certificate kept in STATE-DIR/tls, even on loopback (the default off loopback)")
	f.BoolVar(&t.insecure, "insecure", false, "plaintext on a non-loopback listener: join tokens and node passwords cross the network in clear")
}

// controlTLS is what control's listeners present.
type controlTLS struct {
	cfg         *tls.Config // nil: plaintext
	fingerprint string      // set for a self-signed certificate, which nodes pin
	dir         string      // where the self-signed certificate is kept
}

// resolve picks the TLS setup: the given certificate; else a self-signed
// one when asked or when any listener is off loopback (unless --insecure);
// else plaintext, which clients accept on loopback only.
func (t *controlTLSFlags) resolve(stateDir string, listens []string, now time.Time) (controlTLS, error) {
	switch {
	case (t.cert == "") != (t.key == ""):
		return controlTLS{}, usagef("--tls-cert and --tls-key go together")
	case t.cert != "" && t.selfSigned:
		return controlTLS{}, usagef("give --tls-cert/--tls-key or --tls-self-signed, not both")
	case t.insecure && (t.cert != "" || t.selfSigned):
		return controlTLS{}, usagef("--insecure turns TLS off; it does not go with --tls-cert or --tls-self-signed")
	case t.cert != "":
		tc, err := control.LoadTLS(t.cert, t.key)
		return controlTLS{cfg: tc}, err
	}
	exposed := ""
	for _, l := range listens {
		if l != "" && !loopbackListen(l) {
			exposed = l
			break
		}
	}
	if !t.selfSigned && (exposed == "" || t.insecure) {
		return controlTLS{}, nil
	}
	dir := filepath.Join(stateDir, "tls")
	tc, fp, err := control.SelfSignedTLS(dir, now)
	return controlTLS{cfg: tc, fingerprint: fp, dir: dir}, err
}

// loopbackListen reports whether a listen address stays on this machine.
// An empty host binds every address, so it is not loopback.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return host != "" && controlapi.IsLoopbackHost(host)
}

// advertise checks --advertise-nats against the TLS setup and adds the
// self-signed certificate's pin to a tls:// URL that has none.
func (c controlTLS) advertise(url string, embedded bool) (string, error) {
	if url == "" || !embedded || c.cfg == nil {
		return url, nil
	}
	if !strings.HasPrefix(strings.ToLower(url), "tls://") {
		return "", usagef("--advertise-nats %s: control's NATS listener speaks TLS; advertise tls://HOST:PORT", url)
	}
	if c.fingerprint == "" || strings.Contains(url, controlapi.ParamFingerprint+"=") {
		return url, nil
	}
	return controlapi.WithTrust(url, c.fingerprint, false)
}

// report prints the TLS setup and how nodes join: each URL with control's
// register key (a first registration in one request) and, for a
// self-signed certificate, its fingerprint.
func (c controlTLS) report(out io.Writer, natsURL, httpURL string, registerKey key.Public) {
	switch {
	case c.cfg == nil:
		fmt.Fprintln(out, "control: plaintext (clients accept it on loopback only; use --tls-cert or --tls-self-signed otherwise)")
	case c.fingerprint == "":
		fmt.Fprintln(out, "control: TLS with the certificate from --tls-cert")
	default:
		fmt.Fprintf(out, "control: TLS self-signed certificate in %s, fingerprint %s\n", c.dir, c.fingerprint)
	}
	for _, u := range []string{natsURL, httpURL} {
		if u == "" {
			continue
		}
		q := url.Values{}
		if c.fingerprint != "" {
			q.Set(controlapi.ParamFingerprint, c.fingerprint)
		}
		q.Set(controlapi.ParamControlKey, registerKey.Hex())
		fmt.Fprintf(out, "control: nodes join with --control '%s?%s'\n", u, q.Encode())
	}
}
