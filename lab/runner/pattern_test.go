package runner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPatternBytes: every Read gives byte(i*31 + i>>8) at offset i, past
// the table's 64 KiB too (the receiving side checks the SHA-256 of what
// it gets against the same stream).
func TestPatternBytes(t *testing.T) {
	for _, size := range []int{1, 255, 32 << 10, 1 << 16, 1<<16 + 1, 200_000} {
		p := make([]byte, size)
		n, err := pattern{}.Read(p)
		require.NoError(t, err)
		require.Equal(t, size, n)
		for i, b := range p {
			if b != byte(i*31+i>>8) {
				t.Fatalf("size %d: byte %d is %d, want %d", size, i, b, byte(i*31+i>>8))
			}
		}
	}
}
