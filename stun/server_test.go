package stun_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	pion "github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/stun"
)

func TestNewServerConfig(t *testing.T) {
	p := netip.MustParseAddrPort("127.0.0.1:3478")
	tests := []struct {
		name    string
		cfg     stun.Config
		wantErr string
	}{
		{name: "plain", cfg: stun.Config{Network: netx.OS, Primary: p}},
		{name: "every address without alternate", cfg: stun.Config{Network: netx.OS, Primary: netip.MustParseAddrPort("0.0.0.0:3478")}},
		{name: "rfc5780", cfg: stun.Config{Network: netx.OS, Primary: p, Alternate: netip.MustParseAddrPort("127.0.0.2:3479")}},
		{name: "rfc5780 picked ports", cfg: stun.Config{Network: netx.OS, Primary: netip.MustParseAddrPort("127.0.0.1:0"), Alternate: netip.MustParseAddrPort("127.0.0.2:0")}},
		{
			name:    "no network",
			cfg:     stun.Config{Primary: p},
			wantErr: "stun: invalid config: Network is required",
		},
		{
			name:    "no primary",
			cfg:     stun.Config{Network: netx.OS},
			wantErr: "stun: invalid config: Primary is required (there is no default listen address)",
		},
		{
			name:    "families differ",
			cfg:     stun.Config{Network: netx.OS, Primary: p, Alternate: netip.MustParseAddrPort("[::1]:3479")},
			wantErr: "stun: invalid config: Primary 127.0.0.1:3478 and Alternate [::1]:3479 are of different address families",
		},
		{
			name:    "unspecified with alternate",
			cfg:     stun.Config{Network: netx.OS, Primary: netip.MustParseAddrPort("0.0.0.0:3478"), Alternate: netip.MustParseAddrPort("127.0.0.2:3479")},
			wantErr: "stun: invalid config: RFC 5780 mode needs specific addresses, got Primary 0.0.0.0:3478 and Alternate 127.0.0.2:3479",
		},
		{
			name:    "same address",
			cfg:     stun.Config{Network: netx.OS, Primary: p, Alternate: netip.MustParseAddrPort("127.0.0.1:3479")},
			wantErr: "stun: invalid config: Alternate 127.0.0.1:3479 has the same address as Primary",
		},
		{
			name:    "same port",
			cfg:     stun.Config{Network: netx.OS, Primary: p, Alternate: netip.MustParseAddrPort("127.0.0.2:3478")},
			wantErr: "stun: invalid config: Alternate 127.0.0.2:3478 has the same port as Primary",
		},
		{
			name:    "software too long",
			cfg:     stun.Config{Network: netx.OS, Primary: p, Software: strings.Repeat("x", 764)},
			wantErr: "stun: invalid config: Software is 764 bytes, more than 763",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := stun.NewServer(tt.cfg)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				assert.ErrorIs(t, err, stun.ErrInvalidConfig)
				return
			}
			require.NoError(t, err)
			assert.NoError(t, s.Close())
		})
	}
}

func TestServerLifecycle(t *testing.T) {
	t.Run("start twice", func(t *testing.T) {
		s := plainServer(t)
		assert.EqualError(t, s.Start(context.Background()), "stun: server already started")
	})
	t.Run("close is idempotent", func(t *testing.T) {
		s := plainServer(t)
		require.NoError(t, s.Close())
		require.NoError(t, s.Close())
	})
	t.Run("start after close", func(t *testing.T) {
		s, err := stun.NewServer(stun.Config{Network: netx.OS, Primary: netip.AddrPortFrom(loopback, 0)})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.ErrorIs(t, s.Start(context.Background()), stun.ErrClosed)
	})
	t.Run("listen fails", func(t *testing.T) {
		// TEST-NET-2 is on no interface here.
		s, err := stun.NewServer(stun.Config{Network: netx.OS, Primary: netip.MustParseAddrPort("198.51.100.1:3478")})
		require.NoError(t, err)
		defer s.Close()
		err = s.Start(context.Background())
		require.ErrorContains(t, err, "stun: start: listen udp4 198.51.100.1:3478: ")
		var oe *net.OpError
		assert.ErrorAs(t, err, &oe)
	})
	t.Run("serve until cancelled", func(t *testing.T) {
		s, err := stun.NewServer(stun.Config{Network: netx.OS, Primary: netip.AddrPortFrom(loopback, 0)})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx) }()
		c := client(t)
		require.Eventually(t, func() bool { return s.Addr().Port() != 0 }, 5*time.Second, 5*time.Millisecond)
		mapped, err := stun.Bind(ctxT(t, 5*time.Second), c, s.Addr())
		require.NoError(t, err)
		assert.Equal(t, localAddr(t, c), mapped)
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after its context ended")
		}
		assert.ErrorIs(t, s.Start(context.Background()), stun.ErrClosed)
	})
}

