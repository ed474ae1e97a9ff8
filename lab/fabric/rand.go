package fabric

import (
	mrand "math/rand"
	"math/rand/v2"
	"sync"
)

// seededRand is a thread-safe, seeded source for a host's gVisor stack:
// ephemeral ports, ICMP echo identifiers and TCP initial sequence numbers
// come from it, so a topology built with the same seed picks the same ones.
// Lab randomness only needs to be repeatable, not secret.
type seededRand struct {
	mu sync.Mutex
	r  *rand.ChaCha8
}

var _ mrand.Source64 = (*seededRand)(nil)

func newSeededRand(seed uint64) *seededRand {
	var s [32]byte
	for i := range 4 {
		v := seed + uint64(i)*0x9e3779b97f4a7c15
		for j := range 8 {
			s[i*8+j] = byte(v >> (8 * j))
		}
	}
	return &seededRand{r: rand.NewChaCha8(s)}
}

func (s *seededRand) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Uint64()
}

func (s *seededRand) Int63() int64 { return int64(s.Uint64() >> 1) }

func (s *seededRand) Seed(int64) {} // seeded once, at creation

// Read fills b; it serves as the stack's SecureRNG.
func (s *seededRand) Read(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Read(b)
}
