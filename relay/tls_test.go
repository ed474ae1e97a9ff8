package relay

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSelfSigned: the certificate is valid at the now it was given (here a
// virtual clock's 2000-01-01), not at the wall clock's.
func TestSelfSigned(t *testing.T) {
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	cert, err := SelfSigned(now)
	require.NoError(t, err)
	require.Len(t, cert.Certificate, 1)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	assert.Equal(t, now.Add(-time.Hour), leaf.NotBefore)
	assert.Equal(t, now.Add(365*24*time.Hour), leaf.NotAfter)
	assert.Equal(t, []string{selfSignedName}, leaf.DNSNames)

	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	verify := func(at time.Time) error {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: selfSignedName, CurrentTime: at})
		return err
	}
	require.NoError(t, verify(now))
	var invalid x509.CertificateInvalidError
	require.ErrorAs(t, verify(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), &invalid)
	assert.Equal(t, x509.Expired, invalid.Reason)

	again, err := SelfSigned(now)
	require.NoError(t, err)
	other, err := x509.ParseCertificate(again.Certificate[0])
	require.NoError(t, err)
	assert.NotEqual(t, leaf.SerialNumber, other.SerialNumber, "two certificates share a serial")
	assert.NotEqual(t, CertFingerprint(leaf.Raw), CertFingerprint(other.Raw))
}
