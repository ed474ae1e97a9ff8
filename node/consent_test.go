package node

import (
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recConn records what the mux writes.
type recConn struct {
	*chanConn
	mu  sync.Mutex
	out [][]byte
}

func (r *recConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out = append(r.out, append([]byte(nil), b...))
	return len(b), nil
}

func (r *recConn) written() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.out...)
}

const (
	testLocalUfrag  = "LOCALufrag"
	testRemoteUfrag = "REMOTEufrag"
	testLocalPwd    = "local-password-0123456789"
)

// retiredTable is a consent table answering for one retired agent whose
// path is direct to peer.
func retiredTable(t *testing.T, peer netip.AddrPort) (*consentTable, *recConn, *Path) {
	t.Helper()
	pc := &recConn{chanConn: newChanConn()}
	mux := NewMux(pc, nil)
	t.Cleanup(func() { mux.Close() })
	b := NewBind(mux)
	t.Cleanup(func() { b.Close() })
	p := b.Peer([32]byte{1})
	b.SetDirect(p, peer)
	table := newConsentTable(mux)
	table.respondFor(p, &consentCreds{localUfrag: testLocalUfrag, remoteUfrag: testRemoteUfrag}, testLocalPwd)
	return table, pc, p
}

func bindingRequest(t testing.TB, user, pwd string) *stun.Message {
	t.Helper()
	m, err := stun.Build(stun.TransactionID, stun.BindingRequest, stun.NewUsername(user),
		stun.NewShortTermIntegrity(pwd), stun.Fingerprint)
	require.NoError(t, err)
	return m
}

// TestRespondForRetiredAgent: the peer's checks to a retired agent are
// answered as the agent would (same transaction, the source mapped, under
// our password) and count as the path answering when they come from its
// address; a check with the wrong password is dropped unanswered, and one
// for another agent is left to pion.
func TestRespondForRetiredAgent(t *testing.T) {
	peer := netip.MustParseAddrPort("198.51.100.2:40000")
	table, pc, p := retiredTable(t, peer)

	req := bindingRequest(t, testLocalUfrag+":"+testRemoteUfrag, testLocalPwd)
	require.True(t, table.respond(req.Raw, peer))
	out := pc.written()
	require.Len(t, out, 1)
	resp := &stun.Message{Raw: out[0]}
	require.NoError(t, resp.Decode())
	assert.Equal(t, stun.BindingSuccess, resp.Type)
	assert.Equal(t, req.TransactionID, resp.TransactionID)
	require.NoError(t, stun.NewShortTermIntegrity(testLocalPwd).Check(resp))
	require.NoError(t, stun.Fingerprint.Check(resp))
	var mapped stun.XORMappedAddress
	require.NoError(t, mapped.GetFrom(resp))
	assert.Equal(t, peer.Addr().AsSlice(), []byte(mapped.IP.To4()))
	assert.Equal(t, int(peer.Port()), mapped.Port)
	answered := p.answered.Load()
	assert.NotZero(t, answered, "the peer's check did not count as the path answering")

	// Another address: answered, but not the path's answer.
	p.answered.Store(0)
	require.True(t, table.respond(bindingRequest(t, testLocalUfrag+":"+testRemoteUfrag, testLocalPwd).Raw, netip.MustParseAddrPort("198.51.100.3:40000")))
	assert.Len(t, pc.written(), 2)
	assert.Zero(t, p.answered.Load())

	// Forged: taken and dropped.
	for _, bad := range []*stun.Message{
		bindingRequest(t, testLocalUfrag+":"+testRemoteUfrag, "not-the-password"),
		bindingRequest(t, testLocalUfrag+":someone-else", testLocalPwd),
	} {
		assert.True(t, table.respond(bad.Raw, peer))
	}
	assert.Len(t, pc.written(), 2, "a forged check was answered")
	assert.Zero(t, p.answered.Load(), "a forged check counted as an answer")

	// Not ours: pion's.
	assert.False(t, table.respond(bindingRequest(t, "other:"+testRemoteUfrag, testLocalPwd).Raw, peer))
	assert.False(t, table.respond([]byte("not stun at all, but long enough"), peer))

	table.forget(&consentCreds{localUfrag: testLocalUfrag})
	assert.False(t, table.respond(req.Raw, peer), "answered after forget")
}

// FuzzConsentRespond: whatever arrives on the shared socket, respond never
// panics, and answers only a request that passes our integrity check.
func FuzzConsentRespond(f *testing.F) {
	f.Add(bindingRequest(f, testLocalUfrag+":"+testRemoteUfrag, testLocalPwd).Raw)
	f.Add(bindingRequest(f, testLocalUfrag+":"+testRemoteUfrag, "wrong").Raw)
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		peer := netip.MustParseAddrPort("198.51.100.2:40000")
		table, pc, _ := retiredTable(t, peer)
		table.respond(b, peer)
		if len(pc.written()) == 0 {
			return
		}
		req := &stun.Message{Raw: append([]byte(nil), b...)}
		require.NoError(t, req.Decode())
		require.NoError(t, stun.NewShortTermIntegrity(testLocalPwd).Check(req), "answered a request that fails integrity")
	})
}