// TestBindingResponses asks each of an RFC 5780 server's four sockets and
// checks every attribute of the answer.
func TestBindingResponses(t *testing.T) {
	s := rfc5780Server(t)
	c := client(t)
	self := localAddr(t, c)
	for i, dst := range endpoints(s) {
		t.Run(fmt.Sprintf("socket%d", i), func(t *testing.T) {
			m, from := exchange(t, c, dst, build(t, pion.BindingRequest, padding(128), pion.Fingerprint))
			assert.Equal(t, pion.BindingSuccess, m.Type)
			assert.Equal(t, dst, from, "answered from the socket asked")
			assert.NoError(t, pion.Fingerprint.Check(m), "FINGERPRINT")

			var xor pion.XORMappedAddress
			require.NoError(t, xor.GetFrom(m))
			assert.Equal(t, self, addrOf(xor.IP, xor.Port), "XOR-MAPPED-ADDRESS")
			var mapped pion.MappedAddress
			require.NoError(t, mapped.GetFrom(m))
			assert.Equal(t, self, addrOf(mapped.IP, mapped.Port), "MAPPED-ADDRESS")
			var origin pion.ResponseOrigin
			require.NoError(t, origin.GetFrom(m))
			assert.Equal(t, dst, addrOf(origin.IP, origin.Port), "RESPONSE-ORIGIN")
			var other pion.OtherAddress
			require.NoError(t, other.GetFrom(m))
			assert.Equal(t, opposite(s, dst), addrOf(other.IP, other.Port), "OTHER-ADDRESS")
			var sw pion.Software
			require.NoError(t, sw.GetFrom(m))
			assert.Equal(t, stun.DefaultSoftware, sw.String())
		})
	}
}

// TestChangeRequest: every socket honours every CHANGE-REQUEST, and the
// answer really leaves from the socket RESPONSE-ORIGIN names.
func TestChangeRequest(t *testing.T) {
	s := rfc5780Server(t)
	e := endpoints(s)
	c := client(t)
	changed := 0
	for i, dst := range e {
		for _, flags := range []struct{ ip, port bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			t.Run(fmt.Sprintf("socket%d/ip=%t/port=%t", i, flags.ip, flags.port), func(t *testing.T) {
				want := dst
				if flags.ip {
					want = netip.AddrPortFrom(opposite(s, dst).Addr(), want.Port())
				}
				if flags.port {
					want = netip.AddrPortFrom(want.Addr(), opposite(s, dst).Port())
				}
				if want != dst {
					changed++
				}
				m, from := exchange(t, c, dst, build(t, pion.BindingRequest, changeRequest(flags.ip, flags.port), padding(64), pion.Fingerprint))
				require.Equal(t, pion.BindingSuccess, m.Type)
				assert.Equal(t, want, from, "source of the response")
				var origin pion.ResponseOrigin
				require.NoError(t, origin.GetFrom(m))
				assert.Equal(t, want, addrOf(origin.IP, origin.Port), "RESPONSE-ORIGIN")
			})
		}
	}
	st := s.Stats()
	assert.Equal(t, uint64(16), st.Responses)
	assert.Equal(t, uint64(changed), st.Changed)
	assert.Equal(t, uint64(12), st.Changed)
}

