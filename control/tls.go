package control

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/latticelab/lattice/internal/atomicfile"
	"github.com/latticelab/lattice/relay"
)

// Files SelfSignedTLS keeps in its directory.
const (
	SelfSignedCertFile        = "cert.pem"
	SelfSignedKeyFile         = "key.pem"
	SelfSignedFingerprintFile = "fingerprint"
)

// tlsHandshakeTimeout bounds a NATS client's TLS handshake: an accepted
// connection that never completes one holds a goroutine until then.
const tlsHandshakeTimeout = 5 * time.Second

// LoadTLS reads a PEM certificate (chain) and key for control's listeners.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	if err := checkPrivate(keyFile); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("control: load TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// SelfSignedTLS returns control's self-signed certificate, kept in dir so
// that its fingerprint, which nodes pin, survives restarts. The first call
// makes one with relay.SelfSigned (the tree's one maker) and writes the
// certificate, the key (0600) and the fingerprint, each atomically; an
// expired one is replaced, which breaks existing pins, so the fingerprint
// file changes too. now is the verifying clock's (see relay.SelfSigned).
func SelfSignedTLS(dir string, now time.Time) (*tls.Config, string, error) {
	certPath, keyPath := filepath.Join(dir, SelfSignedCertFile), filepath.Join(dir, SelfSignedKeyFile)
	cert, err := loadSelfSigned(certPath, keyPath, now)
	if err != nil {
		return nil, "", err
	}
	if cert == nil {
		c, err := relay.SelfSigned(now)
		if err != nil {
			return nil, "", fmt.Errorf("control: %w", err)
		}
		if err := storeSelfSigned(dir, c); err != nil {
			return nil, "", err
		}
		cert = &c
	}
	fp := relay.CertFingerprint(cert.Certificate[0])
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}, fp, nil
}

// loadSelfSigned returns the stored certificate, or nil when there is none
// or it has expired.
func loadSelfSigned(certPath, keyPath string, now time.Time) (*tls.Certificate, error) {
	if _, err := os.Stat(certPath); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err := checkPrivate(keyPath); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("control: self-signed certificate in %s: %w (delete %s and %s to make a new one; nodes must then pin its fingerprint)",
			filepath.Dir(certPath), err, certPath, keyPath)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("control: self-signed certificate %s: %w", certPath, err)
	}
	if now.After(leaf.NotAfter) {
		return nil, nil
	}
	return &cert, nil
}

func storeSelfSigned(dir string, c tls.Certificate) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("control: TLS directory: %w", err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return fmt.Errorf("control: encode TLS key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
	fp := relay.CertFingerprint(c.Certificate[0]) + "\n"
	// The key goes first: a certificate without its key is refused on the
	// next start, a key without its certificate is simply replaced.
	for _, f := range []struct {
		name string
		b    []byte
		mode os.FileMode
	}{{SelfSignedKeyFile, keyPEM, 0o600}, {SelfSignedCertFile, certPEM, 0o644}, {SelfSignedFingerprintFile, []byte(fp), 0o644}} {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.name), f.b, f.mode); err != nil {
			return fmt.Errorf("control: store self-signed certificate: %w", err)
		}
	}
	return nil
}

// checkPrivate refuses a key file others may read.
func checkPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("control: TLS key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("control: TLS key %s has mode %v; make it private: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	return nil
}

// serverTLS is what a listener presents: tc with at least TLS 1.2.
func serverTLS(tc *tls.Config) (*tls.Config, error) {
	if len(tc.Certificates) == 0 && tc.GetCertificate == nil && tc.GetConfigForClient == nil {
		return nil, errors.New("control: TLS config has no certificate")
	}
	c := tc.Clone()
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	return c, nil
}

// Fingerprint is the fingerprint of the certificate control presents (see
// relay.CertFingerprint) for nodes to pin, "" without TLS or when the
// certificate is chosen per handshake.
func (s *Server) Fingerprint() string {
	tc := s.cfg.TLS
	if tc == nil || len(tc.Certificates) == 0 || len(tc.Certificates[0].Certificate) == 0 {
		return ""
	}
	return relay.CertFingerprint(tc.Certificates[0].Certificate[0])
}

// embeddedNATSConfig is the embedded server's configuration: Config.TLS
// applies to it unless it has a TLS configuration of its own.
func (s *Server) embeddedNATSConfig() EmbeddedNATSConfig {
	c := *s.cfg.EmbeddedNATS
	if c.TLS == nil {
		c.TLS = s.cfg.TLS
	}
	return c
}
