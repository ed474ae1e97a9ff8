package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
)

type controlFlags struct {
	httpListen, natsListen, natsURL, natsUser, natsPassFile, advertise string
	embedded                                                           bool
	tokenFile, store, stateDir                                         string
	relays, stuns                                                      []string
	relaySecretFile                                                    string
	relayTokenTTL                                                      time.Duration
	tls                                                                controlTLSFlags
	kvReplicas                                                         int
	cluster                                                            clusterFlags
	metrics                                                            cli.MetricsFlags
	calloutSeedFile                                                    string
}

// clusterFlags make the embedded NATS one server of a cluster.
type clusterFlags struct {
	listen, routes, name, serverName, secretFile string
}

func newControlCmd() *cobra.Command {
	var fl controlFlags
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Run the control plane: registration, IPAM, peer updates, signaling",
		Long: `control admits nodes that present a join token, gives each an overlay address
in 100.64.0.0/10 (the same key always gets the same address), tells it the
relays and STUN servers to use and who its peers are, pushes peer changes, and
relays ICE signaling between nodes over NATS.

Nodes register with a NATS request on lattice.v1.register or with
POST /v1/register over HTTP, then connect to NATS as their own user, which
may only use its own subjects.

Join tokens come from --token-file: one per line, optionally followed by an
expiry in RFC 3339 ("tok-123… 2027-01-01T00:00:00Z") and by tags
("tok-456… tags=router,db"), which every node joining with that token
carries: peers see them, and a lazy node's --always-direct tag:router
negotiates a direct path with them at once. '#' starts a comment. The file
must not be readable by others.

The registry is a JSON file (--store file:PATH; by default registry.json in
--state-dir) or a JetStream key-value bucket (--store kv:BUCKET), which lets
several control instances share one registry; with --embedded-nats the
bucket's data lives in STATE-DIR/jetstream. control prints where its registry
is when it starts.

Replicas: several control instances share one registry in --store kv:BUCKET
(--kv-replicas copies of it, 3 by default on a NATS cluster). They use an
external NATS cluster (--nats-url with every server, comma-separated) or
form one from their embedded servers (--nats-cluster HOST:PORT, --nats-routes,
--nats-cluster-secret-file). --advertise-nats then lists every server's client
URL, comma-separated: nodes connect to any and move to another.

External NATS: node permissions are enforced there by control serving the
server's auth callout (--auth-callout-seed-file, an account nkey seed; the
server's authorization { auth_callout { issuer: <its public key>, auth_users:
[<--nats-user>] } } block names it), or else by the NATS operator.

--state-dir defaults to /var/lib/lattice/control for root and to
lattice/control under the user's config directory ($XDG_CONFIG_HOME, else
~/.config) for anyone else, next to the state of 'lattice up' and
'lattice sandbox'.

TLS: with --tls-cert and --tls-key both listeners present that certificate.
Otherwise a listener off loopback gets a self-signed certificate, made once
and kept in STATE-DIR/tls (--tls-self-signed asks for it on loopback too);
control prints its SHA-256 fingerprint, which nodes pin with
--control tls://HOST:4222?fingerprint=FP (or https://HOST:PORT?fingerprint=FP).
NATS over TLS does the handshake first (nats.go's TLSHandshakeFirst).
Plaintext stays the default on loopback; --insecure
allows it elsewhere, and nodes then need --insecure too.`,
		Example: `  # Everything embedded, listening on loopback (plaintext stays on this machine)
  lattice control --embedded-nats --token-file tokens.txt

  # Reachable by remote nodes over TLS with a certificate for control.example.net,
  # registry in JetStream
  lattice control --embedded-nats --nats-listen 203.0.113.10:4222 \
      --advertise-nats tls://control.example.net:4222 \
      --tls-cert /etc/lattice/control.crt --tls-key /etc/lattice/control.key \
      --listen-http 203.0.113.10:8443 --store kv:lattice --token-file tokens.txt \
      --relay relay.example.net:443 --stun stun.example.net:3478

  # The same with a self-signed certificate: control prints the fingerprint
  # nodes pin (--control tls://control.example.net:4222?fingerprint=FP)
  lattice control --embedded-nats --nats-listen 203.0.113.10:4222 \
      --advertise-nats tls://control.example.net:4222 --token-file tokens.txt`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&fl.httpListen, "listen-http", "127.0.0.1:8080", `HTTP registration address ("" to disable)`)
	f.BoolVar(&fl.embedded, "embedded-nats", false, "run NATS in-process")
	f.StringVar(&fl.natsListen, "nats-listen", "127.0.0.1:4222", "embedded NATS client address")
	f.StringVar(&fl.natsURL, "nats-url", "", "external NATS to use instead of --embedded-nats: tls://HOST:PORT (?fingerprint=SHA256 to pin), or nats:// on loopback or with ?insecure=1")
	f.StringVar(&fl.natsUser, "nats-user", "", "user on the external NATS")
	f.StringVar(&fl.natsPassFile, "nats-password-file", "", "file holding the external NATS password")
	f.StringVar(&fl.advertise, "advertise-nats", "", "NATS URL given to nodes (default: the one control uses)")
	f.StringVar(&fl.tokenFile, "token-file", "", "file of join tokens (required)")
	f.StringVar(&fl.store, "store", "", "registry: file:PATH or kv:BUCKET (default file:STATE-DIR/registry.json)")
	f.StringVar(&fl.stateDir, "state-dir", filepath.Join(cli.DefaultStateDir(), "control"), "directory for the registry file and embedded JetStream data")
	f.StringVar(&fl.stateDir, "data-dir", filepath.Join(cli.DefaultStateDir(), "control"), "old name of --state-dir")
	_ = f.MarkHidden("data-dir")
	f.StringArrayVar(&fl.relays, "relay", nil, "relay for nodes, ADDR or ADDR,FINGERPRINT (repeatable)")
	f.StringArrayVar(&fl.stuns, "stun", nil, "STUN server for nodes, ADDR (repeatable)")
	f.StringVar(&fl.relaySecretFile, "relay-secret-file", "", "secret shared with the relays, to issue relay tokens (required with --relay)")
	f.DurationVar(&fl.relayTokenTTL, "relay-token-ttl", 24*time.Hour, "how long a relay token is valid")
	f.IntVar(&fl.kvReplicas, "kv-replicas", 0, "replicas of the kv: registry bucket (default: 3 on a NATS cluster, else 1)")
	f.StringVar(&fl.cluster.listen, "nats-cluster", "", "embedded NATS: route address HOST:PORT to form a cluster with other control replicas")
	f.StringVar(&fl.cluster.routes, "nats-routes", "", "embedded NATS: the cluster's route URLs, nats-route://HOST:PORT,... (this server's own may be listed)")
	f.StringVar(&fl.cluster.name, "nats-cluster-name", "lattice", "embedded NATS: cluster name")
	f.StringVar(&fl.cluster.serverName, "nats-server-name", "", "embedded NATS: this server's name, unique in the cluster (default: the hostname)")
	f.StringVar(&fl.cluster.secretFile, "nats-cluster-secret-file", "", "embedded NATS: file holding the routes' shared password (required off loopback)")
	f.StringVar(&fl.calloutSeedFile, "auth-callout-seed-file", "", "external NATS: serve its auth_callout, signing each login's permissions with this account nkey seed (SA...)")
	fl.tls.add(cmd)
	fl.metrics.Add(cmd)
	logger := logFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runControl(cmd, fl, logger) }
	return cmd
}