func TestErrorResponses(t *testing.T) {
	plain, rfc5780 := plainServer(t), rfc5780Server(t)
	tests := []struct {
		name        string
		server      *stun.Server
		setters     []pion.Setter
		wantCode    pion.ErrorCode
		wantUnknown pion.UnknownAttributes
	}{
		{
			name:        "change-request without alternate",
			server:      plain,
			setters:     []pion.Setter{changeRequest(true, true), pion.Fingerprint},
			wantCode:    pion.CodeUnknownAttribute,
			wantUnknown: pion.UnknownAttributes{pion.AttrChangeRequest},
		},
		{
			name:        "unknown comprehension-required attributes",
			server:      rfc5780,
			setters:     []pion.Setter{attr{0x7F01, []byte("?")}, attr{0xC001, nil}, attr{0x0042, []byte{1, 2, 3, 4}}},
			wantCode:    pion.CodeUnknownAttribute,
			wantUnknown: pion.UnknownAttributes{0x7F01, 0x0042},
		},
		{
			name:     "malformed change-request",
			server:   rfc5780,
			setters:  []pion.Setter{attr{pion.AttrChangeRequest, []byte{6}}},
			wantCode: pion.CodeBadRequest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(t)
			setters := append([]pion.Setter{padding(64)}, tt.setters...)
			m, from := exchange(t, c, tt.server.Addr(), build(t, pion.BindingRequest, setters...))
			assert.Equal(t, pion.BindingError, m.Type)
			assert.Equal(t, tt.server.Addr(), from)
			assert.NoError(t, pion.Fingerprint.Check(m), "FINGERPRINT")
			var ec pion.ErrorCodeAttribute
			require.NoError(t, ec.GetFrom(m))
			assert.Equal(t, tt.wantCode, ec.Code)
			var ua pion.UnknownAttributes
			if tt.wantUnknown == nil {
				assert.Error(t, ua.GetFrom(m), "UNKNOWN-ATTRIBUTES in a %d", ec.Code)
				return
			}
			require.NoError(t, ua.GetFrom(m))
			assert.Equal(t, tt.wantUnknown, ua)
		})
	}
	assert.Equal(t, uint64(1), plain.Stats().UnknownAttribute)
	assert.Equal(t, uint64(1), rfc5780.Stats().UnknownAttribute)
	assert.Equal(t, uint64(1), rfc5780.Stats().BadRequest)
}

// TestGarbageDropped sends a server datagrams it must not answer, then a
// good request: the first thing to come back must be the answer to that,
// and every datagram must be counted.
func TestGarbageDropped(t *testing.T) {
	s := rfc5780Server(t)
	c := client(t)
	good := build(t, pion.BindingRequest)
	badFP := build(t, pion.BindingRequest, pion.Fingerprint)
	badFP.Raw[len(badFP.Raw)-1] ^= 0xFF
	garbage := [][]byte{
		{},
		[]byte("hello"),
		make([]byte, 20),
		badFP.Raw,
		build(t, pion.NewType(pion.MethodBinding, pion.ClassIndication)).Raw,
		build(t, pion.BindingSuccess).Raw,
		build(t, pion.NewType(pion.MethodAllocate, pion.ClassRequest)).Raw,
		append(build(t, pion.BindingRequest).Raw, 0xDE, 0xAD, 0xBE, 0xEF),
		build(t, pion.BindingRequest, attr{0xC000, make([]byte, 8200)}).Raw,
	}
	for _, g := range garbage {
		send(t, c, s.Addr(), g)
	}
	m, _ := exchange(t, c, s.Addr(), good)
	assert.Equal(t, pion.BindingSuccess, m.Type)

	st := s.Stats()
	want := stun.Drops{NotSTUN: 3, BadFingerprint: 1, NotRequest: 2, UnsupportedMethod: 1, Malformed: 1, Oversize: 1}
	assert.Equal(t, want, st.Dropped)
	assert.Equal(t, uint64(len(garbage)+1), st.Datagrams)
	assert.Equal(t, uint64(1), st.Requests)
	assert.Equal(t, uint64(1), st.Responses)
	assert.Zero(t, st.SendErrors+st.ReadErrors)
}
