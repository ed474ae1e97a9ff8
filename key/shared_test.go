package key

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedMatchesSealTo: a box sealed with a Shared opens with OpenFrom
// and the other way round, in both directions, and a third key's Shared
// opens neither.
func TestSharedMatchesSealTo(t *testing.T) {
	a, b, c := NewPrivate(), NewPrivate(), NewPrivate()
	ab, ba, cb := a.Shared(b.Public()), b.Shared(a.Public()), c.Shared(b.Public())
	assert.True(t, ab.Equal(&ba), "both sides compute the same key")
	assert.False(t, ab.Equal(&cb))

	got, ok := b.OpenFrom(a.Public(), ab.Seal([]byte("to b")))
	require.True(t, ok)
	assert.Equal(t, "to b", string(got))
	got, ok = ba.Open(a.SealTo(b.Public(), []byte("from a")))
	require.True(t, ok)
	assert.Equal(t, "from a", string(got))

	sealed := ab.Seal([]byte("hello"))
	_, ok = cb.Open(sealed)
	assert.False(t, ok, "opened with a third key's Shared")
	tampered := bytes.Clone(sealed)
	tampered[30] ^= 1
	_, ok = ba.Open(tampered)
	assert.False(t, ok, "tampered box opened")
	_, ok = ba.Open(sealed[:39])
	assert.False(t, ok, "short box opened")
	assert.NotEqual(t, sealed[:24], ab.Seal([]byte("hello"))[:24], "nonces repeat")
}

// TestSharedFor: For tells the key a Shared was computed for.
func TestSharedFor(t *testing.T) {
	a, b, c := NewPrivate(), NewPrivate(), NewPrivate()
	var none Shared
	assert.True(t, none.IsZero())
	assert.False(t, none.For(b.Public()), "the zero Shared is for no one")
	ab := a.Shared(b.Public())
	assert.False(t, ab.IsZero())
	assert.True(t, ab.For(b.Public()))
	assert.False(t, ab.For(c.Public()), "a peer's new key needs a new Shared")
}

// TestSharedDoesNotPrint: every way of printing or encoding a Shared
// shows the placeholder or fails.
func TestSharedDoesNotPrint(t *testing.T) {
	a, b := NewPrivate(), NewPrivate()
	s := a.Shared(b.Public())
	raw := fmt.Sprintf("%x", s.k[:])
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %x %X %d %s %q", s, s, s, s, s, s, s, s),
		fmt.Sprintf("%v", &s), fmt.Sprintf("%+v", struct{ S Shared }{s}),
	} {
		assert.NotContains(t, out, raw)
		assert.Contains(t, out, sharedRedacted)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "shared", s)
	assert.NotContains(t, buf.String(), raw)
	assert.True(t, strings.Contains(buf.String(), sharedRedacted), buf.String())
	_, err := json.Marshal(struct{ S Shared }{s})
	require.ErrorIs(t, err, ErrNotMarshaled)
}

// BenchmarkSealShared compares a signal's sealing with SealTo (X25519 on
// every call) and with a cached Shared.
func BenchmarkSealShared(b *testing.B) {
	me, peer := NewPrivate(), NewPrivate()
	msg := make([]byte, 200) // an ICE candidate signal's size
	b.Run("SealTo", func(b *testing.B) {
		for b.Loop() {
			_ = me.SealTo(peer.Public(), msg)
		}
	})
	b.Run("Shared", func(b *testing.B) {
		s := me.Shared(peer.Public())
		for b.Loop() {
			_ = s.Seal(msg)
		}
	})
}