func runControl(cmd *cobra.Command, fl controlFlags, logger func() *slog.Logger) error {
	if fl.tokenFile == "" {
		return usagef("--token-file is required: nodes need a join token")
	}
	if err := fl.metrics.Check(); err != nil {
		return err
	}
	tokens, err := readTokens(fl.tokenFile)
	if err != nil {
		return err
	}
	if fl.embedded == (fl.natsURL != "") {
		return usagef("use exactly one of --embedded-nats and --nats-url")
	}
	if err := fl.checkServers(); err != nil {
		return err
	}
	cfg := control.Config{
		Network:       netx.OS,
		Logger:        logger(),
		Tokens:        tokens,
		HTTPListen:    fl.httpListen,
		AdvertiseNATS: fl.advertise,
		STUN:          fl.stuns,
	}
	for _, r := range fl.relays {
		addr, fp, _ := strings.Cut(r, ",")
		cfg.Relays = append(cfg.Relays, controlapi.Relay{Addr: addr, Fingerprint: fp})
	}
	if len(cfg.Relays) > 0 {
		if fl.relaySecretFile == "" {
			return usagef("--relay needs --relay-secret-file: nodes need relay tokens")
		}
		secret, err := readRelaySecret(fl.relaySecretFile)
		if err != nil {
			return err
		}
		ttl := fl.relayTokenTTL
		cfg.RelayToken = func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(secret, k, now.Add(ttl))), nil
		}
	}
	store := fl.store
	if store == "" {
		store = "file:" + filepath.Join(fl.stateDir, "registry.json")
	}
	kind, arg, _ := strings.Cut(store, ":")
	var where string // the registry, as control reports it at startup
	switch {
	case kind == "file" && arg != "":
		if fl.store == "" {
			if err := os.MkdirAll(fl.stateDir, 0o700); err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
		}
		where = arg
		st, err := control.OpenFileStoreWith(arg, control.FileStoreOptions{Logger: cfg.Logger})
		if err != nil {
			return err
		}
		// After control stops (deferred later, so run first): the
		// registry is left as one snapshot, its journal empty.
		defer func() {
			if err := st.Close(); err != nil {
				cfg.Logger.Error("close the registry", "err", err)
			}
		}()
		cfg.Store = st
	case kind == "kv" && arg != "":
		cfg.KVBucket = arg
		where = "JetStream bucket " + arg
	default:
		return usagef("--store %q: want file:PATH or kv:BUCKET", store)
	}
	cfg.KVReplicas = fl.kvReplicas
	if fl.calloutSeedFile != "" && fl.embedded {
		return usagef("--auth-callout-seed-file is for --nats-url; the embedded NATS checks logins itself")
	}
	if fl.embedded {
		cfg.EmbeddedNATS = &control.EmbeddedNATSConfig{Network: netx.OS, Listen: fl.natsListen, Logger: cfg.Logger}
		if err := fl.cluster.apply(cfg.EmbeddedNATS); err != nil {
			return err
		}
		if cfg.KVBucket != "" {
			cfg.EmbeddedNATS.StoreDir = filepath.Join(fl.stateDir, "jetstream")
			if err := os.MkdirAll(cfg.EmbeddedNATS.StoreDir, 0o700); err != nil {
				return fmt.Errorf("state dir: %w", err)
			}
			where += " (data in " + cfg.EmbeddedNATS.StoreDir + ")"
		}
	} else {
		if fl.cluster.listen != "" || fl.cluster.routes != "" {
			return usagef("--nats-cluster and --nats-routes are for --embedded-nats; an external NATS forms its own cluster")
		}
		cfg.NATSURL, cfg.NATSUser = fl.natsURL, fl.natsUser
		if fl.calloutSeedFile != "" {
			seed, err := cli.ReadSecretFile(fl.calloutSeedFile)
			if err != nil {
				return err
			}
			cfg.AuthCallout = &control.AuthCallout{IssuerSeed: bytes.TrimSpace(seed)}
		}
		if fl.natsPassFile != "" {
			b, err := cli.ReadSecretFile(fl.natsPassFile)
			if err != nil {
				return err
			}
			cfg.NATSPassword = strings.TrimSpace(string(b))
		}
	}
	listens := []string{fl.httpListen}
	if fl.embedded {
		listens = append(listens, fl.natsListen)
	}
	ct, err := fl.tls.resolve(fl.stateDir, listens, time.Now())
	if err != nil {
		return err
	}
	cfg.TLS = ct.cfg
	if cfg.AdvertiseNATS, err = ct.advertise(fl.advertise, fl.embedded); err != nil {
		return err
	}
	srv, err := control.New(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "control: registry in %s\n", where)
	natsURL := fl.advertise
	if n := srv.NATS(); n != nil {
		fmt.Fprintf(out, "control: NATS on %s\n", n.URL())
		if natsURL == "" {
			natsURL = n.URL()
		}
	}
	if u := srv.HTTPURL(); u != "" {
		fmt.Fprintf(out, "control: HTTP registration on %s/v1/register\n", u)
	}
	ct.report(out, natsURL, srv.HTTPURL(), srv.RegisterKey())
	stopMetrics, err := fl.metrics.Start(cmd.Context(), out, "control", cfg.Logger, controlCollector{srv.Stats})
	if err != nil {
		return err
	}
	defer stopMetrics()
	<-cmd.Context().Done()
	st := srv.Stats()
	fmt.Fprintf(out, "control: stopped (%d registered, %d refused)\n", st.Registered, st.Refused)
	return nil
}

