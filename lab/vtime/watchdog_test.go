package vtime

import (
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWatchdogNamesWhatWaitsOutside blocks a bubble's goroutine on a real
// UDP socket, which no bubble time can wake, while the bubble's main
// goroutine sleeps: the clock stops. The watchdog must report it within
// its timeout, naming the goroutine and its wait, and its OnStop closes the
// socket so the bubble can finish.
func TestWatchdogNamesWhatWaitsOutside(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var conn atomic.Pointer[net.UDPConn]
	got := make(chan error, 1)
	dog := Watch(WatchdogConfig{Name: t.Name(), Timeout: timeout, OnStop: func(err error) {
		got <- err
		if c := conn.Load(); c != nil {
			c.Close()
		}
	}})
	start := time.Now()
	synctest.Test(t, func(t *testing.T) {
		stop := dog.Pulse()
		defer stop()
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		require.NoError(t, err)
		conn.Store(c)
		read := make(chan error)
		go func() { read <- blockOnSocket(c) }()
		time.Sleep(time.Second) // cannot end while the reader waits in netpoll
		assert.Error(t, <-read, "the read ends when OnStop closes the socket")
	})
	wall := time.Since(start)
	err := dog.Stop()
	require.Error(t, err)
	assert.Equal(t, err, <-got)
	assert.Less(t, wall, timeout+5*time.Second, "the watchdog took too long")
	msg := err.Error()
	assert.Contains(t, msg, "virtual time stopped in "+t.Name()+": the bubble's clock stayed at 2000-01-01 00:00:00.000 for ")
	assert.Contains(t, msg, "1 goroutine waits outside the bubble: [IO wait] net.(*conn).Read in github.com/latticelab/lattice/lab/vtime.blockOnSocket\n\n")
	assert.Contains(t, msg, "lab/vtime.blockOnSocket(", "the stack follows")
}

//go:noinline
func blockOnSocket(c *net.UDPConn) error {
	_, err := c.Read(make([]byte, 1))
	return err
}

// TestWatchdogQuietWhileTimeMoves: a bubble whose clock moves (an hour of
// sleeps, each a jump) never trips the watchdog, and its beats do not
// shift the bubble's timers.
func TestWatchdogQuietWhileTimeMoves(t *testing.T) {
	dog := Watch(WatchdogConfig{Name: t.Name(), Timeout: 200 * time.Millisecond, Beat: 7 * time.Second,
		OnStop: func(err error) { t.Errorf("watchdog: %v", err) }})
	synctest.Test(t, func(t *testing.T) {
		stop := dog.Pulse()
		defer stop()
		start := time.Now()
		for range 60 {
			time.Sleep(time.Minute)
		}
		assert.Equal(t, time.Hour, time.Since(start))
	})
	require.NoError(t, dog.Stop())
}

func TestStuck(t *testing.T) {
	dump := []byte("goroutine 1 [running]:\nmain.main()\n\n" +
		"goroutine 7 [select (durable), 2 minutes, synctest bubble 3]:\nexample.com/x.beat()\n\n" +
		"goroutine 8 [IO wait, synctest bubble 3]:\ninternal/poll.runtime_pollWait(0x1)\n\t/go/x.go:1\nnet.(*netFD).Read(0x2)\n\t/go/y.go:2\nnet.(*UDPConn).Read(0x2)\n\t/go/y.go:2\nexample.com/x.read(...)\n\t/x.go:3\n\n" +
		"goroutine 9 [select, synctest bubble 3]:\nexample.com/x.wait()\n\n" +
		"goroutine 10 [IO wait, synctest bubble 31]:\nexample.com/x.other()\n\n" +
		"goroutine 11 [sleep (durable), synctest bubble 3]:\ntime.Sleep(0x1)\n")
	var got [][2]string
	for _, g := range Stuck(dump, 3) {
		got = append(got, [2]string{g.State, g.Where})
	}
	assert.Equal(t, [][2]string{{"IO wait", "net.(*UDPConn).Read in example.com/x.read"}, {"select", "example.com/x.wait"}}, got)
}

// spinFor keeps a bubble goroutine runnable at one instant until release
// is set from outside: work that takes wall time but no bubble time.
func spinFor(release *atomic.Bool) {
	for !release.Load() {
		runtime.Gosched()
	}
}

// writeSpin keeps a bubble goroutine spinning at one instant through a
// write(2) per round, as a send loop retrying at once does, until release
// is set from outside.
func writeSpin(release *atomic.Bool) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		panic(err)
	}
	defer devnull.Close()
	line := []byte("x")
	for !release.Load() {
		_, _ = devnull.Write(line)
	}
}

// TestWatchdogPatientWhileBusy: a bubble whose goroutines keep working at
// one instant (a loaded machine, the race detector) is slow, not stopped:
// the watchdog waits for BusyTimeout, not Timeout, and then names the
// spinning goroutine. That holds for one spinning through a syscall per
// round too, even in the samples that catch it inside the syscall (it
// used to be reported as waiting outside the bubble at Timeout).
func TestWatchdogPatientWhileBusy(t *testing.T) {
	for _, spin := range []struct {
		name string
		f    func(*atomic.Bool)
		want string
	}{
		{"gosched", spinFor, "vtime.spinFor"},
		{"write", writeSpin, "vtime.writeSpin"},
	} {
		for _, tt := range []struct {
			name    string
			busy    time.Duration
			wantErr string
		}{
			{name: "slow", busy: 10 * time.Second},
			{name: "spinning", busy: 400 * time.Millisecond, wantErr: "goroutines kept running all that time at one instant"},
		} {
			t.Run(spin.name+"/"+tt.name, func(t *testing.T) {
				var release atomic.Bool
				dog := Watch(WatchdogConfig{Name: t.Name(), Timeout: 100 * time.Millisecond, BusyTimeout: tt.busy,
					OnStop: func(error) { release.Store(true) }})
				timer := time.AfterFunc(time.Second, func() { release.Store(true) })
				defer timer.Stop()
				synctest.Test(t, func(t *testing.T) {
					stop := dog.Pulse()
					defer stop()
					spin.f(&release)
				})
				err := dog.Stop()
				if tt.wantErr == "" {
					require.NoError(t, err, "a bubble busy for 1 s of wall time is not stopped")
					return
				}
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Contains(t, err.Error(), spin.want)
			})
		}
	}
}
