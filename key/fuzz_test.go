package key

import (
	"encoding/base64"
	"strings"
	"testing"
)

func FuzzParsePublic(f *testing.F) {
	f.Add("1wNLXk6SC1Oiy7pwIkcnmjpYg27h6pq/Su+v1dU3n14=")
	f.Add("AAAA")
	f.Add("!!!")
	f.Add(base64.StdEncoding.EncodeToString(make([]byte, 33)))
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublic(s)
		if err != nil {
			if !k.IsZero() {
				t.Fatalf("error %v with a non-zero key", err)
			}
			return
		}
		again, err := ParsePublic(k.String())
		if err != nil || again != k {
			t.Fatalf("%q parsed as %v, which does not parse back: %v", s, k, err)
		}
		var u Public
		if err := u.UnmarshalText([]byte(s)); err != nil || u != k {
			t.Fatalf("UnmarshalText(%q) = %v, %v; ParsePublic gave %v", s, u, err, k)
		}
	})
}

func FuzzParsePublicHex(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add("abc")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublicHex(s)
		if err != nil {
			return
		}
		if !strings.EqualFold(k.Hex(), s) {
			t.Fatalf("%q parsed as %s", s, k.Hex())
		}
	})
}

func FuzzParsePrivate(f *testing.F) {
	f.Add("KAirxhrgPmtRo5yhPIB6Kq35QHV4JLgshwU5ya2E1Hc=")
	f.Add("s3cr3t!!")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePrivate(s)
		if err != nil {
			if len(s) >= 4 && strings.Contains(err.Error(), s) {
				t.Fatalf("error quotes the secret input: %v", err)
			}
			return
		}
		again, err := ParsePrivate(k.RevealBase64())
		if err != nil || !again.Equal(k) {
			t.Fatalf("%q does not round-trip: %v", s, err)
		}
		_ = k.Public()
	})
}

// FuzzOpenFrom opens arbitrary bytes as a box from a peer: nothing
// panics and nothing opens, since only the peer can seal; and the peer's
// genuine message of those bytes opens, but not once changed (a flipped
// bit, a cut) or attributed to the wrong sender. The seeds hold no genuine
// box: SealTo's nonce is random, so one would differ in every fuzz worker.
func FuzzOpenFrom(f *testing.F) {
	// Distinct after X25519's clamping, which clears the low three bits.
	me, peer := PrivateFromRaw([Size]byte{8: 1}), PrivateFromRaw([Size]byte{8: 2})
	f.Add([]byte("an ICE offer"), uint16(0), uint8(0))
	f.Add([]byte("an ICE offer"), uint16(30), uint8(1))
	f.Add(make([]byte, 39), uint16(5), uint8(0))
	f.Add([]byte{}, uint16(0), uint8(0))
	f.Add(make([]byte, 40), uint16(64), uint8(0x80))
	f.Fuzz(func(t *testing.T, b []byte, at uint16, flip uint8) {
		if _, ok := me.OpenFrom(peer.Public(), b); ok {
			t.Fatalf("opened %d bytes that the peer never sealed", len(b))
		}
		// A genuine message changed at one byte must fail too.
		msg := peer.SealTo(me.Public(), b)
		if got, ok := me.OpenFrom(peer.Public(), msg); !ok || string(got) != string(b) {
			t.Fatal("a genuine message did not open to its cleartext")
		}
		if flip != 0 {
			msg[int(at)%len(msg)] ^= flip
		} else {
			msg = msg[:int(at)%len(msg)]
		}
		if _, ok := me.OpenFrom(peer.Public(), msg); ok {
			t.Fatal("a changed message opened")
		}
		if _, ok := me.OpenFrom(me.Public(), peer.SealTo(me.Public(), b)); ok {
			t.Fatal("opened as from the wrong sender")
		}
	})
}

// FuzzSharedOpen opens arbitrary bytes with a Shared: nothing panics and
// nothing opens that the peer did not seal; the peer's genuine box opens
// with the Shared whether sealed with SealTo or the peer's Shared, and not
// once changed.
func FuzzSharedOpen(f *testing.F) {
	me, peer := PrivateFromRaw([Size]byte{8: 1}), PrivateFromRaw([Size]byte{8: 2})
	f.Add([]byte("an ICE offer"), uint16(0), uint8(0))
	f.Add([]byte("an ICE offer"), uint16(30), uint8(1))
	f.Add(make([]byte, 40), uint16(64), uint8(0x80))
	f.Add([]byte{}, uint16(0), uint8(0))
	mine, theirs := me.Shared(peer.Public()), peer.Shared(me.Public())
	f.Fuzz(func(t *testing.T, b []byte, at uint16, flip uint8) {
		if _, ok := mine.Open(b); ok {
			t.Fatalf("opened %d bytes that the peer never sealed", len(b))
		}
		for _, msg := range [][]byte{peer.SealTo(me.Public(), b), theirs.Seal(b)} {
			if got, ok := mine.Open(msg); !ok || string(got) != string(b) {
				t.Fatal("a genuine message did not open to its cleartext")
			}
			if flip != 0 {
				msg[int(at)%len(msg)] ^= flip
			} else {
				msg = msg[:int(at)%len(msg)]
			}
			if _, ok := mine.Open(msg); ok {
				t.Fatal("a changed message opened")
			}
		}
	})
}
