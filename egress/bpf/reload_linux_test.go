package bpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// udpFlow sends numbered datagrams from the client to the server every
// interval until stop, and reports which numbers arrived.
type udpFlow struct {
	sent     uint32
	received map[uint32]bool
	mu       sync.Mutex
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startUDPFlow(t *testing.T, p pair, port int, interval time.Duration) *udpFlow {
	t.Helper()
	var srv *net.UDPConn
	in(t, p.server, func() (err error) {
		srv, err = net.ListenUDP("udp", &net.UDPAddr{Port: port})
		return err
	})
	c, err := dial(t, p, "udp", netip.AddrPortFrom(p.addr(2), uint16(port)), time.Second)
	require.NoError(t, err)
	fl := &udpFlow{received: map[uint32]bool{}, stop: make(chan struct{})}
	fl.wg.Add(2)
	go func() {
		defer fl.wg.Done()
		buf := make([]byte, 64)
		for {
			n, err := srv.Read(buf)
			if err != nil {
				return
			}
			if n == 4 {
				fl.mu.Lock()
				fl.received[binary.BigEndian.Uint32(buf)] = true
				fl.mu.Unlock()
			}
		}
	}()
	go func() {
		defer fl.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-fl.stop:
				return
			case <-tick.C:
			}
			fl.mu.Lock()
			fl.sent++
			seq := fl.sent
			fl.mu.Unlock()
			_, _ = c.Write(binary.BigEndian.AppendUint32(nil, seq))
		}
	}()
	t.Cleanup(func() {
		fl.halt()
		c.Close()
		srv.Close()
		fl.wg.Wait()
	})
	return fl
}

func (fl *udpFlow) halt() {
	select {
	case <-fl.stop:
	default:
		close(fl.stop)
	}
}

// lost waits for the last datagrams to land and returns those missing.
func (fl *udpFlow) lost(t *testing.T) []uint32 {
	t.Helper()
	fl.halt()
	var missing []uint32
	deadline := time.Now().Add(2 * time.Second)
	for {
		fl.mu.Lock()
		missing = missing[:0]
		for i := uint32(1); i <= fl.sent; i++ {
			if !fl.received[i] {
				missing = append(missing, i)
			}
		}
		fl.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rules returns n unrelated deny rules, so each reload changes the table.
func rules(n, salt int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - deny: 198.%d.%d.%d\n    proto: tcp\n    ports: [%d]\n", 18+(i>>16)%2, (i>>8)&0xff, i&0xff, 1+(i+salt)%60000)
	}
	return b.String()
}

// TestReloadUnderTraffic swaps tables while an allowed UDP flow and an
// allowed TCP connection run: no datagram of the flow is lost, the TCP
// connection keeps echoing, and a reload that denies the flow stops it at
// once.
func TestReloadUnderTraffic(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	listenTCP(t, p, 8080)
	allowUDP := "default: deny\nrules:\n  - allow: {S}\n    proto: udp\n    ports: [5000]\n  - allow: {S}\n    ports: [8080]\n"
	f := newFilter(t, p, Config{Policy: mustPolicy(t, p, allowUDP+rules(1000, 0))})
	conn, err := dial(t, p, "tcp", netip.AddrPortFrom(p.addr(2), 8080), time.Second)
	require.NoError(t, err)
	defer conn.Close()
	fl := startUDPFlow(t, p, 5000, time.Millisecond)
	buf := make([]byte, 5)
	for i := range 20 {
		require.NoError(t, f.Reload(mustPolicy(t, p, allowUDP+rules(1000, i+1)), nil))
		require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
		_, err := conn.Write([]byte("hello"))
		require.NoError(t, err)
		_, err = conn.Read(buf)
		require.NoError(t, err, "TCP echo after reload %d", i)
	}
	assert.Empty(t, fl.lost(t), "datagrams lost during 20 reloads of 1,000 rules")

	// Now deny it: the first datagram after Reload returns is dropped.
	fl2 := startUDPFlow(t, p, 5001, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // some datagrams before the switch
	require.NoError(t, f.Reload(mustPolicy(t, p, "default: deny\n"), nil))
	fl2.mu.Lock()
	after := fl2.sent + 1
	fl2.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	fl2.lost(t)
	fl2.mu.Lock()
	defer fl2.mu.Unlock()
	for i := after; i <= fl2.sent; i++ {
		assert.False(t, fl2.received[i], "datagram %d sent after the deny reload arrived", i)
	}
}

// TestBadReloadKeepsOldPolicy gives Reload a policy the kernel table
// cannot hold; the error names why and the old verdicts stand.
func TestBadReloadKeepsOldPolicy(t *testing.T) {
	requireKernel(t)
	p := newPair(t)
	listenTCP(t, p, 8080)
	listenTCP(t, p, 9090)
	f := newFilter(t, p, Config{Policy: mustPolicy(t, p, basePolicy)})
	var deep strings.Builder
	deep.WriteString("default: allow\nrules:\n")
	for i := range MaxClauses + 1 {
		fmt.Fprintf(&deep, "  - deny: {S}\n    ports: [%d]\n", 10000+i)
	}
	err := f.Reload(mustPolicy(t, p, deep.String()), nil)
	assert.EqualError(t, err, fmt.Sprintf("bpf: destination %s/32 is named by %d rules and defaults; the kernel filter walks at most %d", p.addr(2), MaxClauses+2, MaxClauses))
	assert.True(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 8080)), "old allow stands")
	assert.False(t, canConnect(t, p, netip.AddrPortFrom(p.addr(2), 9090)), "old deny stands (the bad policy allowed it)")

	small := Config{Policy: mustPolicy(t, p, basePolicy), MaxEntries: 64}
	g := newFilter(t, newPair(t), small)
	err = g.Reload(mustPolicy(t, p, "rules:\n"+rules(100, 0)), nil)
	assert.ErrorContains(t, err, "bpf: policy needs")
}
