package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/relay"
	"github.com/latticelab/lattice/stun"
)

// TestNetcheckCommand: against an RFC 5780 STUN server and a relay on
// loopback, netcheck reports no NAT, endpoint-independent behaviour and
// both relay transports' handshake times, as JSON and as text; a dead
// STUN server reads as UDP blocked.
func TestNetcheckCommand(t *testing.T) {
	srv, err := stun.NewServer(stun.Config{Network: netx.OS,
		Primary: netip.MustParseAddrPort("127.0.0.1:0"), Alternate: netip.MustParseAddrPort("127.0.0.2:0")})
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { srv.Close() })
	rs, err := relay.NewServer(relay.ServerConfig{Network: netx.OS, Addr: "127.0.0.1:0",
		Secret: []byte("netcheck-test-secret-0123456789abcdef"), TLS: meshtest.SelfSignedTLS(t)})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	args := []string{"netcheck", "--stun", srv.Addr().String(), "--relay", rs.Addr().String() + "," + rs.Fingerprint(), "--wait", "200ms", "--tries", "2"}

	var out, errb bytes.Buffer
	require.Equal(t, exitOK, execute(context.Background(), append(args, "--json"), &out, &errb), errb.String())
	var rep netcheckReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	assert.True(t, rep.STUN.UDP)
	assert.False(t, rep.STUN.NATed)
	assert.Equal(t, "none", rep.NAT)
	assert.Equal(t, srv.Addr(), rep.STUN.BehaviorServer)
	require.NotNil(t, rep.STUN.Mapping, out.String())
	assert.Equal(t, stun.EndpointIndependent, *rep.STUN.Mapping)
	require.Len(t, rep.Relays, 1)
	require.NotNil(t, rep.Relays[0].QUICMs, rep.Relays[0].QUICError)
	require.NotNil(t, rep.Relays[0].TCPMs, rep.Relays[0].TCPError)
	assert.Positive(t, *rep.Relays[0].QUICMs)

	out.Reset()
	require.Equal(t, exitOK, execute(context.Background(), args, &out, &errb), errb.String())
	for _, want := range []string{"UDP:            yes", "NAT:            none", "Mapping:        endpoint-independent", "Relay " + rs.Addr().String() + ": quic "} {
		assert.Contains(t, out.String(), want)
	}

	out.Reset()
	dead := []string{"netcheck", "--stun", "127.0.0.1:9", "--wait", "100ms", "--tries", "1", "--json"}
	require.Equal(t, exitOK, execute(context.Background(), dead, &out, &errb), errb.String())
	rep = netcheckReport{}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	assert.False(t, rep.STUN.UDP)
	assert.Equal(t, "udp-blocked", rep.NAT)

	errb.Reset()
	assert.Equal(t, exitUsage, execute(context.Background(), []string{"netcheck", "--state-dir", t.TempDir()}, &out, &errb))
	assert.Contains(t, errb.String(), "give --stun HOST:PORT (and --relay), or run where 'lattice up' runs: no running node at")
	errb.Reset()
	assert.Equal(t, exitUsage, execute(context.Background(), []string{"netcheck", "--relay", rs.Addr().String()}, &out, &errb))
	assert.Contains(t, errb.String(), "give at least one --stun")
}

// TestNetcheckAnnouncedServers: without --stun and --relay, netcheck checks
// the STUN server and relay control announced to the running node (read
// from its status socket): the report names that STUN server and times
// the pinned relay on both transports.
func TestNetcheckAnnouncedServers(t *testing.T) {
	srv, err := stun.NewServer(stun.Config{Network: netx.OS,
		Primary: netip.MustParseAddrPort("127.0.0.1:0"), Alternate: netip.MustParseAddrPort("127.0.0.2:0")})
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { srv.Close() })
	secret := writeFile(t, "relay.secret", "netcheck-test-secret-0123456789abcdef\n", 0o600)
	rout, rerr, _ := start(t, "relay", "--listen", "127.0.0.1:0", "--secret-file", secret)
	relayRE := regexp.MustCompile(`relay: serving QUIC and TCP on (127\.0\.0\.1:\d+)\n[\s\S]*fingerprint ([0-9a-f]+)`)
	require.Eventually(t, func() bool { return relayRE.MatchString(rout.String()) }, 20*time.Second, 20*time.Millisecond, "%s%s", rout, rerr)
	m := relayRE.FindStringSubmatch(rout.String())
	relayAddr, fp := m[1], m[2]

	token := writeFile(t, "token", "netcheck-test-token-0123456789\n", 0o600)
	cout, cerr, _ := start(t, "control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "",
		"--token-file", token, "--data-dir", t.TempDir(), "--stun", srv.Addr().String(), "--relay", relayAddr+","+fp, "--relay-secret-file", secret)
	joinRE := regexp.MustCompile(`control: NATS on (nats://127\.0\.0\.1:\d+)`)
	require.Eventually(t, func() bool { return joinRE.MatchString(cout.String()) }, 20*time.Second, 20*time.Millisecond, "%s%s", cout, cerr)
	state := t.TempDir()
	uout, uerr, _ := start(t, "up", "--name", "checker", "--control", joinRE.FindStringSubmatch(cout.String())[1], "--token-file", token,
		"--state-dir", state, "--userspace", "--port", "0", "--listen-addr", "127.0.0.1")
	require.Eventually(t, func() bool { return strings.Contains(uout.String(), "up: status on") }, 30*time.Second, 20*time.Millisecond, "%s%s", uout, uerr)

	var out, errb bytes.Buffer
	require.Equal(t, exitOK, execute(context.Background(), []string{"netcheck", "--state-dir", state, "--wait", "200ms", "--tries", "2", "--json"}, &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "netcheck: the servers control announced to the node in "+state)
	var rep netcheckReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	assert.True(t, rep.STUN.UDP)
	assert.Equal(t, srv.Addr(), rep.STUN.BehaviorServer, "the announced STUN server")
	require.Len(t, rep.Relays, 1)
	assert.Equal(t, relayAddr, rep.Relays[0].Addr)
	assert.NotNil(t, rep.Relays[0].QUICMs, rep.Relays[0].QUICError)
	assert.NotNil(t, rep.Relays[0].TCPMs, "pinned by the announced fingerprint: %s", rep.Relays[0].TCPError)
}

