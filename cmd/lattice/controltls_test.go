package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/cli"
)

// TestControlTLSSelfSigned: control with --tls-self-signed serves NATS and
// HTTP over TLS, prints the pin and keeps it across a restart; a node pins
// it with --control-fingerprint (NATS) or ?fingerprint= (HTTPS) and comes
// up, and the token never shows in either's output.
func TestControlTLSSelfSigned(t *testing.T) {
	const token = "cli-tls-token-0123456789"
	tokens := writeFile(t, "tokens", token+"\n", 0o600)
	state := t.TempDir()
	args := []string{"control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
		"--token-file", tokens, "--state-dir", state, "--tls-self-signed"}
	out, errOut, stop := start(t, args...)
	fpRE := regexp.MustCompile(`control: TLS self-signed certificate in (\S+), fingerprint ([0-9a-f]{64})`)
	natsRE := regexp.MustCompile(`control: NATS on (tls://[0-9.:]+)\n`)
	httpRE := regexp.MustCompile(`control: HTTP registration on (https://[0-9.:]+)/v1/register`)
	require.Eventually(t, func() bool { return fpRE.MatchString(out.String()) }, 10*time.Second, 10*time.Millisecond, "%s%s", out, errOut)
	m := fpRE.FindStringSubmatch(out.String())
	assert.Equal(t, filepath.Join(state, "tls"), m[1])
	fp := m[2]
	b, err := os.ReadFile(filepath.Join(state, "tls", control.SelfSignedFingerprintFile))
	require.NoError(t, err)
	assert.Equal(t, fp+"\n", string(b))
	natsURL, httpURL := natsRE.FindStringSubmatch(out.String())[1], httpRE.FindStringSubmatch(out.String())[1]
	joinRE := func(u string) *regexp.Regexp {
		return regexp.MustCompile(`control: nodes join with --control '(` + regexp.QuoteMeta(u+"?fingerprint="+fp) + `&key=([0-9a-f]{64}))'`)
	}
	require.Regexp(t, joinRE(natsURL), out.String())
	regKey := joinRE(natsURL).FindStringSubmatch(out.String())[2]
	joinHTTP := joinRE(httpURL).FindStringSubmatch(out.String())
	require.NotNil(t, joinHTTP, "%s", out)
	assert.Equal(t, regKey, joinHTTP[2], "one register key for both listeners")

	tokenFile := writeFile(t, "token", token+"\n", 0o600)
	for _, tc := range []struct {
		name, node string
		args       []string
	}{
		{"nats, --control-fingerprint", "tls-nats", []string{"--control", natsURL, "--control-fingerprint", fp}},
		{"https, fingerprint in the URL", "tls-https", []string{"--control", httpURL + "?fingerprint=" + fp}},
		{"the printed join URL, with the register key", "tls-join", []string{"--control", joinHTTP[1]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upArgs := append([]string{"up", "--name", tc.node, "--token-file", tokenFile, "--state-dir", "mem:",
				"--userspace", "--port", "0", "--listen-addr", "127.0.0.1", "-v"}, tc.args...)
			uout, uerr, ustop := start(t, upArgs...)
			require.Eventually(t, func() bool { return strings.Contains(uout.String(), "up: "+tc.node+" (") }, 30*time.Second, 20*time.Millisecond, "%s%s", uout, uerr)
			assert.Equal(t, exitOK, ustop(), "%s", uerr)
			assert.NotContains(t, uout.String()+uerr.String(), token)
		})
	}
	assert.Equal(t, exitOK, stop())
	assert.NotContains(t, out.String()+errOut.String(), token)

	// A restart keeps the certificate and the register key, so the pins
	// and keys nodes hold stay good.
	out2, errOut2, stop2 := start(t, args...)
	require.Eventually(t, func() bool { return strings.Contains(out2.String(), "nodes join with") }, 10*time.Second, 10*time.Millisecond, "%s%s", out2, errOut2)
	assert.Equal(t, fp, fpRE.FindStringSubmatch(out2.String())[2])
	assert.Contains(t, out2.String(), "&key="+regKey+"'", "the register key changed across a restart")
	assert.Equal(t, exitOK, stop2())
}

