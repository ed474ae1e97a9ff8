package stun_test

import (
	"encoding/binary"
	"testing"
	"time"

	pion "github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func responsePort(port uint16) attr {
	v := make([]byte, 4)
	binary.BigEndian.PutUint16(v, port)
	return attr{pion.AttrResponsePort, v}
}

// TestResponsePort: as an RFC 5780 client measuring a mapping's lifetime
// does (section 4.6), a request from socket X names socket Y's port in
// RESPONSE-PORT: the answer arrives on Y and reports X's address, and
// nothing arrives on X.
func TestResponsePort(t *testing.T) {
	s := rfc5780Server(t)
	x, y := client(t), client(t)
	req := build(t, pion.BindingRequest, responsePort(localAddr(t, y).Port()), pion.Fingerprint)
	send(t, x, s.Addr(), req.Raw)
	m, from := receive(t, y)
	assert.Equal(t, s.Addr(), from, "from the socket the request reached")
	assert.Equal(t, req.TransactionID, m.TransactionID)
	var xor pion.XORMappedAddress
	require.NoError(t, xor.GetFrom(m))
	assert.Equal(t, localAddr(t, x), addrOf(xor.IP, xor.Port), "the mapping of the socket that sent the request")

	require.NoError(t, x.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, _, err := x.ReadFrom(make([]byte, 1500))
	assert.Error(t, err, "no answer to the request's own port")
}

// TestPaddingAnswered: a padded request (RFC 5780 section 7.6: the client
// makes it large, to test fragments) gets a padded answer of the same
// size, PADDING before FINGERPRINT; with RESPONSE-PORT too it is a 400
// (section 6).
func TestPaddingAnswered(t *testing.T) {
	s := rfc5780Server(t)
	c := client(t)
	for _, size := range []int{1400, 3000} {
		req := build(t, pion.BindingRequest, padding(size), pion.Fingerprint)
		m, _ := exchange(t, c, s.Addr(), req)
		assert.Equal(t, pion.BindingSuccess, m.Type)
		assert.Len(t, m.Raw, len(req.Raw), "as large as the request")
		pad, err := m.Get(pion.AttrPadding)
		require.NoError(t, err, "the answer carries PADDING")
		assert.Greater(t, len(pad), size-100)
		require.NoError(t, pion.Fingerprint.Check(m))
		for _, a := range []pion.AttrType{pion.AttrXORMappedAddress, pion.AttrResponseOrigin, pion.AttrOtherAddress} {
			assert.True(t, m.Contains(a), "%v", a)
		}
	}
	req := build(t, pion.BindingRequest, padding(64), responsePort(localAddr(t, c).Port()), pion.Fingerprint)
	m, _ := exchange(t, c, s.Addr(), req)
	var code pion.ErrorCodeAttribute
	require.NoError(t, code.GetFrom(m))
	assert.Equal(t, pion.CodeBadRequest, code.Code)
}