// TestNetcheckFromControl: with no node anywhere, netcheck --control and a
// join token asks control (over NATS and over HTTP) for the STUN server
// and pinned relay it announces and checks them; a wrong token is refused
// naming the reason, and an unreachable control says it could not be
// asked.
func TestNetcheckFromControl(t *testing.T) {
	srv, err := stun.NewServer(stun.Config{Network: netx.OS,
		Primary: netip.MustParseAddrPort("127.0.0.1:0"), Alternate: netip.MustParseAddrPort("127.0.0.2:0")})
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { srv.Close() })
	rs, err := relay.NewServer(relay.ServerConfig{Network: netx.OS, Addr: "127.0.0.1:0",
		Secret: []byte("netcheck-test-secret-0123456789abcdef"), TLS: meshtest.SelfSignedTLS(t)})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })

	secret := writeFile(t, "relay.secret", "netcheck-test-secret-0123456789abcdef\n", 0o600)
	token := writeFile(t, "token", "netcheck-test-token-0123456789\n", 0o600)
	cout, cerr, _ := start(t, "control", "--embedded-nats", "--nats-listen", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
		"--token-file", token, "--data-dir", t.TempDir(), "--stun", srv.Addr().String(),
		"--relay", rs.Addr().String()+","+rs.Fingerprint(), "--relay-secret-file", secret)
	natsRE := regexp.MustCompile(`control: NATS on (nats://127\.0\.0\.1:\d+)`)
	httpRE := regexp.MustCompile(`control: HTTP registration on (http://127\.0\.0\.1:\d+)/v1/register`)
	require.Eventually(t, func() bool { return natsRE.MatchString(cout.String()) && httpRE.MatchString(cout.String()) },
		20*time.Second, 20*time.Millisecond, "%s%s", cout, cerr)

	for _, url := range []string{natsRE.FindStringSubmatch(cout.String())[1], httpRE.FindStringSubmatch(cout.String())[1]} {
		var out, errb bytes.Buffer
		args := []string{"netcheck", "--control", url, "--token-file", token, "--state-dir", t.TempDir(), "--wait", "200ms", "--tries", "2", "--json"}
		require.Equal(t, exitOK, execute(context.Background(), args, &out, &errb), errb.String())
		assert.Contains(t, errb.String(), "netcheck: the servers control at "+url+" announces")
		var rep netcheckReport
		require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
		assert.True(t, rep.STUN.UDP)
		assert.Equal(t, srv.Addr(), rep.STUN.BehaviorServer, "the announced STUN server")
		require.Len(t, rep.Relays, 1)
		assert.Equal(t, rs.Addr().String(), rep.Relays[0].Addr)
		assert.NotNil(t, rep.Relays[0].QUICMs, rep.Relays[0].QUICError)
		assert.NotNil(t, rep.Relays[0].TCPMs, "pinned by the announced fingerprint: %s", rep.Relays[0].TCPError)

		errb.Reset()
		bad := []string{"netcheck", "--control", url, "--token", "not-the-token-0123456789"}
		assert.Equal(t, exitFailure, execute(context.Background(), bad, &out, &errb))
		assert.Contains(t, errb.String(), "control at "+url+" refused the join token: join token not accepted")
	}

	var out, errb bytes.Buffer
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"unreachable", []string{"--control", "nats://127.0.0.1:9", "--token-file", token}, exitFailure,
			"ask control at nats://127.0.0.1:9 for its servers: servers: connect to nats://127.0.0.1:9: "},
		{"no token", []string{"--control", "nats://127.0.0.1:9"}, exitUsage, "a join token is required"},
		{"both", []string{"--control", "nats://127.0.0.1:9", "--stun", srv.Addr().String()}, exitUsage, "give --control or --stun/--relay, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LATTICE_TOKEN", "")
			errb.Reset()
			assert.Equal(t, tc.code, execute(context.Background(), append([]string{"netcheck"}, tc.args...), &out, &errb))
			assert.Contains(t, errb.String(), tc.wantErr)
		})
	}
}

func TestNATType(t *testing.T) {
	b := func(v stun.Behavior) *stun.Behavior { return &v }
	ei, ad, apd := stun.EndpointIndependent, stun.AddressDependent, stun.AddressAndPortDependent
	for _, tc := range []struct {
		rep  stun.Report
		want string
	}{
		{stun.Report{}, "udp-blocked"},
		{stun.Report{UDP: true}, "none"},
		{stun.Report{UDP: true, NATed: true, Mapping: b(ei), Filtering: b(ei)}, "full-cone"},
		{stun.Report{UDP: true, NATed: true, Mapping: b(ei), Filtering: b(ad)}, "restricted-cone"},
		{stun.Report{UDP: true, NATed: true, Mapping: b(ei), Filtering: b(apd)}, "port-restricted-cone"},
		{stun.Report{UDP: true, NATed: true, Mapping: b(apd), Filtering: b(apd)}, "symmetric"},
		{stun.Report{UDP: true, NATed: true, MappingVaries: true}, "symmetric"},
		{stun.Report{UDP: true, NATed: true}, "unknown"},
	} {
		assert.Equal(t, tc.want, natType(tc.rep))
	}
}
