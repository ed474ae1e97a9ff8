package relay

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPreauthAdmit(t *testing.T) {
	a, b, c := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	t0 := time.Unix(1000, 0)
	old := t0.Add(minEvictAge) // the first arrivals are old enough to evict by then
	type arrival struct {
		src netip.Addr
		at  time.Time
	}
	tests := []struct {
		name         string
		max, perSrc  int
		arrivals     []arrival
		wantEvicted  []int // indexes of arrivals evicted, in order
		wantRefused  []int // indexes refused on arrival
		wantPerSrc   []bool
		wantAll      int
		wantFromSrcA int
	}{
		{
			name: "under both bounds", max: 4, perSrc: 2,
			arrivals: []arrival{{a, t0}, {b, t0}, {a, t0}},
			wantAll:  3, wantFromSrcA: 2,
		},
		{
			name: "source full: its oldest goes", max: 10, perSrc: 2,
			arrivals:    []arrival{{a, t0}, {b, t0}, {a, t0}, {a, old}},
			wantEvicted: []int{0}, wantPerSrc: []bool{true},
			wantAll: 3, wantFromSrcA: 2,
		},
		{
			name: "table full: the oldest of all goes", max: 3, perSrc: 3,
			arrivals:    []arrival{{b, t0}, {a, t0}, {c, t0}, {a, old}},
			wantEvicted: []int{0}, wantPerSrc: []bool{false},
			wantAll: 3, wantFromSrcA: 2,
		},
		{
			name: "source full of young handshakes: the newcomer is refused", max: 10, perSrc: 2,
			arrivals:    []arrival{{a, t0}, {a, t0}, {a, t0.Add(minEvictAge - 1)}},
			wantRefused: []int{2}, wantPerSrc: []bool{true},
			wantAll: 2, wantFromSrcA: 2,
		},
		{
			name: "table full of young handshakes: the newcomer is refused", max: 2, perSrc: 2,
			arrivals:    []arrival{{b, t0}, {c, t0}, {a, t0.Add(minEvictAge - 1)}},
			wantRefused: []int{2}, wantPerSrc: []bool{false},
			wantAll: 2, wantFromSrcA: 0,
		},
		{
			name: "one per source", max: 10, perSrc: 1,
			arrivals:    []arrival{{a, t0}, {a, old}, {a, old.Add(minEvictAge)}},
			wantEvicted: []int{0, 1}, wantPerSrc: []bool{true, true},
			wantAll: 1, wantFromSrcA: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPreauth(tt.max, tt.perSrc)
			closed := map[int]bool{}
			entries := map[*pending]int{}
			var evicted, refused []int
			var perSrc []bool
			for i, ar := range tt.arrivals {
				e, out, ps := p.admit(ar.src, ar.at, func() { closed[i] = true })
				if e == nil {
					refused = append(refused, i)
					perSrc = append(perSrc, ps)
					continue
				}
				entries[e] = i
				for _, v := range out {
					evicted = append(evicted, entries[v.victim])
					perSrc = append(perSrc, v.perSource)
					v.victim.evict()
				}
			}
			assert.Equal(t, tt.wantEvicted, evicted, "evicted")
			assert.Equal(t, tt.wantRefused, refused, "refused")
			assert.Equal(t, tt.wantPerSrc, perSrc, "which bound")
			for _, i := range tt.wantEvicted {
				assert.True(t, closed[i], "evicted %d not closed", i)
			}
			all, fromA := p.len(a)
			assert.Equal(t, tt.wantAll, all)
			assert.Equal(t, tt.wantFromSrcA, fromA)
			for e, i := range entries {
				assert.Equal(t, !closed[i], p.done(e), "done(%d)", i)
				assert.False(t, p.done(e), "second done(%d)", i)
			}
			all, _ = p.len(a)
			assert.Zero(t, all)
			assert.Empty(t, p.bySrc, "emptied source lists must go")
		})
	}
}

func TestPreauthPressured(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	now := time.Unix(1000, 0)
	p := newPreauth(8, 4)
	assert.False(t, p.pressured(a))
	p.admit(a, now, func() {})
	assert.False(t, p.pressured(a))
	p.admit(a, now, func() {})
	assert.True(t, p.pressured(a), "half of a source's bound")
	assert.False(t, p.pressured(b))
	p.admit(b, now, func() {})
	p.admit(b, now, func() {})
	assert.True(t, p.pressured(netip.MustParseAddr("192.0.2.9")), "half of the table")
}

func TestSourceOf(t *testing.T) {
	tests := []struct {
		name string
		in   net.Addr
		want string
	}{
		{"ipv4", &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 9}, "192.0.2.7"},
		{"ipv4-mapped", &net.UDPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 9}, "192.0.2.7"},
		{"ipv6 by /64", &net.UDPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 9}, "2001:db8:1:2::"},
		{"other kinds by their string", fakeAddr("198.51.100.1:443"), "198.51.100.1"},
		{"unparseable", fakeAddr("pipe"), "invalid IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, sourceOfNet(tt.in).String())
		})
	}
	same := sourceOf(netip.MustParseAddr("2001:db8:1:2::5"))
	require.Equal(t, same, sourceOf(netip.MustParseAddr("2001:db8:1:2:ffff::9")))
	require.NotEqual(t, same, sourceOf(netip.MustParseAddr("2001:db8:1:3::5")))
}

type fakeAddr string

func (fakeAddr) Network() string  { return "fake" }
func (a fakeAddr) String() string { return string(a) }
