package stun_test

import (
	"net"
	"testing"
	"time"

	pion "github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/netx"
	"github.com/latticelab/lattice/stun"
)

// TestClientsPadTheirRequests: Bind and Discover pad their requests, so
// that a server that never answers larger than the request (ours) still
// gives them FINGERPRINT and the RFC 5780 attributes, and the answers to
// Discover are no larger than its requests.
func TestClientsPadTheirRequests(t *testing.T) {
	s := rfc5780Server(t)
	c := client(t)
	_, err := stun.Bind(ctxT(t, 5*time.Second), c, s.Addr())
	require.NoError(t, err)
	_, err = stun.Discover(ctxT(t, 10*time.Second), netx.OS, s.Addr(), stun.Options{Wait: 200 * time.Millisecond, Tries: 2})
	require.NoError(t, err)
	st := s.Stats()
	assert.Zero(t, st.Unanswered)
	// Discover's answers leave out only MAPPED-ADDRESS and SOFTWARE, which
	// it does not read; Bind's keep FINGERPRINT but no more.
	assert.Equal(t, st.Responses, st.Trimmed)
}

// refusingServer answers the first request, which must carry PADDING, with
// 420 naming PADDING (as an RFC 8489 server without RFC 5780 does), and
// the second, which must not, with success. It returns when both are done.
func refusingServer(t *testing.T, srv net.PacketConn, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 2048)
	for i := range 2 {
		if err := srv.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Error(err)
			return
		}
		n, from, err := srv.ReadFrom(buf)
		if err != nil {
			t.Error(err)
			return
		}
		req := new(pion.Message)
		if err := pion.Decode(buf[:n], req); err != nil {
			t.Error(err)
			return
		}
		if got, want := req.Contains(pion.AttrPadding), i == 0; got != want {
			t.Errorf("request %d: PADDING %t, want %t", i, got, want)
		}
		var resp *pion.Message
		if i == 0 {
			resp, err = pion.Build(pion.NewTransactionIDSetter(req.TransactionID), pion.BindingError,
				pion.CodeUnknownAttribute, pion.UnknownAttributes{pion.AttrPadding})
		} else {
			ua := from.(*net.UDPAddr)
			resp, err = pion.Build(pion.NewTransactionIDSetter(req.TransactionID), pion.BindingSuccess,
				&pion.XORMappedAddress{IP: ua.IP, Port: ua.Port})
		}
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := srv.WriteTo(resp.Raw, from); err != nil {
			t.Error(err)
			return
		}
	}
}

// TestBindPaddingRefused: a server that refuses PADDING is asked again
// without it.
func TestBindPaddingRefused(t *testing.T) {
	srv, c := client(t), client(t)
	done := make(chan struct{})
	go refusingServer(t, srv, done)
	mapped, err := stun.Bind(ctxT(t, 5*time.Second), c, localAddr(t, srv))
	<-done
	require.NoError(t, err)
	assert.Equal(t, localAddr(t, c), mapped)
}

// TestDiscoverPaddingRefused: a server that refuses PADDING does not know
// RFC 5780, which Discover reports as ErrNoOtherAddress.
func TestDiscoverPaddingRefused(t *testing.T) {
	srv := client(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		if !assert.NoError(t, srv.SetReadDeadline(time.Now().Add(5*time.Second))) {
			return
		}
		n, from, err := srv.ReadFrom(buf)
		if !assert.NoError(t, err) {
			return
		}
		req := new(pion.Message)
		if !assert.NoError(t, pion.Decode(buf[:n], req)) {
			return
		}
		resp, err := pion.Build(pion.NewTransactionIDSetter(req.TransactionID), pion.BindingError,
			pion.CodeUnknownAttribute, pion.UnknownAttributes{pion.AttrPadding})
		if assert.NoError(t, err) {
			_, err = srv.WriteTo(resp.Raw, from)
			assert.NoError(t, err)
		}
	}()
	_, err := stun.Discover(ctxT(t, 5*time.Second), netx.OS, localAddr(t, srv), stun.Options{Wait: 500 * time.Millisecond, Tries: 2})
	<-done
	require.ErrorIs(t, err, stun.ErrNoOtherAddress)
	var er *stun.ErrorResponse
	require.ErrorAs(t, err, &er)
	assert.Equal(t, 420, er.Code)
}
