package relay

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// selfSignedName is the subject and DNS name of the certificate a server
// generates for itself. Clients of such a server pin its fingerprint, so
// the name is never checked; it only makes the certificate self-describing.
const selfSignedName = "lattice-relay"

// CertFingerprint returns the fingerprint clients pin: the lowercase hex
// SHA-256 of the leaf certificate's DER encoding, as `openssl x509
// -fingerprint -sha256` prints it without the colons.
func CertFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// ParseFingerprint accepts CertFingerprint's form, upper or lower case,
// with or without colons between bytes.
func ParseFingerprint(s string) ([sha256.Size]byte, error) {
	var fp [sha256.Size]byte
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) != sha256.Size {
		return fp, fmt.Errorf("relay: fingerprint %q: want %d hex bytes", s, sha256.Size)
	}
	copy(fp[:], b)
	return fp, nil
}

// serverTLS builds the server's TLS configuration and the fingerprint of
// its certificate ("" when the certificate is chosen per handshake).
func serverTLS(cfg *ServerConfig) (*tls.Config, string, error) {
	var tc *tls.Config
	switch {
	case cfg.TLS != nil:
		tc = cfg.TLS.Clone()
	case cfg.CertFile != "" || cfg.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("relay: load certificate: %w", err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}}
	default:
		cert, err := SelfSigned(cfg.Now())
		if err != nil {
			return nil, "", err
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	if len(tc.Certificates) == 0 && tc.GetCertificate == nil && tc.GetConfigForClient == nil {
		return nil, "", errors.New("relay: TLS config has no certificate")
	}
	enforceLRP(tc)
	fp := ""
	if len(tc.Certificates) > 0 && len(tc.Certificates[0].Certificate) > 0 {
		fp = CertFingerprint(tc.Certificates[0].Certificate[0])
	}
	return tc, fp, nil
}

// enforceLRP sets what every server TLS configuration of LRP has, the
// static one and those a GetConfigForClient returns: TLS 1.3, which QUIC
// requires and TCP gets too so that both transports offer the same
// security, and LRP's ALPN alone.
func enforceLRP(tc *tls.Config) {
	tc.MinVersion = tls.VersionTLS13
	tc.NextProtos = []string{ALPN}
}

// SelfSigned makes the certificate a relay presents when it is given none:
// ECDSA P-256, named lattice-relay, valid from an hour before now for a
// year. Clients pin its fingerprint (CertFingerprint) rather than check the
// name. now comes from the clock of whoever verifies the certificate: a lab
// in virtual time (which starts at 2000-01-01) passes its clock's now, or
// the certificate is not yet valid there.
func SelfSigned(now time.Time) (tls.Certificate, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("relay: self-signed certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("relay: self-signed certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: selfSignedName},
		DNSNames:     []string{selfSignedName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("relay: self-signed certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

// clientTLS builds the client's TLS configuration. With a fingerprint pin
// the certificate chain and name are not verified; the pin replaces them.
func clientTLS(cfg *ClientConfig, host string) (*tls.Config, error) {
	tc := &tls.Config{
		ServerName: cfg.ServerName,
		RootCAs:    cfg.RootCAs,
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
	}
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	if cfg.Fingerprint == "" {
		return tc, nil
	}
	pin, err := ParseFingerprint(cfg.Fingerprint)
	if err != nil {
		return nil, err
	}
	// The pin is checked in VerifyConnection, which runs even when chain
	// verification is skipped.
	tc.InsecureSkipVerify = true // #nosec G402 -- replaced by the fingerprint pin
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("relay: server sent no certificate")
		}
		if sha256.Sum256(cs.PeerCertificates[0].Raw) != pin {
			return fmt.Errorf("relay: server certificate %s does not match the pinned fingerprint", CertFingerprint(cs.PeerCertificates[0].Raw))
		}
		return nil
	}
	return tc, nil
}