// checkServers checks what control hands to nodes (relays, STUN servers,
// the NATS URLs they connect to) and the token lifetime, so that a typo
// fails here rather than in every node that joins.
func (fl controlFlags) checkServers() error {
	for _, r := range fl.relays {
		addr, fp, _ := strings.Cut(r, ",")
		if err := cli.CheckHostPort(addr, false); err != nil {
			return usagef("--relay %q: %v (ADDR or ADDR,FINGERPRINT)", r, err)
		}
		if _, err := relay.ParseFingerprint(fp); fp != "" && err != nil {
			return usagef("--relay %q: fingerprint %q: want %d hex bytes (SHA-256, as the relay prints it)", r, fp, sha256.Size)
		}
	}
	for _, s := range fl.stuns {
		if err := cli.CheckHostPort(s, false); err != nil {
			return usagef("--stun %q: %v", s, err)
		}
	}
	for _, f := range []struct{ flag, urls string }{{"advertise-nats", fl.advertise}, {"nats-url", fl.natsURL}} {
		if f.urls == "" {
			continue
		}
		if err := controlapi.CheckServers(controlapi.SplitURLs(f.urls)); err != nil {
			return usagef("--%s %q: want tls://HOST:PORT or nats://HOST:PORT, comma-separated: %v", f.flag, f.urls, err)
		}
	}
	if fl.stateDir == "" {
		return usagef("--state-dir is empty: give a directory")
	}
	if fl.relayTokenTTL <= 0 {
		return usagef("--relay-token-ttl %v: must be positive", fl.relayTokenTTL)
	}
	if fl.kvReplicas < 0 {
		return usagef("--kv-replicas %d: must not be negative (0: 3 on a NATS cluster, else 1)", fl.kvReplicas)
	}
	return nil
}

