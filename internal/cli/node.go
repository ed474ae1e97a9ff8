package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/control/controlapi"
)

// What the commands that run a node (lattice up, lattice sandbox,
// lattice-sandbox) share: control's URL and trust, the join token, secret
// files, state directories and names.

// ReadSecretFile reads a secret, refusing files others can read.
func ReadSecretFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, below
		}
		return nil, fmt.Errorf("secret file %q: %w", path, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("secret file %q is a directory", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s has mode %v; make it private: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	return b, nil
}

// ControlFlag adds --control, the control URL, and its older name
// --server-url (hidden), so scripts written for either keep working.
func ControlFlag(cmd *cobra.Command, p *string, usage string) {
	f := cmd.Flags()
	f.StringVar(p, "control", "", usage)
	f.StringVar(p, "server-url", "", "old name of --control")
	_ = f.MarkHidden("server-url")
}

// TokenFlags adds --token and --token-file; JoinToken reads what they say.
func TokenFlags(cmd *cobra.Command, token, tokenFile *string) {
	f := cmd.Flags()
	f.StringVar(token, "token", "", "join token (prefer --token-file or $LATTICE_TOKEN: other users can read arguments in ps)")
	f.StringVar(tokenFile, "token-file", "", "file holding the join token (mode 0600)")
}

// JoinToken returns the join token from --token, --token-file or
// $LATTICE_TOKEN, in that order. It never puts the token in an error.
func JoinToken(token, tokenFile string) (string, error) {
	switch {
	case token != "" && tokenFile != "":
		return "", Usagef("give --token or --token-file, not both")
	case tokenFile != "":
		b, err := ReadSecretFile(tokenFile)
		if err != nil {
			return "", err
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("token file %s is empty", tokenFile)
		}
	case token == "":
		token = strings.TrimSpace(os.Getenv("LATTICE_TOKEN"))
	}
	if token == "" {
		return "", Usagef("a join token is required: --token, --token-file or $LATTICE_TOKEN")
	}
	return token, nil
}

// DefaultStateDir is where state directories go by default: under
// /var/lib/lattice for root, else under the user's config directory.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/lattice"
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "lattice")
	}
	return ".lattice"
}

// SanitizeName makes a node name of s (a host name): lowercase letters
// and digits, other runs as one hyphen, at most 63 bytes; "node" if
// nothing is left.
func SanitizeName(s string) string {
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

// TrustFlags are a node's side of trusting control: a pin for control's
// certificate, and consent to plaintext off loopback.
type TrustFlags struct {
	Fingerprint string
	Insecure    bool
}

// Add adds --control-fingerprint and --insecure to cmd.
func (t *TrustFlags) Add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&t.Fingerprint, "control-fingerprint", "", "pin control's self-signed certificate (SHA-256, as control prints it); same as ?fingerprint= in --control")
	f.BoolVar(&t.Insecure, "insecure", false, "allow plaintext nats:// or http:// to a non-loopback control: the join token crosses the network in clear")
}

// Apply puts the flags into the control URL and checks it, so a refused
// URL fails before anything starts.
func (t *TrustFlags) Apply(url string) (string, error) {
	u, err := controlapi.WithTrust(url, t.Fingerprint, t.Insecure)
	if err != nil {
		return "", Usagef("--control: %w", err)
	}
	return u, nil
}

// RelayTransports are node.LRPRelay's transports, for completion.
var RelayTransports = []string{"tcp", "quic", "race"}

// CheckNodeFlags checks what lattice up and lattice sandbox start share,
// so that a bad value fails at once instead of after registration (or,
// for a name, when control refuses it, retried forever).
func CheckNodeFlags(name string, port int, relayTransport string) error {
	if SanitizeName(name) != name {
		return Usagef("--name %q: use lowercase letters, digits and hyphens (e.g. %q)", name, SanitizeName(name))
	}
	if port < 0 || port > 65535 {
		return Usagef("--port %d: want 0-65535 (0: any free port)", port)
	}
	if !slices.Contains(RelayTransports, relayTransport) {
		return Usagef("--relay-transport %q: want %s", relayTransport, strings.Join(RelayTransports, ", "))
	}
	return nil
}

// CheckHostPort checks that s is HOST:PORT with a port from 0 to 65535
// (1 to 65535 unless zeroPort) and returns the reason if not.
func CheckHostPort(s string, zeroPort bool) error {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err) // the address is in the caller's message
		}
		return err
	}
	if host == "" && !zeroPort {
		return errors.New("want HOST:PORT")
	}
	lowest := uint64(1)
	if zeroPort {
		lowest = 0
	}
	if n, err := strconv.ParseUint(p, 10, 16); err != nil || n < lowest {
		return fmt.Errorf("port %q: want a number %d-65535", p, lowest)
	}
	return nil
}

// CheckInterfaceName checks a network interface name as Linux does
// (dev_valid_name): 1-15 bytes, not . or .., no slash, colon or space.
func CheckInterfaceName(name string) error {
	switch {
	case name == "":
		return Usagef("--interface: name an interface (e.g. lattice0)")
	case len(name) > 15:
		return Usagef("--interface %q: %d bytes; interface names have at most 15", name, len(name))
	case name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n"):
		return Usagef("--interface %q: not an interface name (no /, : or spaces)", name)
	}
	return nil
}
