package node

import (
	"log/slog"
	"testing"
	"time"

	"github.com/pion/stun/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoPairBackoff: attempts that find no pair with the same candidates
// three times in a row may back off to RetryNoPair; anything else keeps
// RetryMax.
func TestNoPairBackoff(t *testing.T) {
	const (
		hostA  = "udp4 host 192.168.1.2:51820 (resolved: 192.168.1.2:51820)"
		srflxA = "udp4 srflx 203.0.113.10:51820 related 0.0.0.0:0 (resolved: 203.0.113.10:51820)"
		srflxB = "udp4 srflx 203.0.113.11:40000 related 0.0.0.0:0 (resolved: 203.0.113.11:40000)"
		moved  = "udp4 srflx 203.0.113.11:40002 related 0.0.0.0:0 (resolved: 203.0.113.11:40002)"
	)
	type try struct{ local, remote []string }
	same := try{[]string{hostA, srflxA}, []string{srflxB}}
	for _, tc := range []struct {
		name     string
		attempts []try
		want     time.Duration
	}{
		{"two failures", []try{same, same}, time.Minute},
		{"three failures, same candidates", []try{same, same, same}, 15 * time.Minute},
		{"same candidates in another order", []try{same, same, {[]string{srflxA, hostA}, []string{srflxB}}}, 15 * time.Minute},
		{"the peer's mapping moved", []try{same, same, {same.local, []string{moved}}}, time.Minute},
		{"no STUN answer here (UDP blocked)", []try{{[]string{hostA}, same.remote}, {[]string{hostA}, same.remote}, {[]string{hostA}, same.remote}}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ICEConfig{}
			cfg.defaults()
			p := &peer{env: &peerEnv{cfg: cfg, log: slog.New(slog.DiscardHandler)}, attempt: &attempt{}}
			for _, a := range tc.attempts {
				p.report = &ICEReport{LocalCandidates: a.local, RemoteCandidates: a.remote}
				p.noteNoPair()
			}
			assert.Equal(t, tc.want, p.retryMax())
		})
	}
}

// TestConsentAnswer: the mux's STUN stream gives up the answers to our
// consent requests (their transaction ID, a Binding success) and nothing
// else.
func TestConsentAnswer(t *testing.T) {
	table := newConsentTable(nil)
	path := &Path{}
	var id [stun.TransactionIDSize]byte
	copy(id[:], "0123456789ab")
	table.pending[id] = consentSent{path: path, at: time.Now().Add(-30 * time.Millisecond).UnixNano()}
	build := func(typ stun.MessageType, tid [stun.TransactionIDSize]byte) []byte {
		m, err := stun.Build(stun.NewTransactionIDSetter(tid), typ, stun.Fingerprint)
		require.NoError(t, err)
		return m.Raw
	}
	other := id
	other[0] = 'x'
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"a request with our ID", build(stun.BindingRequest, id), false},
		{"a success with another ID", build(stun.BindingSuccess, other), false},
		{"too short", []byte{1, 1, 0, 0}, false},
		{"our answer", build(stun.BindingSuccess, id), true},
		{"our answer again", build(stun.BindingSuccess, id), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, table.answer(tc.pkt))
		})
	}
	assert.NotZero(t, path.answered.Load())
	assert.GreaterOrEqual(t, path.RTT(), 30*time.Millisecond)
}

// TestJitter: RFC 7675's ±20%, and every value in range.
func TestJitter(t *testing.T) {
	for range 1000 {
		d := jitter(5*time.Second, 20)
		require.GreaterOrEqual(t, d, 4*time.Second)
		require.LessOrEqual(t, d, 6*time.Second)
	}
	assert.Equal(t, time.Duration(0), jitter(0, 20))
}

// FuzzConsentAnswer: any datagram the mux calls STUN goes through answer
// first; it never panics and takes only a Binding success that names a
// request in flight.
func FuzzConsentAnswer(f *testing.F) {
	m, err := stun.Build(stun.NewTransactionIDSetter([stun.TransactionIDSize]byte{1, 2, 3}), stun.BindingSuccess, stun.Fingerprint)
	require.NoError(f, err)
	f.Add(m.Raw)
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		table := newConsentTable(nil)
		var id [stun.TransactionIDSize]byte
		id[0], id[1], id[2] = 1, 2, 3
		table.pending[id] = consentSent{path: &Path{}}
		took := table.answer(b)
		if took && (len(b) < 20 || b[0] != 1 || b[1] != 1 || [stun.TransactionIDSize]byte(b[8:20]) != id) {
			t.Fatalf("took %x", b)
		}
	})
}
