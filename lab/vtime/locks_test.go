package vtime

import (
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/device"
)

// slowDialer hands out in-process connections to an embedded nats-server,
// after dialDelay of the bubble's clock once slow is set: a dial over a
// network that takes time, which nats.go's reconnect makes while it holds
// the connection's lock.
type slowDialer struct {
	srv  *server.Server
	slow atomic.Bool
}

const dialDelay = time.Second

func (d *slowDialer) Dial(_, _ string) (net.Conn, error) {
	if d.slow.Load() {
		time.Sleep(dialDelay)
	}
	return d.srv.InProcessConn()
}

// TestNATSReconnectLockDurable publishes while nats.go reconnects. The
// reconnect holds the connection's lock across its dial (and its CONNECT
// and PONG), so the publish waits for the lock while the dial waits for
// the bubble's clock. Unpatched, that lock wait is not durable and the
// clock never reaches the dial's end (the 20-node soak stopped so at every
// NAT reboot); with the overlay's lock it is, and the publish goes out
// exactly when the dial ends.
func TestNATSReconnectLockDurable(t *testing.T) {
	needNATSLock(t)
	dog := Watch(WatchdogConfig{Name: t.Name(), Timeout: watchdogAfter, OnStop: func(err error) {
		panic(err) // the bubble cannot be woken: end the binary with the stacks
	}})
	defer func() { require.NoError(t, dog.Stop()) }()
	synctest.Test(t, func(t *testing.T) {
		stop := dog.Pulse()
		defer stop()
		srv, err := server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true})
		require.NoError(t, err)
		srv.Start()
		defer srv.Shutdown()
		require.True(t, srv.ReadyForConnections(time.Second))

		d := &slowDialer{srv: srv}
		reconnected := make(chan struct{}, 1)
		nc, err := nats.Connect("nats://lab", nats.SetCustomDialer(d), nats.ReconnectWait(time.Hour),
			nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
		require.NoError(t, err)
		defer nc.Close()
		sub, err := nc.SubscribeSync("vtime.lock")
		require.NoError(t, err)
		require.NoError(t, nc.Flush())

		d.slow.Store(true)
		start := time.Now()
		require.NoError(t, nc.ForceReconnect())
		time.Sleep(10 * time.Millisecond) // the reconnect is in its dial, holding the lock
		require.NoError(t, nc.Publish("vtime.lock", []byte("during the reconnect")))
		assert.Equal(t, dialDelay, time.Since(start), "the publish waited for the reconnect's dial, exactly")
		<-reconnected
		msg, err := sub.NextMsg(time.Second)
		require.NoError(t, err)
		assert.Equal(t, "during the reconnect", string(msg.Data))
	})
}

// TestWireGuardTimerLockDurable fires a wireguard-go timer again while its
// first expiration still runs and waits on the clock, as a handshake
// retransmission does when the Bind waits on the network. The second firing
// waits for the timer's running lock; unpatched that wait is not durable
// and the clock never reaches the first expiration's end (the 20-node soak
// stopped so after a NAT reboot); with the overlay's lock the second
// expiration runs exactly when the first returns.
func TestWireGuardTimerLockDurable(t *testing.T) {
	needNATSLock(t)
	dog := Watch(WatchdogConfig{Name: t.Name(), Timeout: watchdogAfter, OnStop: func(err error) {
		panic(err) // the bubble cannot be woken: end the binary with the stacks
	}})
	defer func() { require.NoError(t, dog.Stop()) }()
	synctest.Test(t, func(t *testing.T) {
		stop := dog.Pulse()
		defer stop()
		start := time.Now()
		var ran []time.Duration
		done := make(chan struct{})
		timer := (&device.Peer{}).NewTimer(func(*device.Peer) {
			ran = append(ran, time.Since(start))
			if len(ran) == 1 {
				time.Sleep(10 * time.Second) // the first expiration waits on the network
				return
			}
			close(done)
		})
		timer.Mod(time.Second)
		time.Sleep(2 * time.Second) // the first expiration runs
		timer.Mod(time.Second)      // the second fires at 3 s and waits for the first
		<-done
		timer.DelSync()
		assert.Equal(t, []time.Duration{time.Second, 11 * time.Second}, ran)
	})
}

// needNATSLock stops the test when this build lacks the overlay's durable
// locks, as needShim does for gVisor's sleepers.
func needNATSLock(t *testing.T) {
	t.Helper()
	switch l := plainLock(); {
	case l == "":
	case !patched() && !*requireShim:
		t.Skip("vtime: " + l + "; " + HowTo)
	default:
		t.Fatalf("vtime: %s: regenerate the overlay with scripts/vtime-flags.sh", l)
	}
}