// TestControlTLSFlags: the TLS choice follows the listeners and flags, and
// wrong combinations say what to do.
func TestControlTLSFlags(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name      string
		fl        controlTLSFlags
		listens   []string
		wantTLS   bool
		wantPin   bool
		wantUsage string
	}{
		{"loopback stays plaintext", controlTLSFlags{}, []string{"127.0.0.1:8080", "127.0.0.1:4222"}, false, false, ""},
		{"http off", controlTLSFlags{}, []string{"", "[::1]:4222"}, false, false, ""},
		{"off loopback self-signs", controlTLSFlags{}, []string{"", "10.1.2.3:4222"}, true, true, ""},
		{"every address self-signs", controlTLSFlags{}, []string{"0.0.0.0:8080"}, true, true, ""},
		{"empty host self-signs", controlTLSFlags{}, []string{":4222"}, true, true, ""},
		{"insecure", controlTLSFlags{insecure: true}, []string{"0.0.0.0:4222"}, false, false, ""},
		{"self-signed on loopback", controlTLSFlags{selfSigned: true}, []string{"127.0.0.1:4222"}, true, true, ""},
		{"cert without key", controlTLSFlags{cert: "c.pem"}, nil, false, false, "--tls-cert and --tls-key go together"},
		{"cert and self-signed", controlTLSFlags{cert: "c", key: "k", selfSigned: true}, nil, false, false, "not both"},
		{"insecure and TLS", controlTLSFlags{insecure: true, selfSigned: true}, nil, false, false, "--insecure turns TLS off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fl.resolve(t.TempDir(), tc.listens, now)
			if tc.wantUsage != "" {
				var ue usageError
				require.ErrorAs(t, err, &ue)
				assert.Contains(t, err.Error(), tc.wantUsage)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantTLS, got.cfg != nil)
			assert.Equal(t, tc.wantPin, got.fingerprint != "")
		})
	}

	pinned := controlTLS{cfg: nil}
	u, err := pinned.advertise("nats://x:4222", true)
	require.NoError(t, err)
	assert.Equal(t, "nats://x:4222", u, "plaintext control advertises what it is told")
	ct, err := (&controlTLSFlags{selfSigned: true}).resolve(t.TempDir(), nil, now)
	require.NoError(t, err)
	_, err = ct.advertise("nats://control.example.net:4222", true)
	require.ErrorContains(t, err, "advertise tls://HOST:PORT")
	u, err = ct.advertise("tls://control.example.net:4222", true)
	require.NoError(t, err)
	assert.Equal(t, "tls://control.example.net:4222?fingerprint="+ct.fingerprint, u)

	var trust cli.TrustFlags
	_, err = trust.Apply("nats://10.1.2.3:4222")
	require.ErrorIs(t, err, controlapi.ErrPlaintext)
	trust.Insecure = true
	u, err = trust.Apply("nats://10.1.2.3:4222")
	require.NoError(t, err)
	assert.Equal(t, "nats://10.1.2.3:4222?insecure=1", u)
}

// TestNodeRefusesPlaintextOffLoopback: up and sandbox start refuse a
// plaintext control off loopback at once, with a usage error saying what
// to use instead; nothing is dialed (the URL alone decides).
func TestNodeRefusesPlaintextOffLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"up", "--control", "nats://192.0.2.1:4222", "--token", "t", "--state-dir", "mem:", "--userspace"},
		{"up", "--control", "http://192.0.2.1:8080", "--token", "t", "--state-dir", "mem:", "--userspace"},
		{"sandbox", "start", "--name", "a", "--control", "nats://192.0.2.1:4222", "--token", "t", "--state-dir", "mem:"},
	} {
		t.Run(strings.Join(args[:3], " "), func(t *testing.T) {
			var out, errOut strings.Builder
			code := execute(t.Context(), args, &out, &errOut)
			assert.Equal(t, exitUsage, code, "%s", errOut.String())
			assert.Contains(t, errOut.String(), "plaintext control connection to a non-loopback address")
			assert.Contains(t, errOut.String(), "--insecure")
		})
	}
}
