package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/latticelab/lattice/proxy"
)

func dnsQuery(t testing.TB, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234, RecursionDesired: true})
	require.NoError(t, b.StartQuestions())
	require.NoError(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}))
	q, err := b.Finish()
	require.NoError(t, err)
	return q
}

var web = netip.MustParseAddr("100.64.1.2")

func fakeResolve(name string) (netip.Addr, error) {
	switch name {
	case "web", "web.lattice":
		return web, nil
	case "broken":
		return netip.Addr{}, errors.New("resolver on fire")
	}
	return netip.Addr{}, fmt.Errorf("%w: %q", proxy.ErrNoHost, name)
}

func TestAnswerDNS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		qname   string
		qtype   dnsmessage.Type
		rcode   dnsmessage.RCode
		answers []netip.Addr
	}{
		{"peer", "web.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{web}},
		{"peer with suffix", "web.lattice.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{web}},
		{"no IPv6", "web.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil},
		{"unknown", "nobody.lattice.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"resolver fails", "broken.", dnsmessage.TypeA, dnsmessage.RCodeServerFailure, nil},
		{"other type", "web.", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := answerDNS(dnsQuery(t, tc.qname, tc.qtype), fakeResolve)
			require.NotNil(t, out)
			var p dnsmessage.Parser
			h, err := p.Start(out)
			require.NoError(t, err)
			assert.True(t, h.Response)
			assert.Equal(t, uint16(0x1234), h.ID)
			assert.Equal(t, tc.rcode, h.RCode)
			q, err := p.Question()
			require.NoError(t, err)
			assert.Equal(t, tc.qname, q.Name.String(), "the question is echoed")
			require.NoError(t, p.SkipAllQuestions())
			var got []netip.Addr
			for {
				if _, err := p.AnswerHeader(); err != nil {
					break
				}
				a, err := p.AResource()
				require.NoError(t, err)
				got = append(got, netip.AddrFrom4(a.A))
			}
			assert.Equal(t, tc.answers, got)
		})
	}
	assert.Nil(t, answerDNS([]byte{1, 2, 3}, fakeResolve), "garbage gets no answer")
}

func FuzzAnswerDNS(f *testing.F) {
	f.Add(dnsQuery(f, "web.", dnsmessage.TypeA))
	f.Add(dnsQuery(f, "x.lattice.", dnsmessage.TypeAAAA))
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, q []byte) {
		out := answerDNS(q, fakeResolve)
		if out == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(out)
		if err != nil || !h.Response {
			t.Fatalf("answer does not parse as a response: %v", err)
		}
	})
}

func TestNamespacesUnavailable(t *testing.T) {
	eperm := fmt.Errorf("fork/exec /proc/self/exe: %w", os.ErrPermission)
	for _, tc := range []struct {
		name    string
		sysctls map[string]string
		err     error
		want    string
	}{
		{"debian sysctl", map[string]string{"kernel.unprivileged_userns_clone": "0"}, eperm,
			"unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): set it to 1 (sysctl -w kernel.unprivileged_userns_clone=1), or pass --isolation proxy"},
		{"no user namespaces", map[string]string{"user.max_user_namespaces": "0", "kernel.unprivileged_userns_clone": "1"}, eperm,
			"(user.max_user_namespaces=0): set it above 0"},
		{"apparmor", map[string]string{"kernel.apparmor_restrict_unprivileged_userns": "1"}, eperm,
			"AppArmor profile"},
		{"seccomp", map[string]string{"user.max_user_namespaces": "15000"}, eperm,
			"a seccomp profile (Docker's default, Kubernetes' RuntimeDefault) or a security module forbids unshare/clone with CLONE_NEWUSER"},
		{"other", nil, errors.New("exec format error"), "starting the agent's init: exec format error (or pass --isolation proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := namespacesUnavailable(tc.err, func(name string) (string, bool) {
				v, ok := tc.sysctls[name]
				return v, ok
			})
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, "--isolation proxy")
			assert.ErrorIs(t, err, tc.err)
		})
	}
}

func TestParseIsolation(t *testing.T) {
	for in, want := range map[string]Isolation{"": IsolationNamespace, "namespace": IsolationNamespace, "proxy": IsolationProxy} {
		got, err := ParseIsolation(in)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := ParseIsolation("chroot")
	assert.EqualError(t, err, `isolation "chroot": want namespace or proxy`)
}