// readRelaySecret reads the secret relay and control share, as both read
// it: surrounding space trimmed, at least relay.MinSecretSize bytes.
func readRelaySecret(path string) ([]byte, error) {
	secret, err := cli.ReadSecretFile(path)
	if err != nil {
		return nil, err
	}
	secret = bytes.TrimSpace(secret)
	if len(secret) < relay.MinSecretSize {
		return nil, fmt.Errorf("relay secret in %s is %d bytes; use at least %d", path, len(secret), relay.MinSecretSize)
	}
	return secret, nil
}

// readTokens parses a token file: "TOKEN [RFC3339-EXPIRY] [tags=T1,T2]"
// per line.
func readTokens(path string) ([]control.JoinToken, error) {
	b, err := cli.ReadSecretFile(path)
	if err != nil {
		return nil, err
	}
	var out []control.JoinToken
	first := map[string]int{} // token → the line it is on
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" {
			continue
		}
		fields := strings.Fields(text)
		t := control.JoinToken{Value: fields[0]}
		if len(fields) > 3 {
			return nil, fmt.Errorf("%s:%d: want TOKEN [EXPIRY] [tags=T1,T2], got %d fields", path, line, len(fields))
		}
		for _, f := range fields[1:] {
			if list, ok := strings.CutPrefix(f, "tags="); ok {
				if t.Tags != nil {
					return nil, fmt.Errorf("%s:%d: tags= given twice", path, line)
				}
				t.Tags = []string{}
				for tag := range strings.SplitSeq(list, ",") {
					if !controlapi.ValidName(tag) {
						return nil, fmt.Errorf("%s:%d: tag %q: use 1-63 lowercase letters, digits and inner hyphens", path, line, tag)
					}
					t.Tags = append(t.Tags, tag)
				}
				continue
			}
			if !t.Expires.IsZero() {
				return nil, fmt.Errorf("%s:%d: %q: an expiry was given already; tags go as tags=T1,T2", path, line, f)
			}
			exp, err := time.Parse(time.RFC3339, f)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: expiry %q is not RFC 3339 (e.g. 2027-01-01T00:00:00Z)", path, line, f)
			}
			t.Expires = exp
		}
		if len(t.Value) < 16 {
			return nil, fmt.Errorf("%s:%d: token is %d characters; use at least 16", path, line, len(t.Value))
		}
		if l, dup := first[t.Value]; dup {
			// Which line's expiry and tags would hold is anyone's guess.
			return nil, fmt.Errorf("%s:%d: the token on line %d again; keep one line per token", path, line, l)
		}
		first[t.Value] = line
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		// A line longer than the scanner's buffer ends the scan: fail
		// rather than silently drop the tokens after it.
		return nil, fmt.Errorf("%s: %w (lines are at most %d bytes)", path, err, bufio.MaxScanTokenSize)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	return out, nil
}

// apply makes e one server of the cluster the flags describe, if any.
func (c clusterFlags) apply(e *control.EmbeddedNATSConfig) error {
	if c.listen == "" {
		if c.routes != "" {
			return usagef("--nats-routes needs --nats-cluster (this server's route address)")
		}
		return nil
	}
	cl := &control.NATSCluster{Name: c.name, Listen: c.listen, Routes: controlapi.SplitURLs(c.routes)}
	if c.secretFile != "" {
		b, err := cli.ReadSecretFile(c.secretFile)
		if err != nil {
			return err
		}
		cl.Secret = strings.TrimSpace(string(b))
		if len(cl.Secret) < 16 {
			return fmt.Errorf("cluster secret in %s is %d bytes; use at least 16", c.secretFile, len(cl.Secret))
		}
	}
	e.Cluster = cl
	e.ServerName = c.serverName
	if e.ServerName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--nats-server-name not given and no hostname: %w", err)
		}
		e.ServerName = h
	}
	return nil
}
