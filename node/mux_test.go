package node

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClassify(t *testing.T) {
	stunMsg := func(attrLen int) []byte {
		b := make([]byte, 20+attrLen)
		b[0], b[1] = 0x00, 0x01 // binding request
		b[2], b[3] = byte(attrLen>>8), byte(attrLen)
		b[4], b[5], b[6], b[7] = 0x21, 0x12, 0xa4, 0x42
		return b
	}
	wg := func(typ byte, n int) []byte {
		b := make([]byte, n)
		b[0] = typ
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want PacketKind
	}{
		{"stun binding", stunMsg(0), KindSTUN},
		{"stun with attributes", stunMsg(12), KindSTUN},
		{"stun length mismatch", stunMsg(12)[:28], KindOther},
		{"stun without cookie", func() []byte { b := stunMsg(0); b[4] = 0; return b }(), KindOther},
		{"wg initiation", wg(1, 148), KindWireGuard},
		{"wg response", wg(2, 92), KindWireGuard},
		{"wg cookie", wg(3, 64), KindWireGuard},
		{"wg keepalive", wg(4, 32), KindWireGuard},
		{"wg data", wg(4, 32+1424), KindWireGuard},
		{"wg data padded to a 1420-byte MTU", wg(4, 32+1420), KindWireGuard},
		{"wg data too short", wg(4, 31), KindOther},
		{"wg initiation wrong size", wg(1, 147), KindOther},
		{"wg reserved bytes set", func() []byte { b := wg(4, 32); b[2] = 1; return b }(), KindOther},
		{"type 5", wg(5, 32), KindOther},
		{"empty", nil, KindOther},
		{"one byte", []byte{4}, KindOther},
	} {
		assert.Equal(t, tc.want, Classify(tc.b), tc.name)
	}
}

func FuzzClassify(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0})
	f.Add(make([]byte, 148))
	f.Fuzz(func(t *testing.T, b []byte) {
		k := Classify(b)
		if k == KindSTUN && Classify(b) != KindSTUN {
			t.Fatal("not deterministic")
		}
		if k == KindWireGuard && (len(b) < 32 || b[0] < 1 || b[0] > 4) {
			t.Fatalf("%d bytes of type %d called WireGuard", len(b), b[0])
		}
	})
}
